"""Dispatch and workers end to end: real nodes, real worker processes, real PostgreSQL."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from cronwheel.client import RetryPolicy
from cronwheel.client.worker_policy import max_lease_calls
from cronwheel.devtools.harness import ProcessCluster, read_jsonl, submit_jobs
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

from .helpers import observe_for, proc_state, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = 8
MODULE = "tests.e2e.jobs_module"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=P, lease_ttl_s=3) as c:
        c.start_node("n1")
        c.start_node("n2")
        c.wait_converged(["n1", "n2"])
        yield c


def wenv(log: Path, **kw: str) -> dict[str, str]:
    return {"CRONWHEEL_TEST_LOG": str(log), **{f"CRONWHEEL_TEST_{k.upper()}": v for k, v in kw.items()}}


def wait_state(c: ProcessCluster, eid: str, states: set[str], timeout: float = 30) -> str:
    def state() -> str | None:
        rows = c.sql("SELECT state FROM executions WHERE id = %s", eid)
        return str(rows[0][0]) if rows and rows[0][0] in states else None

    return wait_until(state, timeout, f"execution {eid} to be in {sorted(states)}",
                      detail=lambda: c.sql("SELECT state, attempt, error FROM executions WHERE id = %s", eid))


def wait_checkpoint(c: ProcessCluster, eid: str, step: int, timeout: float = 30) -> int:
    """Until the `long` handler running `eid` has checkpointed at least `step` steps."""
    def at() -> int:
        rows = c.sql("SELECT (checkpoint->>'step')::int FROM executions WHERE id = %s", eid)
        return int(rows[0][0]) if rows and rows[0][0] is not None and rows[0][0] >= step else 0

    return wait_until(at, timeout, f"execution {eid} to checkpoint step {step}",
                      detail=lambda: c.sql("SELECT state, checkpoint FROM executions WHERE id = %s", eid))


def stub(c: ProcessCluster) -> tuple[grpc.Channel, dispatch_pb2_grpc.DispatchServiceStub]:
    ch = grpc.insecure_channel(c.nodes["n1"].address)
    return ch, dispatch_pb2_grpc.DispatchServiceStub(ch)


def dur(s: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


def test_killed_worker_job_runs_again_and_the_late_completion_is_refused(cluster: ProcessCluster,
                                                                        tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    env = wenv(log, lease_s="2")
    w1 = cluster.start_worker("w1", MODULE, env=env)
    # The paused w1 keeps its long polls open (max_lease_calls of its 8 slots + 8 prefetch: 2); the
    # node can hand the requeued run to each of them in turn (unread, it lapses again). CI once saw
    # the job go dead after five attempts: w2 dropped every run its long polls were handed after a
    # wait longer than lease_s (it counted the lease from the call, not from the node's claim).
    [job] = submit_jobs(cluster, [dict(tenant="t", type="long", payload={"steps": 40, "step_s": 0.1})])
    eid = job.id
    wait_state(cluster, eid, {"running"})
    wait_checkpoint(cluster, eid, 5)  # w1 has made progress the next worker can resume from
    w1.signal(signal.SIGSTOP)  # paused past its lease: a zombie worker
    cluster.start_worker("w2", MODULE, env=env)
    assert wait_state(cluster, eid, {"succeeded"}, timeout=30) == "succeeded"
    starts = [e for e in read_jsonl(log) if e["event"] == "start"]
    assert [s["worker"] for s in starts] == ["w1", "w2"], starts
    assert starts[1]["token"] > starts[0]["token"]
    assert starts[1]["from_step"] > 0, "resumed from the checkpoint"
    finished_sql = ("SELECT state, attempt, fencing_token, result, checkpoint, finished_at"
                    " FROM executions WHERE id = %s")
    finished = cluster.sql(finished_sql, eid)[0]
    # attempt may exceed 2: each of the paused w1's pending long polls can be handed the requeued
    # run, which then lapses again (at-least-once); the token is what says who finished it.
    zombie_polls = max_lease_calls(8 + 8)
    assert finished[0] == "succeeded" and 2 <= finished[1] <= 2 + zombie_polls, finished
    assert finished[2] == starts[1]["token"]
    w1.signal(signal.SIGCONT)
    wait_until(lambda: proc_state(w1.pid) != "T", 5, "the zombie worker to run again after SIGCONT")
    # The zombie's late completion with its old token is refused and changes nothing.
    ch, s = stub(cluster)
    with ch, pytest.raises(grpc.RpcError) as ei:
        s.CompleteExecution(dispatch_pb2.CompleteExecutionRequest(
            execution_id=str(eid), fencing_token=starts[0]["token"], worker_id="w1"))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    # The woken zombie tries its own checkpoint (within one 0.1 s step) and heartbeat (every
    # lease_s / 3 = 0.67 s) with its old token: both must be refused and change nothing. The
    # worker does not report those refusals anywhere a test can see (they end its handler
    # silently), so the window is sized to give both their chance.
    def zombie_changed_nothing() -> None:
        assert cluster.sql(finished_sql, eid)[0] == finished, "the woken zombie changed the finished run"
        assert not any(e["event"] == "done" and e["worker"] == "w1" for e in read_jsonl(log))

    observe_for(1.5, zombie_changed_nothing)

    # SIGKILL variant: the job runs again on another worker after the lease.
    cluster.kill_node("w1")
    cluster.stop_node("w2")
    w3 = cluster.start_worker("w3", MODULE, env=env)
    [job2] = submit_jobs(cluster, [dict(tenant="t", type="long", payload={"steps": 30, "step_s": 0.1})])
    wait_state(cluster, job2.id, {"running"})
    wait_checkpoint(cluster, job2.id, 1)  # w3 is really working on it
    w3.signal(signal.SIGKILL)
    cluster.start_worker("w4", MODULE, env=env)
    assert wait_state(cluster, job2.id, {"succeeded"}, timeout=30) == "succeeded"
    runs = [e["worker"] for e in read_jsonl(log) if e["event"] == "start" and e["execution_id"] == job2.id]
    assert runs == ["w3", "w4"]


BACKOFF = (timedelta(seconds=1), 2.0, timedelta(seconds=3))  # initial, multiplier, max


def test_retries_follow_the_policy_and_dead_letters_after_max_attempts(cluster: ProcessCluster,
                                                                        tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    cluster.start_worker("w1", MODULE, env=wenv(log))
    policy = RetryPolicy(*BACKOFF, max_attempts=4)
    fail, bad, hang = submit_jobs(cluster, [
        dict(tenant="t", type="fail", retry_policy=policy),
        dict(tenant="t", type="bad", retry_policy=policy),
        dict(tenant="t", type="hang", attempt_timeout=timedelta(seconds=2), retry_policy=RetryPolicy(max_attempts=1)),
    ])
    assert wait_state(cluster, fail.id, {"dead"}, timeout=40) == "dead"
    assert wait_state(cluster, bad.id, {"failed"}) == "failed"
    assert wait_state(cluster, hang.id, {"dead"}, timeout=20) == "dead"
    starts = sorted(e["t"] for e in read_jsonl(log) if e["execution_id"] == fail.id)
    assert len(starts) == 4
    # Full jitter: attempt k waits uniform in [0, min(max, initial * mult^(k-1))]; the reaper
    # releases due retries once a second and the claim adds a little, hence the slack.
    for k, gap in enumerate((b - a for a, b in zip(starts, starts[1:], strict=False)), start=1):
        initial, most = BACKOFF[0].total_seconds(), BACKOFF[2].total_seconds()
        ceiling = min(most, initial * BACKOFF[1] ** (k - 1))
        assert 0 <= gap <= ceiling + 1.5, (k, gap, ceiling)
    assert len([e for e in read_jsonl(log) if e["execution_id"] == bad.id]) == 1, "no retry of non-retryable"
    hang_row = cluster.sql("SELECT error_type, attempt FROM executions WHERE id = %s", hang.id)[0]
    assert hang_row == ("timeout", 1)
    dead = cluster.sql("SELECT execution_id, alert FROM events WHERE kind = 'dead_letter'")
    assert {str(r[0]) for r in dead} == {fail.id, hang.id} and all(r[1] for r in dead)


def test_sigterm_worker_checkpoints_and_the_job_resumes_elsewhere(cluster: ProcessCluster, tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    w1 = cluster.start_worker("w1", MODULE, env=wenv(log))
    [job] = submit_jobs(cluster, [dict(tenant="t", type="long", payload={"steps": 60, "step_s": 0.05})])
    wait_state(cluster, job.id, {"running"})
    wait_checkpoint(cluster, job.id, 5)  # mid-run, with progress to hand over
    w1.signal(signal.SIGTERM)
    assert w1.proc.wait(15) == 0
    cluster.start_worker("w2", MODULE, env=wenv(log))
    assert wait_state(cluster, job.id, {"succeeded"}) == "succeeded"
    ev = read_jsonl(log)
    stopped = [e for e in ev if e["event"] == "stopped"]
    resumed = [e for e in ev if e["event"] == "start" and e["worker"] == "w2"]
    assert len(stopped) == 1 and stopped[0]["worker"] == "w1" and stopped[0]["at_step"] > 0
    assert len(resumed) == 1 and resumed[0]["from_step"] == stopped[0]["at_step"]
    assert [e["step"] for e in ev if e["event"] == "done"] == [60]


def test_bad_worker_calls_get_the_right_code_and_change_nothing(cluster: ProcessCluster) -> None:
    [job] = submit_jobs(cluster, [dict(tenant="t", type="ok")])
    ch, s = stub(cluster)
    with ch:
        got = s.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
            worker_id="me", job_types=["ok"], max_count=1, lease_duration=dur(30), wait_timeout=dur(5)))
        [ex] = got.executions
        before = cluster.sql("SELECT state, fencing_token, lease_owner, lease_expires, checkpoint FROM executions")

        def code(call: object, req: object) -> grpc.StatusCode:
            with pytest.raises(grpc.RpcError) as ei:
                call(req)  # type: ignore[operator]
            return ei.value.code()  # type: ignore[no-any-return]

        tok = ex.fencing_token
        assert code(s.Heartbeat, dispatch_pb2.HeartbeatRequest(
            execution_id=str(uuid.uuid4()), fencing_token=tok, worker_id="me")) == grpc.StatusCode.NOT_FOUND
        assert code(s.Heartbeat, dispatch_pb2.HeartbeatRequest(
            execution_id="not-a-uuid", fencing_token=tok, worker_id="me")) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(s.CompleteExecution, dispatch_pb2.CompleteExecutionRequest(
            execution_id=ex.execution_id, fencing_token=tok, worker_id="someone-else")) == \
            grpc.StatusCode.FAILED_PRECONDITION
        assert code(s.Heartbeat, dispatch_pb2.HeartbeatRequest(
            execution_id=ex.execution_id, fencing_token=tok - 1, worker_id="me")) == grpc.StatusCode.FAILED_PRECONDITION
        assert code(s.Heartbeat, dispatch_pb2.HeartbeatRequest(
            execution_id=ex.execution_id, fencing_token=tok, worker_id="me", lease_extension=dur(-5))) == \
            grpc.StatusCode.INVALID_ARGUMENT
        assert code(s.LeaseExecutions, dispatch_pb2.LeaseExecutionsRequest(
            worker_id="me", max_count=1, lease_duration=dur(10 * 3600))) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(s.LeaseExecutions, dispatch_pb2.LeaseExecutionsRequest(
            worker_id="me", max_count=1, lease_duration=dur(0.01))) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(s.Checkpoint, dispatch_pb2.CheckpointRequest(
            execution_id=ex.execution_id, fencing_token=tok, worker_id="me",
            checkpoint_json=json.dumps("x" * (1024 * 1024 + 1)))) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(s.Checkpoint, dispatch_pb2.CheckpointRequest(
            execution_id=ex.execution_id, fencing_token=tok, worker_id="me",
            checkpoint_json="{not json")) == grpc.StatusCode.INVALID_ARGUMENT
        after = cluster.sql("SELECT state, fencing_token, lease_owner, lease_expires, checkpoint FROM executions")
        assert after == before, "refused calls changed nothing"
        # The right call works and is idempotent.
        ok = dispatch_pb2.CompleteExecutionRequest(execution_id=ex.execution_id, fencing_token=tok, worker_id="me")
        assert s.CompleteExecution(ok).state == s.CompleteExecution(ok).state
    assert cluster.sql("SELECT state FROM executions WHERE id = %s", job.id)[0][0] == "succeeded"


B_ARRIVAL_GAP_S = 0.02


def test_fairness_and_priorities_under_a_bulk_backlog(cluster: ProcessCluster, tmp_path: Path) -> None:
    """Tenant A has 100k bulk jobs queued (inserted in one statement: the setup, not the subject);
    tenant B's 100 default jobs and one critical job must start promptly; A stays within its cap."""
    log = tmp_path / "history.jsonl"
    cap = 5
    cluster.sql("INSERT INTO tenants (id, max_concurrency) VALUES ('A', %s) RETURNING id", cap)
    cluster.sql("""
        INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at, priority, state, trigger)
        SELECT gen_random_uuid(), 'A', 'ok', '{}', g %% 8, now(), now(), 'bulk', 'queued', 'submit'
          FROM generate_series(1, 100000) g RETURNING 1""")
    cluster.start_worker("w1", MODULE, env=wenv(log, concurrency="8"))
    cluster.start_worker("w2", MODULE, node="n2", env=wenv(log, concurrency="8"))

    def bulk_flowing() -> bool:  # both workers are draining A's backlog: the load B arrives into
        by_worker = Counter(e["worker"] for e in read_jsonl(log) if e["event"] == "start")
        return by_worker["w1"] >= 10 and by_worker["w2"] >= 10

    wait_until(bulk_flowing, 30, "both workers to run A's bulk jobs")
    b_jobs = []
    max_running_a = 0
    for i in range(100):
        b_jobs += submit_jobs(cluster, [dict(tenant="B", type="ok")])
        if i % 10 == 0:
            max_running_a = max(max_running_a, cluster.sql(
                "SELECT count(*) FROM executions WHERE tenant = 'A' AND state = 'running'")[0][0])
        time.sleep(B_ARRIVAL_GAP_S)  # the workload's shape: B's jobs arrive spread out, not in one burst
    [crit] = submit_jobs(cluster, [dict(tenant="A", type="ok", priority="critical")])
    wanted = {j.id for j in b_jobs} | {crit.id}

    def started() -> dict[str, float]:
        return {e["execution_id"]: e["t"] for e in read_jsonl(log) if e["event"] == "start"}

    def all_started() -> dict[str, float] | None:
        got = started()
        return got if got.keys() >= wanted else None

    starts = wait_until(all_started, 30, "every B job and the critical job to start",
                        detail=lambda: f"{len(wanted - started().keys())} not started")
    lags = sorted(starts[j.id] - j.run_at.timestamp() for j in b_jobs)
    assert len(lags) == 100, "every B job started"
    p99 = lags[98]
    assert p99 < 1.0, f"B p99 start lag {p99:.3f}s"
    crit_lag = starts[crit.id] - crit.run_at.timestamp()
    assert crit_lag < 0.2, f"critical start lag {crit_lag:.3f}s"
    done_a = cluster.sql("SELECT count(*) FROM executions WHERE tenant = 'A' AND state = 'succeeded'")[0][0]
    assert done_a > 100, "bulk still progresses"
    assert 1 <= max_running_a <= cap
    print(f"B start lag p50={lags[49]*1000:.1f}ms p99={p99*1000:.1f}ms; critical {crit_lag*1000:.1f}ms; "
          f"A bulk done {done_a}; A max running {max_running_a} (cap {cap}); now {datetime.now(UTC)}")


def test_a_tenant_worker_leases_and_reports_only_its_own_tenant_runs() -> None:
    from .api_cluster import TOKENS, api_cluster

    with api_cluster() as (c, address):
        acme_job, globex_job = submit_jobs(c, [dict(tenant="acme", type="ok"), dict(tenant="globex", type="ok")],
                                           token=TOKENS["admin"][0])
        md = (("authorization", f"Bearer {TOKENS['acme'][0]}"),)
        with grpc.insecure_channel(address) as ch:
            s = dispatch_pb2_grpc.DispatchServiceStub(ch)
            got = s.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
                worker_id="acme-w", max_count=10, wait_timeout=dur(1)), metadata=md)
            assert [e.execution_id for e in got.executions] == [acme_job.id]
            # globex's run, leased by an admin worker: acme's token cannot touch it, nor learn of it.
            admin = (("authorization", f"Bearer {TOKENS['admin'][0]}"),)
            [gx] = s.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
                worker_id="ops-w", max_count=10, wait_timeout=dur(1)), metadata=admin).executions
            assert gx.execution_id == globex_job.id
            with pytest.raises(grpc.RpcError) as ei:
                s.CompleteExecution(dispatch_pb2.CompleteExecutionRequest(
                    execution_id=gx.execution_id, fencing_token=gx.fencing_token, worker_id="ops-w"), metadata=md)
            assert ei.value.code() == grpc.StatusCode.NOT_FOUND
            assert c.sql("SELECT state FROM executions WHERE id = %s", globex_job.id)[0][0] == "running"
