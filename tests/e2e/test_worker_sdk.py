"""The worker SDK against a real cluster (PostgreSQL, etcd, node processes): throughput above the
node's per-lease limit, slots freed before reports return, cancel and timeout stop the handler,
reports survive a node restart, permanent errors stop the worker with one line, TLS."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from cronwheel.client import JobContext, Worker, WorkerStopped
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import common_pb2, scheduler_pb2

from .api_cluster import TOKENS, Api, api_cluster, write_auth_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
S = scheduler_pb2
ADMIN = TOKENS["admin"][0]


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster(partitions=4) as got:
        yield got


def dur(s: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


@contextmanager
def serving(worker: Worker) -> Iterator[Worker]:
    """Runs `worker.serve()` on a thread of its own (its own event loop); stops it on exit and
    re-raises what serve() raised."""
    box: dict[str, Any] = {}
    ready = threading.Event()

    def main() -> None:
        async def go() -> None:
            box["loop"] = asyncio.get_running_loop()
            ready.set()
            await worker.serve()

        try:
            asyncio.run(go())
        except BaseException as exc:  # handed to the test thread below
            box["error"] = exc
        finally:
            ready.set()

    t = threading.Thread(target=main, daemon=True)
    t.start()
    ready.wait(10)
    try:
        yield worker
    finally:
        if "loop" in box and t.is_alive():
            box["loop"].call_soon_threadsafe(worker.stop)
        t.join(60)
        assert not t.is_alive(), "the worker did not stop"
        if "error" in box:
            raise box["error"]


def state(api: Api, eid: str) -> common_pb2.Execution:
    return api.call("GetExecution", S.GetExecutionRequest(execution_id=eid)).execution


def wait_state(api: Api, eid: str, states: set[int], timeout: float = 30) -> common_pb2.Execution:
    deadline = time.monotonic() + timeout
    while True:
        ex = state(api, eid)
        if ex.state in states:
            return ex
        if time.monotonic() > deadline:
            raise AssertionError(f"{eid} not in {states}: {ex}")
        time.sleep(0.05)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


E = common_pb2


def test_concurrency_above_the_per_lease_limit_runs_every_job(node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    api = Api(address, "acme")
    w = Worker(address, token=ADMIN, concurrency=256, worker_id="w-256")
    running, peak, started = 0, 0, []
    release = asyncio.Event()

    @w.job("c256")
    async def handler(ctx: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        started.append(ctx.execution_id)
        if len(started) >= 200:
            release.set()
        await w.clock.wait(release, 5.0)  # hold the first ones so many run at once
        running -= 1

    ids = [api.submit(type="c256").id for _ in range(300)]
    with serving(w):
        for eid in ids:
            wait_state(api, eid, {E.EXECUTION_STATE_SUCCEEDED}, timeout=60)
    assert sorted(started) == sorted(ids), "every job ran once"
    assert peak > 100, f"more than 100 ran at once (peak {peak})"


class SlowCompletions(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Delays every CompleteExecutions by `delay_s` and records when each returned."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls: list[tuple[float, float, list[str]]] = []  # (sent, returned, execution ids)

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if not method.endswith("/CompleteExecutions"):
            return await continuation(details, request)
        sent = time.monotonic()
        await asyncio.sleep(self.delay_s)  # the slowness under test, not a wait for something
        call = await continuation(details, request)
        await call
        self.calls.append((sent, time.monotonic(), [i.execution_id for i in request.items]))
        return call


def test_a_slot_is_reused_while_the_previous_completion_report_is_in_flight(
        node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    api = Api(address, "acme")
    slow = SlowCompletions(1.0)
    w = Worker(address, token=ADMIN, concurrency=1, worker_id="w-slot", interceptors=[slow])
    starts: dict[str, float] = {}

    @w.job("slot")
    async def handler(ctx: JobContext) -> dict[str, int]:
        starts[ctx.execution_id] = time.monotonic()
        return {"n": len(starts)}

    ids = [api.submit(type="slot").id for _ in range(3)]
    with serving(w):
        for eid in ids:
            wait_state(api, eid, {E.EXECUTION_STATE_SUCCEEDED})
        wait_for(lambda: sum(len(c[2]) for c in slow.calls) == 3, 10, "every completion answered")
    returned = {eid: back for _, back, batch in slow.calls for eid in batch}
    order = sorted(ids, key=lambda i: starts[i])
    overlapped = [b for a, b in zip(order, order[1:], strict=False) if starts[b] < returned[a]]
    assert overlapped, f"a handler started before the previous completion returned: {starts} {slow.calls}"


def test_a_cancel_of_a_running_job_ends_cancelled_and_the_handler_is_told(
        node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    api = Api(address, "acme")
    w = Worker(address, token=ADMIN, worker_id="w-cancel", lease_s=3.0, cancel_grace_s=1.0)
    seen: dict[str, Any] = {}
    started: dict[str, threading.Event] = {"polite": threading.Event(), "stubborn": threading.Event()}

    @w.job("polite")
    async def polite(ctx: JobContext) -> dict[str, bool]:
        started["polite"].set()
        await w.clock.wait(ctx.cancelled, 60)
        seen["polite"] = ctx.stop_reason
        return {"ignored": True}  # returning after the cancel still ends CANCELLED

    @w.job("stubborn")
    async def stubborn(ctx: JobContext) -> None:
        started["stubborn"].set()
        try:
            await asyncio.sleep(3600)  # never looks at ctx.cancelled
        except asyncio.CancelledError:
            seen["stubborn"] = ctx.stop_reason
            raise

    with serving(w):
        for kind in ("polite", "stubborn"):
            eid = api.submit(type=kind).id
            assert started[kind].wait(20)
            api.call("CancelExecution", S.CancelExecutionRequest(execution_id=eid))
            ex = wait_state(api, eid, {E.EXECUTION_STATE_CANCELLED, E.EXECUTION_STATE_SUCCEEDED,
                                       E.EXECUTION_STATE_FAILED}, timeout=20)
            assert ex.state == E.EXECUTION_STATE_CANCELLED, ex
            assert seen[kind] == "cancel"


def test_a_handler_past_its_timeout_is_stopped_by_the_worker(node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    api = Api(address, "acme")
    w = Worker(address, token=ADMIN, worker_id="w-timeout", concurrency=1, timeout_grace_s=0.5)
    stopped: dict[str, Any] = {}

    @w.job("slow")
    async def slow(ctx: JobContext) -> None:
        t0 = time.monotonic()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.update(after_s=time.monotonic() - t0, reason=ctx.stop_reason, told=ctx.cancelled.is_set())
            raise

    @w.job("after")
    async def after(ctx: JobContext) -> None:
        return None

    eid = api.submit(type="slow", timeout=dur(2.0), retry_policy=E.RetryPolicy(max_attempts=1)).id
    nxt = api.submit(type="after").id
    with serving(w):
        ex = wait_state(api, eid, {E.EXECUTION_STATE_DEAD, E.EXECUTION_STATE_FAILED}, timeout=20)
        wait_state(api, nxt, {E.EXECUTION_STATE_SUCCEEDED}, timeout=20)  # its slot was freed
    assert ex.state == E.EXECUTION_STATE_DEAD and ex.error_type == "timeout", ex
    assert stopped["reason"] == "timeout" and stopped["told"]
    assert 1.9 <= stopped["after_s"] <= 4.0, stopped


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_completion_report_during_a_node_restart_is_not_lost(tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        auth = ["--auth-file", str(write_auth_file(tmp_path / "auth.json")), "--listen", listen]
        c.start_node("n1", *auth)
        api = Api(listen, "acme")
        w = Worker(listen, token=ADMIN, worker_id="w-restart")
        started, go = threading.Event(), threading.Event()
        runs: list[int] = []

        @w.job("restart")
        async def handler(ctx: JobContext) -> dict[str, bool]:
            runs.append(ctx.attempt)
            started.set()
            await asyncio.to_thread(go.wait, 60)
            return {"ok": True}

        eid = api.submit(type="restart").id
        with serving(w):
            assert started.wait(20)
            c.kill_node("n1")
            go.set()  # the handler returns while no node is up: its report meets UNAVAILABLE
            wait_for(lambda: w.completed == 1, 10, "the handler returned")
            assert w.reporter is not None and w.reporter.pending == 1, "its report waits for a node"
            assert not w.running, "its slot is free"
            wait_for(lambda: w.reporter is not None and w.reporter.retries >= 3, 10, "the report to meet UNAVAILABLE")
            c.start_node("n2", *auth)
            ex = wait_state(Api(listen, "acme"), eid, {E.EXECUTION_STATE_SUCCEEDED}, timeout=30)
        assert ex.attempt == 1 and runs == [1], (ex, runs)


def test_a_worker_with_a_bad_token_exits_non_zero_with_one_line(node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    out = subprocess.run([sys.executable, "-m", "cronwheel", "worker", "tests.e2e.worker_sdk_jobs",
                          "--address", address, "--token", "not-a-token"],
                         capture_output=True, text=True, timeout=60)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode != 0 and len(lines) == 1, (out.returncode, out.stderr)
    assert "UNAUTHENTICATED" in lines[0] and "worker" in lines[0], lines


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-such-host.invalid:7070"])
def test_a_worker_that_reaches_no_node_exits_after_the_start_up_wait(address: str) -> None:
    out = subprocess.run([sys.executable, "-m", "cronwheel", "worker", "tests.e2e.worker_sdk_jobs",
                          "--address", address], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "CRONWHEEL_TEST_CONNECT_TIMEOUT_S": "2"})
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 3 and len(lines) == 1, (out.returncode, out.stderr)
    assert address in lines[0], lines


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_a_worker_runs_jobs_from_a_node_that_serves_tls(tmp_path: Path) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                   check=True, capture_output=True)
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        n = c.start_node("tls", "--auth-file", str(write_auth_file(tmp_path / "auth.json")),
                         "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem"))
        creds = grpc.ssl_channel_credentials(root_certificates=(tmp_path / "cert.pem").read_bytes())
        api = Api(n.address, "acme", channel=grpc.secure_channel(n.address, creds))
        w = Worker(n.address, token=ADMIN, ca_file=str(tmp_path / "cert.pem"), worker_id="w-tls")

        @w.job("tls")
        async def handler(ctx: JobContext) -> dict[str, bool]:
            return {"tls": True}

        eid = api.submit(type="tls").id
        with serving(w):
            wait_state(api, eid, {E.EXECUTION_STATE_SUCCEEDED}, timeout=30)


def test_overlap_replace_ends_the_old_run_cancelled_and_the_new_one_does_not_wait(
        node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    api = Api(address, "acme")
    sched = api.create(name="replace-me", job_type="rep", overlap_policy=E.OVERLAP_POLICY_REPLACE)
    w = Worker(address, token=ADMIN, worker_id="w-replace", lease_s=3.0)
    events: list[tuple[str, str]] = []
    first_started = threading.Event()

    @w.job("rep")
    async def handler(ctx: JobContext) -> dict[str, bool]:
        events.append(("start", ctx.execution_id))
        if len(events) == 1:
            first_started.set()
            await w.clock.wait(ctx.cancelled, 60)
            events.append(("told", ctx.stop_reason or ""))
        events.append(("end", ctx.execution_id))
        return {"done": True}

    with serving(w):
        old = api.call("TriggerSchedule", S.TriggerScheduleRequest(schedule_id=sched.id)).execution.id
        assert first_started.wait(20)
        new = api.call("TriggerSchedule", S.TriggerScheduleRequest(schedule_id=sched.id)).execution.id
        assert wait_state(api, old, {E.EXECUTION_STATE_CANCELLED, E.EXECUTION_STATE_SUCCEEDED}).state == \
            E.EXECUTION_STATE_CANCELLED
        wait_state(api, new, {E.EXECUTION_STATE_SUCCEEDED})
    assert ("told", "cancel") in events
    assert events.index(("start", new)) < events.index(("end", old)), f"the new run did not wait: {events}"


def test_a_worker_whose_settings_the_node_refuses_stops_with_a_typed_error(
        node: tuple[ProcessCluster, str]) -> None:
    _, address = node
    w = Worker(address, token=ADMIN, worker_id="w-bad-lease", lease_s=0.5)  # the node takes 1 s .. 1 h

    @w.job("never")
    async def handler(ctx: JobContext) -> None:
        return None

    with pytest.raises(WorkerStopped) as ei, serving(w):
        wait_for(lambda: w._stopping.is_set(), 20, "the worker to stop by itself")
    assert ei.value.code == "INVALID_ARGUMENT" and ei.value.exit_code == 2
    assert "lease_duration" in ei.value.message and "w-bad-lease" in ei.value.message


def test_a_handler_knows_when_the_node_leased_its_attempt(node: tuple[ProcessCluster, str]) -> None:
    """ctx.started_at is the node's claim time (the execution's started_at), between submit and
    the handler's own start."""
    _, address = node
    api = Api(address, "acme")
    w = Worker(address, token=ADMIN, worker_id="w-started-at")
    seen: dict[str, Any] = {}

    @w.job("when")
    async def handler(ctx: JobContext) -> None:
        seen[ctx.execution_id] = (ctx.started_at, time.time())

    before = time.time()
    eid = api.submit(type="when").id
    with serving(w):
        ex = wait_state(api, eid, {E.EXECUTION_STATE_SUCCEEDED})
    leased, handler_start = seen[eid]
    assert leased is not None and leased.tzinfo is not None
    assert leased == ex.started_at.ToDatetime().replace(tzinfo=UTC)
    assert before - 1 <= leased.timestamp() <= handler_start + 1
