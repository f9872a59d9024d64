"""Job B after job A on a real cluster (issue 52, item 1): two node processes, a worker process,
real PostgreSQL and etcd. A chain and a fan-in run in order, an upstream that goes dead cancels
its dependents naming it, a cycle is refused naming the field, and a node killed in the middle of
an upstream's completion releases nothing, while the completion's retry releases exactly once."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from cronwheel.client import Client, InvalidArgument, JobSpec, RetryPolicy
from cronwheel.devtools.harness import ProcessCluster, read_jsonl
from cronwheel.failpoints import STALL_FAULTS_ENV

from .helpers import run_cli, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODULE = "tests.e2e.jobs_module"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        c.start_node_with("n1", env={STALL_FAULTS_ENV: str(tmp_path / "stall.json")})
        c.start_node("n2")
        c.wait_converged(["n1", "n2"])
        yield c


def rows(c: ProcessCluster, ids: list[str]) -> dict[str, dict[str, object]]:
    got = c.sql("SELECT id::text, state, state_reason, attempt, started_at, finished_at, waiting_for"
                " FROM executions WHERE id = ANY(%s::uuid[])", ids)
    keys = ("state", "state_reason", "attempt", "started_at", "finished_at", "waiting_for")
    return {str(r[0]): dict(zip(keys, r[1:], strict=True)) for r in got}


def all_in(c: ProcessCluster, ids: list[str], states: set[str], timeout_s: float = 60) -> dict[str, dict[str, object]]:
    def reached() -> dict[str, dict[str, object]] | None:
        r = rows(c, ids)
        return r if len(r) == len(ids) and all(x["state"] in states for x in r.values()) else None

    return wait_until(reached, timeout_s, f"{len(ids)} executions in {sorted(states)}", detail=lambda: rows(c, ids))


def test_a_chain_and_a_fan_in_run_in_order(cluster: ProcessCluster, tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    cluster.start_worker("w1", MODULE, "n1", env={"CRONWHEEL_TEST_LOG": str(log)})
    cluster.start_worker("w2", MODULE, "n2", env={"CRONWHEEL_TEST_LOG": str(log)})
    with Client(cluster.addresses()) as cw:
        got = cw.submit_many([
            JobSpec("ok", {"n": "c"}, idempotency_key="c", depends_on=["b"]),  # named before its upstreams
            JobSpec("ok", {"n": "b"}, idempotency_key="b", depends_on=["a"]),
            JobSpec("ok", {"n": "a"}, idempotency_key="a"),
            JobSpec("ok", {"n": "x"}, idempotency_key="x"),
            JobSpec("ok", {"n": "y"}, idempotency_key="y"),
            JobSpec("ok", {"n": "z"}, idempotency_key="z", depends_on=["x", "y"]),
        ])
        ids = {j.idempotency_key: j.execution_id for j in got}
        assert [str(j.state) for j in got] == ["waiting", "waiting", "queued", "queued", "queued", "waiting"]
        r = all_in(cluster, list(ids.values()), {"succeeded"})
        z = cw.get_execution(ids["z"])
    at = {k: r[i] for k, i in ids.items()}
    assert at["b"]["started_at"] >= at["a"]["finished_at"]  # type: ignore[operator]
    assert at["c"]["started_at"] >= at["b"]["finished_at"]  # type: ignore[operator]
    assert at["z"]["started_at"] >= max(at["x"]["finished_at"], at["y"]["finished_at"])  # type: ignore[type-var]
    starts = Counter(e["execution_id"] for e in read_jsonl(log) if e["event"] == "start")
    assert all(starts[i] == 1 for i in ids.values()), starts  # each ran once
    assert sorted(u.execution_id for u in z.upstreams) == sorted([ids["x"], ids["y"]])
    assert {str(u.outcome) for u in z.upstreams} == {"succeeded"}


def test_an_upstream_that_goes_dead_cancels_its_dependents_naming_it(cluster: ProcessCluster,
                                                                      tmp_path: Path) -> None:
    cluster.start_worker("w1", MODULE, "n2", env={"CRONWHEEL_TEST_LOG": str(tmp_path / "h.jsonl")})
    with Client(cluster.addresses()) as cw:
        a = cw.submit("fail", retry_policy=RetryPolicy(max_attempts=1), idempotency_key="a").id
        b = cw.submit("ok", idempotency_key="b", depends_on=["a"]).id
        c = cw.submit("ok", depends_on=[b]).id
        anyway = cw.submit("ok", depends_on=[a], dependency_policy="always").id
        r = all_in(cluster, [a, b, c, anyway], {"dead", "cancelled", "succeeded"})
    assert (r[a]["state"], r[b]["state"], r[c]["state"], r[anyway]["state"]) == (
        "dead", "cancelled", "cancelled", "succeeded")
    assert r[b]["state_reason"] == f"upstream {a} ended dead"
    assert r[c]["state_reason"] == f"upstream {b} ended cancelled"
    assert r[b]["attempt"] == r[c]["attempt"] == 0  # never ran


def test_a_cycle_or_an_unknown_upstream_is_refused_naming_the_field(cluster: ProcessCluster) -> None:
    with Client(cluster.addresses()) as cw:
        with pytest.raises(InvalidArgument) as ei:
            cw.submit_many([JobSpec("ok", idempotency_key="p", depends_on=["q"]),
                            JobSpec("ok", idempotency_key="q", depends_on=["p"])])
        assert ei.value.field.startswith("jobs[") and ei.value.field.endswith("].depends_on[0]")
        assert "cycle" in str(ei.value)
    assert cluster.sql("SELECT count(*) FROM executions") == [(0,)]
    r = run_cli("job", "submit", "--address", cluster.addresses()[0], "--type", "ok", "--after", "no-such-key")
    assert r.returncode != 0 and "depends_on[0]" in r.stderr and "unknown upstream" in r.stderr, r.stderr


def test_exec_get_and_explain_show_what_a_waiting_job_waits_for(cluster: ProcessCluster) -> None:
    address = cluster.addresses()[0]
    with Client(cluster.addresses()) as cw:
        a = cw.submit("ok", delay=timedelta(hours=1), idempotency_key="later").id  # no worker: stays put
        b = cw.submit("ok", depends_on=["later"]).id
    r = run_cli("exec", "get", b, "--address", address)
    assert r.returncode == 0, r.stderr
    assert "waiting" in r.stdout and "waits for 1 upstream(s) (on_success, 1 not finished)" in r.stdout
    assert a in r.stdout and "later" in r.stdout
    r = run_cli("exec", "get", b, "--address", address, "--json")
    [up] = json.loads(r.stdout)["upstreams"]
    assert (up["execution_id"], up["state"], up["outcome"]) == (a, "scheduled", None)
    r = run_cli("explain", b, "--address", address)
    assert r.returncode == 0, r.stderr
    assert f"execution {b} (ok) is waiting" in r.stdout and a in r.stdout and "1 not finished" in r.stdout


def test_a_node_killed_before_its_completion_commits_releases_nothing_and_the_retry_releases_once(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    cluster.start_worker("w1", MODULE, "n1", env={"CRONWHEEL_TEST_LOG": str(log)})
    with Client(cluster.addresses()) as cw:  # A is claimable 2 s from now: the fault is set first
        a = cw.submit("ok", delay=timedelta(seconds=2), idempotency_key="a").id
        b = cw.submit("ok", depends_on=["a"]).id
    fault = tmp_path / "stall.json"
    fault.write_text(json.dumps({"execution_id": a, "stall_s": 60}))
    wait_until(lambda: not fault.exists() or None, 30, "n1 to stall in the middle of completing A")
    # A's completion is in flight: succeeded and B released inside a transaction that has not committed.
    assert (rows(cluster, [a])[a]["state"], rows(cluster, [b])[b]["state"]) == ("running", "waiting")
    address = cluster.nodes["n1"].address
    cluster.nodes["n1"].signal(signal.SIGKILL)
    cluster.nodes["n1"].proc.wait()
    r = rows(cluster, [a, b])
    assert (r[a]["state"], r[b]["state"], r[b]["waiting_for"]) == ("running", "waiting", 1), \
        "a completion that never committed released its dependent"
    fault.unlink(missing_ok=True)
    # The worker's node comes back, at its address: the worker sends its completion again.
    cluster.start_node_with("n1", "--listen", address, env={STALL_FAULTS_ENV: str(fault)})
    r = all_in(cluster, [a, b], {"succeeded"})
    assert r[b]["waiting_for"] == 0 and r[b]["attempt"] == 1
    starts = Counter(e["execution_id"] for e in read_jsonl(log) if e["event"] == "start")
    assert starts[b] == 1, "the dependent was released more than once"
    assert cluster.sql("SELECT outcome, count(*) FROM execution_deps WHERE execution_id = %s GROUP BY 1", b) == [
        ("succeeded", 1)]


def test_a_child_schedule_runs_once_per_successful_parent_run_for_the_same_scheduled_time(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    cluster.start_worker("w1", MODULE, "n1", env={"CRONWHEEL_TEST_LOG": str(log)})
    cluster.start_worker("w2", MODULE, "n2", env={"CRONWHEEL_TEST_LOG": str(log)})
    with Client(cluster.addresses()) as cw:
        ok = cw.create_schedule("extract", "* * * * * *", "ok", timezone="UTC", misfire_policy="skip")
        load = cw.create_schedule("load", "", "ok", timezone="", misfire_policy=None, parent_schedule_id=ok.id)
        bad = cw.create_schedule("flaky-extract", "* * * * * *", "fail", timezone="UTC", misfire_policy="skip",
                                 retry_policy=RetryPolicy(max_attempts=1))
        never = cw.create_schedule("never", "", "ok", timezone="", misfire_policy=None, parent_schedule_id=bad.id)
        assert (load.parent_schedule_id, load.cron, load.next_run_at) == (ok.id, "", None)

        def parent_successes() -> int | None:
            n = cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = %s AND state = 'succeeded'", ok.id)
            return n[0][0] if n[0][0] >= 4 else None

        wait_until(parent_successes, 60, "4 successful runs of the parent")
        cw.pause(ok.id)
        cw.pause(bad.id)

        def settled() -> bool:
            left = cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = ANY(%s::uuid[])"
                               " AND state NOT IN ('succeeded', 'dead', 'skipped', 'cancelled')",
                               [ok.id, load.id, bad.id, never.id])
            return left[0][0] == 0

        wait_until(settled, 60, "every run of both families to finish")
    parents = cluster.sql("SELECT scheduled_for FROM executions WHERE schedule_id = %s AND state = 'succeeded'"
                          " ORDER BY 1", ok.id)
    children = cluster.sql("SELECT scheduled_for, trigger, state FROM executions WHERE schedule_id = %s ORDER BY 1",
                           load.id)
    assert [c[0] for c in children] == [p[0] for p in parents]  # once each, the parent run's scheduled time
    assert {(c[1], c[2]) for c in children} == {("parent", "succeeded")}
    assert cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = %s AND state = 'dead'", bad.id)[0][0] > 0
    assert cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = %s", never.id) == [(0,)]
