"""HTTP targets against a real node, a real doer (`cronwheel worker --http`) and a real local HTTP
server the test starts (issue 50, "Must show"). The node and the doer run with
`--egress-allow 127.0.0.0/8` (every receiver here listens on loopback) and one secret key ring;
the doer reads named secrets from the database with it. Runs are started at once by
TriggerSchedule (a schedule's tick makes the same run: the trigger copies the target the same way).

The address-class table runs for targets in tests/e2e/test_webhook_egress.py (its SURFACES).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from cronwheel.client import Client, InvalidArgument, NotFound, PermissionDenied, RetryPolicy
from cronwheel.devtools.harness import NodeProc, ProcessCluster
from cronwheel.secret_store import new_key_line
from cronwheel.token_format import hash_token
from cronwheel.v1 import common_pb2, dispatch_pb2, dispatch_pb2_grpc
from cronwheel.v1.webhook_signature import verify

from .helpers import observe_for, run_cli, wait_until
from .target_receiver import TargetReceiver, serve_targets

pytestmark = [pytest.mark.e2e]

TOKENS = {t: f"tok-http-{t}-0123456789" for t in ("a", "b", "r", "admin", "doer")}
YEARLY = "0 0 1 1 *"
ALLOW = ("--egress-allow", "127.0.0.0/8")
SIGNING = "whsec-signing-0123456789"
PLAIN = "PLAINTEXT-api-token-7f3a91"  # the secret a header names: found nowhere but at the receiver
FAST_RETRY = RetryPolicy(initial_backoff=timedelta(milliseconds=100), max_backoff=timedelta(milliseconds=100),
                         max_attempts=3)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        auth = c.workdir / "auth.json"
        auth.write_text(json.dumps({"tokens": [
            {"sha256": hash_token(tok), "name": "http-doer" if t == "doer" else f"{t}-ci",
             **({"admin": True} if t == "admin" else {"doer": True} if t == "doer" else {"tenant": t})}
            for t, tok in TOKENS.items()]}))
        key = c.workdir / "secret.key"
        key.write_text(new_key_line("k1") + "\n")
        key.chmod(0o600)
        c.key_file = key  # type: ignore[attr-defined]
        c.start_node("n1", "--auth-file", str(auth), "--secret-key-file", str(key), *ALLOW)
        for tenant, name, value in (("a", "signing", SIGNING), ("a", "api-token", PLAIN), ("b", "signing", SIGNING)):
            put_secret(c, tenant, name, value)
        start_doer(c, "doer", *ALLOW)
        yield c


def put_secret(c: ProcessCluster, tenant: str, name: str, value: str) -> None:
    import subprocess

    out = subprocess.run([sys.executable, "-m", "cronwheel", "secrets", "put", name, "--tenant", tenant,
                          "--dsn", c.dsn, "--secret-key-file", str(c.key_file)],  # type: ignore[attr-defined]
                         input=value, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert value not in out.stdout + out.stderr


def start_doer(c: ProcessCluster, name: str, *flags: str) -> NodeProc:
    node = c.nodes["n1"]
    cmd = [sys.executable, "-m", "cronwheel", "worker", "--http", "--address", node.address, "--worker-id", name,
           "--token", TOKENS["doer"], "--dsn", c.dsn, "--secret-key-file", str(c.key_file),  # type: ignore[attr-defined]
           *flags]
    return c._spawn(name, cmd, None, "worker ", True)


@pytest.fixture
def receiver() -> Iterator[TargetReceiver]:
    yield from serve_targets()


def client(c: ProcessCluster, tenant: str) -> Client:
    return Client(c.addresses(), token=TOKENS[tenant], deadline_s=20)


def target_schedule(cl: Client, name: str, url: str, **kw: Any) -> str:
    target = {"url": url, "signing_secret": "signing", **kw.pop("target", {})}
    s = cl.create_schedule(name, YEARLY, "", timezone="UTC", misfire_policy="skip", payload={"job": name},
                           target=target, retry_policy=kw.pop("retry_policy", FAST_RETRY), **kw)
    assert s.job_type == "http" and s.target is not None and s.target["url"] == url
    return s.id


def final(cl: Client, execution_id: str, timeout_s: float = 30, what: str = "the run to end") -> Any:
    return wait_until(lambda: (e := cl.get_execution(execution_id)).final and e, timeout_s, what)


def signed(req: Any, secret: str = SIGNING) -> bool:
    return verify(secret, req.headers["cronwheel-signature"], req.body, time.time())


def test_a_2xx_succeeds_with_the_start_of_the_body_kept_and_the_request_carries_the_run(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/ok"] = [(200, {}, b"hello from the service" + b"x" * 10_000)]
    with client(cluster, "a") as cl:
        sid = target_schedule(cl, "ok", receiver.url("/ok"), target={"headers": {"X-Team": "billing"}})
        run = cl.trigger(sid)
        done = final(cl, run.id)
    assert done.state == "succeeded" and done.attempt == 1
    assert done.result["status"] == 200 and done.result["body"].startswith("hello from the service")
    assert len(done.result["body"]) == 4096  # the start of the body
    (req,) = receiver.requests("/ok")
    assert req.method == "POST" and json.loads(req.body) == {"job": "ok"}  # the payload by default
    h = req.headers
    assert h["idempotency-key"] == run.id and h["cronwheel-execution"] == run.id
    assert h["cronwheel-attempt"] == "1" and int(h["cronwheel-fencing-token"]) == done.fencing_token
    assert h["cronwheel-scheduled-for"].startswith(run.scheduled_for.strftime("%Y-%m-%dT%H:%M:%S"))
    assert h["x-team"] == "billing" and signed(req)


def test_503_with_retry_after_is_retried_no_sooner_with_the_same_key_a_higher_attempt_and_a_valid_signature(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/busy"] = [(503, {"Retry-After": "2"}, b"busy"), (200, {}, b"done")]
    with client(cluster, "a") as cl:
        run = cl.trigger(target_schedule(cl, "busy", receiver.url("/busy")))
        done = final(cl, run.id)
    assert done.state == "succeeded" and done.attempt == 2
    first, second = receiver.requests("/busy")
    assert second.at - first.at >= 2.0, "Retry-After: 2 sets the earliest next attempt (the policy said 0.1 s)"
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"] == run.id
    assert (first.headers["cronwheel-attempt"], second.headers["cronwheel-attempt"]) == ("1", "2")
    assert int(second.headers["cronwheel-fencing-token"]) > int(first.headers["cronwheel-fencing-token"])
    assert signed(first) and signed(second)


def test_a_400_fails_at_once_with_the_status_and_the_start_of_the_body_and_is_not_retried(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/bad"] = [(400, {}, b'{"error": "unknown account 42"}')]
    with client(cluster, "a") as cl:
        run = cl.trigger(target_schedule(cl, "bad", receiver.url("/bad")))
        done = final(cl, run.id)
    assert (done.state, done.attempt) == ("failed", 1)
    assert done.error == 'HTTP 400: {"error": "unknown account 42"}'
    # The retry policy would have tried again after 0.1 s: nothing comes in 1 s.
    observe_for(1.0, lambda: len(receiver.requests("/bad")) == 1 or pytest.fail("a 400 was retried"))


def test_a_hanging_server_is_timed_out_and_retried(cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/hang"] = [("hang", 20), (200, {}, b"quick")]
    with client(cluster, "a") as cl:
        run = cl.trigger(target_schedule(cl, "hang", receiver.url("/hang"), target={"timeout_s": 1}))
        done = final(cl, run.id)
    assert (done.state, done.attempt, done.result["body"]) == ("succeeded", 2, "quick")
    first, second = receiver.requests("/hang")
    assert second.at - first.at < 10, "the first call was given up at its 1 s timeout, not held for 20 s"


def _report(c: ProcessCluster, execution_id: str, token: int, **outcome: Any) -> Any:
    """ReportTargetRun as the target calls it: no bearer token, the id and token are the credential."""
    with grpc.insecure_channel(c.nodes["n1"].address) as ch:
        return dispatch_pb2_grpc.DispatchServiceStub(ch).ReportTargetRun(
            dispatch_pb2.ReportTargetRunRequest(execution_id=execution_id, fencing_token=token, **outcome), timeout=10)


def test_a_202_keeps_the_run_until_the_target_completes_it_and_a_stale_token_is_refused(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/long"] = [(202, {}, b"accepted")]
    with client(cluster, "a") as cl:
        run = cl.trigger(target_schedule(cl, "long", receiver.url("/long"),
                                         attempt_timeout=timedelta(seconds=60)))
        (req,) = wait_until(lambda: receiver.requests("/long"), 15, "the call")
        token = int(req.headers["cronwheel-fencing-token"])
        observe_for(1.0, lambda: cl.get_execution(run.id).state == "running" or pytest.fail("202 ended the run"))
        _report(cluster, run.id, token, heartbeat=True)
        with pytest.raises(grpc.RpcError) as stale:
            _report(cluster, run.id, token - 1, result_json='{"rows": 1}')
        assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as other:
            _report(cluster, "00000000-0000-7000-8000-000000000000", token, result_json="{}")
        assert other.value.code() == grpc.StatusCode.NOT_FOUND
        assert cl.get_execution(run.id).state == "running"
        answer = _report(cluster, run.id, token, result_json='{"rows": 1234}')
        assert answer.state == common_pb2.EXECUTION_STATE_SUCCEEDED
        done = cl.get_execution(run.id)
        assert (done.state, done.result) == ("succeeded", {"rows": 1234})
        with pytest.raises(grpc.RpcError) as ended:
            _report(cluster, run.id, token, error="late", retryable=True)
        assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_a_202_without_a_completion_fails_at_the_runs_timeout(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/silent"] = [(202, {}, b"")]
    with client(cluster, "a") as cl:
        run = cl.trigger(target_schedule(cl, "silent", receiver.url("/silent"), attempt_timeout=timedelta(seconds=2),
                                         retry_policy=RetryPolicy(max_attempts=1)))
        t0 = time.monotonic()
        done = final(cl, run.id, 30, "the timeout")
    assert time.monotonic() - t0 >= 1.5
    assert (done.state, done.error_type) == ("dead", "timeout")


def test_a_name_resolving_to_loopback_at_call_time_is_not_called(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    """A doer without --egress-allow: the node accepted the name (not a literal, not a local
    name), the doer resolves it to 127.0.0.1 when it connects and refuses."""
    name = socket.gethostname()
    if socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)[0][4][0] != "127.0.0.1":
        pytest.skip(f"this machine's name {name!r} does not resolve to 127.0.0.1")
    port = receiver.base.rsplit(":", 1)[1]
    cluster.stop_node("doer")
    strict = start_doer(cluster, "doer-strict")
    try:
        with client(cluster, "a") as cl:
            run = cl.trigger(target_schedule(cl, "rebind", f"http://{name}:{port}/rebind",
                                             retry_policy=RetryPolicy(max_attempts=1)))
            done = final(cl, run.id)
        assert (done.state, done.error) == ("dead", "refused by egress policy")
        assert receiver.requests() == []
        log = [e for e in strict.log_events("http_target_call") if e.get("execution_id") == run.id]
        assert log and "127.0.0.1" in str(log[-1]["detail"]), "the doer's log says why"
    finally:
        cluster.stop_node("doer-strict")
        start_doer(cluster, "doer", *ALLOW)


def test_another_tenants_target_execution_and_secret_names_are_not_found(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/t"] = [(200, {}, b"ok")]
    with client(cluster, "a") as a, client(cluster, "b") as b:
        sid = target_schedule(a, "mine", receiver.url("/t"))
        run = final(a, a.trigger(sid).id)
        with pytest.raises(NotFound):
            b.get_schedule(sid)
        with pytest.raises(NotFound):
            b.get_execution(run.id)
        # b names a's secret: b has none of that name, so the doer finds none (not retried).
        theirs = b.trigger(target_schedule(b, "steal", receiver.url("/t"),
                                           target={"headers": {"Authorization": {"secret": "api-token"}}}))
        done = final(b, theirs.id)
    assert (done.state, done.error) == ("failed", "the secret 'api-token' does not exist")
    assert len(receiver.requests("/t")) == 1


def test_a_header_secret_reaches_only_the_receiver_and_a_rotation_applies_to_the_next_call(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/secret"] = [(200, {}, b"ok")]
    answers: list[str] = []
    with client(cluster, "a") as cl:
        sid = target_schedule(cl, "with-secret", receiver.url("/secret"),
                              target={"headers": {"Authorization": {"secret": "api-token"}}})
        answers.append(repr(cl.get_schedule(sid)))
        first = final(cl, cl.trigger(sid).id)
        put_secret(cluster, "a", "api-token", PLAIN + "-rotated")
        second = final(cl, cl.trigger(sid).id)
        answers += [repr(first), repr(second), repr(list(cl.list_executions(schedule_id=sid))),
                    repr(list(cl.list_schedules())), repr(list(cl.events()))]
    got = [r.headers["authorization"] for r in receiver.requests("/secret")]
    assert got == [PLAIN, PLAIN + "-rotated"], "resolved at call time: the next call carries the new value"
    assert "api-token" in answers[0]  # the API shows the secret's name...
    dump = "\n".join(answers)
    for n in cluster.nodes.values():
        dump += n.log_path.read_text() + "\n".join(n.lines)
    for (table,) in cluster.sql("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"):
        dump += "\n".join(str(r) for r in cluster.sql(f'SELECT t::text FROM "{table}" t'))
    assert PLAIN not in dump, "...never its value: no answer, log, event or row holds it"


def test_job_type_and_target_together_are_refused_naming_the_field_and_nothing_is_stored(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    with client(cluster, "a") as cl:
        with pytest.raises(InvalidArgument) as both:
            cl.create_schedule("both", YEARLY, "report", timezone="UTC", misfire_policy="skip",
                               target={"url": receiver.url("/x")})
        assert both.value.field == "schedule.target"
        with pytest.raises(InvalidArgument) as reserved:
            cl.create_schedule("reserved", YEARLY, "http", timezone="UTC", misfire_policy="skip")
        assert reserved.value.field == "schedule.job_type"
        assert not [s for s in cl.list_schedules() if s.name in ("both", "reserved")]


def test_a_submitted_job_calls_its_target_and_type_with_target_is_refused(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    receiver.script["/job"] = [(201, {}, b"created")]
    with client(cluster, "a") as cl:
        job = cl.submit("", {"invoice": 7}, target={"url": receiver.url("/job"), "method": "PUT",
                                                    "signing_secret": "signing"})
        assert job.type == "http" and job.target is not None and job.target["method"] == "PUT"
        done = final(cl, job.id)
        with pytest.raises(InvalidArgument) as both:
            cl.submit("report", {}, target={"url": receiver.url("/job")})
        assert both.value.field == "target"
    assert (done.state, done.result) == ("succeeded", {"status": 201, "body": "created"})
    (req,) = receiver.requests("/job")
    assert req.method == "PUT" and json.loads(req.body) == {"invoice": 7} and signed(req)


def test_the_doers_token_is_its_own_role_it_leases_http_runs_only_and_reads_nothing_else(
        cluster: ProcessCluster) -> None:
    with client(cluster, "doer") as doer:
        with pytest.raises(PermissionDenied):
            list(doer.list_schedules())
        with pytest.raises(PermissionDenied):
            doer.submit("report", {}, tenant="a")
    with grpc.insecure_channel(cluster.nodes["n1"].address) as ch:
        stub = dispatch_pb2_grpc.DispatchServiceStub(ch)
        with pytest.raises(grpc.RpcError) as other:
            stub.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(worker_id="x", job_types=["report"], max_count=1),
                                 metadata=(("authorization", f"Bearer {TOKENS['doer']}"),), timeout=10)
    assert other.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_the_docs_examples_run(cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    """Every Python block of docs/http-targets.md, in order, against this cluster; its shell
    example (`cronwheel secrets put`) is `put_secret`'s command."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "http-targets.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert len(blocks) == 3
    put_secret(cluster, "a", "billing-api-token", "doc-token-value")
    put_secret(cluster, "a", "billing-signing", SIGNING)
    receiver.script["/jobs/demurrage"] = [(202, {}, b"")]
    ns: dict[str, Any] = {"ADDRESS": cluster.nodes["n1"].address, "TOKEN": TOKENS["a"], "SERVICE": receiver.base,
                          "CRONWHEEL_SECRET": SIGNING}
    exec(blocks[0], ns)  # creates the schedule, triggers it  # noqa: S102
    (req,) = wait_until(lambda: receiver.requests("/jobs/demurrage"), 15, "the documented call")
    assert req.headers["authorization"] == "doc-token-value" and json.loads(req.body) == {"region": "eu"}
    exec(blocks[1], ns)  # noqa: S102
    headers = {"Cronwheel-Signature": req.headers["cronwheel-signature"]}
    assert ns["handle"](headers, req.body) == 200
    assert ns["handle"](headers, req.body + b" ") == 401
    exec(blocks[2], ns)  # noqa: S102
    ns["report_done"](ns["run"].id, int(req.headers["cronwheel-fencing-token"]), 5)
    with client(cluster, "a") as cl:
        done = cl.get_execution(ns["run"].id)
    assert (done.state, done.result) == ("succeeded", {"rows": 5})


def test_a_targets_concurrency_limit_holds_across_two_doers(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    """30 calls due at once to one origin with concurrency_limit 5, two doers of 100 slots each:
    the receiver never has more than 5 requests open (held back at lease time, by the claim)."""
    receiver.script["/slow"] = [("hang", 0.3)]
    second = start_doer(cluster, "doer2", *ALLOW)
    try:
        with client(cluster, "a") as cl:
            jobs = cl.submit_many([{"type": "", "payload": {"i": i},
                                    "target": {"url": receiver.url("/slow"), "concurrency_limit": 5}}
                                   for i in range(30)])
            ids = [j.execution_id for j in jobs]
            for i in ids:
                assert final(cl, i, 60).state == "succeeded"
    finally:
        cluster.stop_node(second.name)
    assert len(receiver.requests("/slow")) == 30
    assert receiver.peak["/slow"] == 5, f"at most 5 open at once (and the limit was used): {receiver.peak}"


def test_an_admin_restricts_a_tenants_targets_through_the_api_the_cli_and_apply(cluster: ProcessCluster) -> None:
    def create(cl: Client, name: str, url: str) -> None:
        cl.create_schedule(name, YEARLY, "", timezone="UTC", misfire_policy="skip", target={"url": url})

    with client(cluster, "admin") as admin, client(cluster, "r") as r:
        assert admin.create_tenant("r", egress_rules=["api.example.internal"]).egress_rules == ("api.example.internal",)
        with pytest.raises(InvalidArgument) as elsewhere:
            create(r, "elsewhere", "https://billing.example.com/run")
        assert elsewhere.value.field == "schedule.target.url" and "egress rules" in str(elsewhere.value)
        assert [s.name for s in r.list_schedules()] == []  # nothing stored
        create(r, "allowed", "https://api.example.internal:8443/run")  # no port in the rule: any port
        env = {"CRONWHEEL_ADDRESS": cluster.nodes["n1"].address, "CRONWHEEL_TOKEN": TOKENS["admin"]}
        out = run_cli("tenant", "update", "r", "--egress-rules", "*.example.internal:443", env=env)
        assert out.returncode == 0 and "egress_rules=*.example.internal:443" in out.stdout, out.stderr
        with pytest.raises(InvalidArgument):
            create(r, "wrong-port", "https://api.example.internal:8443/run")
        create(r, "right-port", "https://jobs.example.internal/run")
        plan = admin.apply_tenants([{"id": "r", "egress_rules": ["api.example.internal:443"]}])
        assert plan.count("update") == 1 and admin.get_tenant("r").egress_rules == ("api.example.internal:443",)
        with pytest.raises(InvalidArgument):
            create(r, "not-jobs", "https://jobs.example.internal/run")
        admin.update_tenant("r", egress_rules=[])  # none: any public address again
        create(r, "any-public", "https://billing.example.com/run")


def test_a_targets_rate_limit_holds_across_two_nodes_and_two_doers(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    """1,000 calls due at once to one origin limited to 20/s with a burst of 5, two nodes and
    two doers (`doer` leasing from n1, `doer3` from n2): in every 1 s window of the runs' start
    times (the database's started_at) at most 25 start, and the receiver sees the whole run take
    at least (1,000 - 5) / 20 s."""
    receiver.script["/rated"] = [(200, {}, b"ok")]
    auth = str(cluster.workdir / "auth.json")
    cluster.start_node("n2", "--auth-file", auth, "--secret-key-file", str(cluster.key_file),  # type: ignore[attr-defined]
                       *ALLOW)
    third = cluster._spawn("doer3", [sys.executable, "-m", "cronwheel", "worker", "--http", "--address",
                                     cluster.nodes["n2"].address, "--worker-id", "doer3", "--token", TOKENS["doer"],
                                     *ALLOW], None, "worker ", True)
    try:
        with client(cluster, "a") as cl:
            jobs = cl.submit_many([{"type": "", "payload": {"i": i},
                                    "target": {"url": receiver.url("/rated"), "rate_per_s": 20, "burst": 5}}
                                   for i in range(1000)])
            ids = [j.execution_id for j in jobs]
            wait_until(lambda: len(receiver.requests("/rated")) >= 1000, 120, "1,000 calls")
            for i in ids[-5:]:
                assert final(cl, i, 30).state == "succeeded"
    finally:
        cluster.stop_node(third.name)
        cluster.stop_node("n2")
    starts = sorted(float(r[0]) for r in cluster.sql(
        "SELECT extract(epoch FROM started_at) FROM executions WHERE id = ANY(%s::uuid[])", ids))
    assert len(starts) == 1000
    import bisect
    most = max(bisect.bisect_left(starts, t + 1.0) - i for i, t in enumerate(starts))
    assert most <= 25, f"{most} starts in one 1 s window"
    assert starts[-1] - starts[0] >= (1000 - 5) / 20 - 0.001, "the bucket's bound, as the database records starts"
    # At the receiver the same bound, less what a call's latency varies: the first calls were
    # made while the node wrote the 1,000 jobs (a run measured 49.69 s against 49.75 s).
    arrivals = sorted(r.at for r in receiver.requests("/rated"))
    assert arrivals[-1] - arrivals[0] >= (1000 - 5) / 20 - 0.25, arrivals[-1] - arrivals[0]
    called = {d: sum(1 for e in cluster.nodes[d].log_events("http_target_call") if e.get("execution_id") in set(ids))
              for d in ("doer", "doer3")}
    assert sum(called.values()) == 1000 and all(called.values()), f"both doers called: {called}"


def test_an_apply_file_manages_a_target_and_a_second_apply_changes_nothing(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    spec = {"name": "applied-target", "cron": YEARLY, "timezone": "UTC", "misfire_policy": "skip",
            "target": {"url": receiver.url("/applied"), "headers": {"X-Team": "ops"}, "rate_per_s": 5}}
    with client(cluster, "a") as cl:
        assert cl.apply([spec]).count("create") == 1
        assert cl.apply([spec]).count("unchanged") == 1
        moved = {**spec, "target": {**spec["target"], "url": receiver.url("/moved")}}
        assert cl.apply([moved]).count("update") == 1
        (s,) = [x for x in cl.list_schedules() if x.name == "applied-target"]
    assert s.job_type == "http" and s.target is not None
    want = (receiver.url("/moved"), {"X-Team": "ops"}, 5.0)
    assert (s.target["url"], s.target["headers"], s.target["rate_per_s"]) == want


def test_explain_says_how_long_a_run_waited_under_its_targets_limits(
        cluster: ProcessCluster, receiver: TargetReceiver) -> None:
    """A tick every second against a target limited to one call every 2 s: the ticks' runs wait,
    and ExplainSchedule says how long each started after its run_at, under which limits."""
    receiver.script["/slow-rate"] = [(200, {}, b"ok")]
    with client(cluster, "a") as cl:
        s = cl.create_schedule("every-second", "* * * * * *", "", timezone="UTC", misfire_policy="skip",
                               target={"url": receiver.url("/slow-rate"), "rate_per_s": 0.5, "burst": 1,
                                       "concurrency_limit": 2})
        wait_until(lambda: len(list(cl.list_executions(schedule_id=s.id))) >= 4, 15, "four ticks fired")
        cl.pause(s.id)
        runs = list(cl.list_executions(schedule_id=s.id))
        done = [final(cl, r.id, 30) for r in runs]
        ticks = {x.execution_id: x for x in cl.explain(s.id, s.created_at - timedelta(seconds=1)).ticks}
    assert all(d.state == "succeeded" for d in done)
    last = max(done, key=lambda d: d.started_at - d.run_at)
    assert (last.started_at - last.run_at).total_seconds() >= 1.5  # queued behind the target's rate
    assert last.id in ticks, [(x.scheduled_for, x.execution_id, x.reason) for x in ticks.values()]
    reason = ticks[last.id].reason
    assert f"under its target's limits ({receiver.base}: 2 at once, 0.5/s, burst 1)" in reason, reason
