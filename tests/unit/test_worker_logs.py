"""The worker SDK's log capture (client/worker_logs.py) without a node: routing by the running
attempt, the per-attempt bound (head, mark, tail), and the shipper's cadence, retries and
ordering before reports, on a FakeClock with a stub that records AppendLogs calls."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import grpc
import pytest

from cronwheel.client.worker_logs import (
    TAIL_BYTES,
    AttemptLog,
    LogShipper,
    current,
    install_capture,
    mark_text,
    uninstall_capture,
)
from cronwheel.clock import FakeClock
from cronwheel.limits import ATTEMPT_LOG_BYTES, ATTEMPT_LOG_HEAD_BYTES, MAX_LOG_LINE_BYTES
from cronwheel.v1 import dispatch_pb2


class Unavailable(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down")


class Stub:
    """Records AppendLogs requests; `fail` calls fail UNAVAILABLE first; `refuse` execution ids
    are answered FAILED_PRECONDITION."""

    def __init__(self, fail: int = 0, refuse: frozenset[str] = frozenset()) -> None:
        self.calls: list[dispatch_pb2.AppendLogsRequest] = []
        self.fail = fail
        self.refuse = refuse
        self.called = asyncio.Event()

    async def AppendLogs(self, req: dispatch_pb2.AppendLogsRequest, **_: Any) -> Any:  # noqa: N802
        self.called.set()
        if self.fail:
            self.fail -= 1
            raise Unavailable()
        self.calls.append(req)
        resp = dispatch_pb2.AppendLogsResponse()
        for item in req.items:
            o = resp.outcomes.add(execution_id=item.execution_id)
            if item.execution_id in self.refuse:
                o.code, o.message = grpc.StatusCode.FAILED_PRECONDITION.value[0], "stale"
        return resp

    def lines(self, execution_id: str) -> list[tuple[int, str]]:
        return [(ln.seq, ln.message) for req in self.calls for item in req.items
                if item.execution_id == execution_id for ln in item.lines]


def shipper(stub: Stub, clock: FakeClock) -> LogShipper:
    return LogShipper(stub, "w1", (), clock, lambda exc: None, batch_s=0.1)


def test_an_attempt_past_its_bound_keeps_head_and_tail_with_a_mark_between() -> None:
    clock = FakeClock()
    a = AttemptLog("e1", 1, clock, shipper(Stub(), clock))
    line = "x" * 1000
    n = 10_000  # 10 MB
    for _ in range(n):
        a.write("INFO", "job", line)
    a.close()
    kept = a.take(100_000, 100 * ATTEMPT_LOG_BYTES)
    head = [ln for ln in kept if ln[0] <= ATTEMPT_LOG_HEAD_BYTES // 1000]
    mark = [ln for ln in kept if ln[4].startswith("[cronwheel:")]
    tail = kept[len(head) + 1:]
    assert [ln[0] for ln in head] == list(range(1, len(head) + 1))
    assert len(head) == ATTEMPT_LOG_HEAD_BYTES // 1000
    assert len(mark) == 1 and kept[len(head)] == mark[0]
    assert tail[-1][0] == n and [ln[0] for ln in tail] == list(range(tail[0][0], n + 1))
    assert sum(ln[5] for ln in tail) <= TAIL_BYTES
    cut = n - len(head) - len(tail)
    assert mark[0][0] == len(head) + 1  # the mark takes the first cut line's number
    assert mark[0][4] == mark_text(cut, cut * 1000)
    assert sum(ln[5] for ln in kept) <= ATTEMPT_LOG_BYTES


def test_a_line_over_the_line_bound_is_cut_and_says_so() -> None:
    clock = FakeClock()
    a = AttemptLog("e1", 1, clock, shipper(Stub(), clock))
    a.write("INFO", "", "é" * MAX_LOG_LINE_BYTES)
    (ln,) = a.take(10, 10 * MAX_LOG_LINE_BYTES)
    assert ln[5] == len(ln[4].encode()) <= MAX_LOG_LINE_BYTES
    assert ln[4].endswith("bytes of this line cut]")


async def test_records_go_to_the_attempt_of_the_task_and_thread_that_emitted_them() -> None:
    clock = FakeClock()
    ship = shipper(Stub(), clock)
    a, b = ship.attempt("a", 1), ship.attempt("b", 1)
    job_log = logging.getLogger("tests.job")
    job_log.setLevel(logging.INFO)
    install_capture()
    try:
        async def handler(att: AttemptLog, name: str) -> None:
            current.set(att)
            job_log.info("%s one", name)
            await asyncio.sleep(0)
            job_log.warning("%s two", name)

        def sync_handler() -> None:
            job_log.info("b from a thread")

        await asyncio.gather(asyncio.create_task(handler(a, "a")), asyncio.create_task(handler(b, "b")))
        token = current.set(b)
        import contextvars
        t = threading.Thread(target=contextvars.copy_context().run, args=(sync_handler,))
        current.reset(token)
        t.start()
        t.join()
        job_log.info("outside any attempt")
    finally:
        uninstall_capture()
        job_log.setLevel(logging.NOTSET)
    assert [(ln[2], ln[3], ln[4]) for ln in a.take(100, 10**6)] == [("INFO", "tests.job", "a one"),
                                                                   ("WARNING", "tests.job", "a two")]
    assert [ln[4] for ln in b.take(100, 10**6)] == ["b one", "b two", "b from a thread"]


async def test_lines_ship_within_the_batch_window_and_before_the_report_retrying_a_failed_call() -> None:
    clock = FakeClock()
    stub = Stub(fail=1)
    ship = shipper(stub, clock)
    task = asyncio.create_task(ship.run())
    try:
        a = ship.attempt("e1", 7)
        a.write("INFO", "", "first")
        await clock.until_asleep()  # gathering for batch_s
        clock.advance(0.1)
        await asyncio.wait_for(stub.called.wait(), 2)  # sent at 0.1 s, failed UNAVAILABLE
        await clock.until_asleep()  # its backoff
        reported: list[str] = []
        a.write("INFO", "", "second")
        ship.close(a, lambda: reported.append("report"))
        assert reported == []  # the report waits for the lines
        for _ in range(50):
            if reported:
                break
            clock.advance(0.5)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert reported == ["report"]
        assert stub.lines("e1") == [(1, "first"), (2, "second")]
        assert all(item.fencing_token == 7 for req in stub.calls for item in req.items)
        assert await ship.flush(1.0)
    finally:
        task.cancel()


async def test_a_refused_attempt_is_dropped_and_its_report_released() -> None:
    clock = FakeClock()
    stub = Stub(refuse=frozenset({"gone"}))
    ship = shipper(stub, clock)
    task = asyncio.create_task(ship.run())
    try:
        a = ship.attempt("gone", 3)
        a.write("INFO", "", "x")
        reported: list[str] = []
        ship.close(a, lambda: reported.append("report"))
        for _ in range(20):
            if reported:
                break
            await asyncio.sleep(0)
        assert reported == ["report"] and a.dead and ship.refused == 1
        a.write("INFO", "", "after")  # nothing more is kept
        assert not a.unsent
    finally:
        task.cancel()


async def test_an_attempt_refused_while_its_handler_runs_keeps_no_later_line() -> None:
    # The refusal, not the close, stops it: the attempt is still open when the node refuses it.
    clock = FakeClock()
    stub = Stub(refuse=frozenset({"gone"}))
    ship = shipper(stub, clock)
    task = asyncio.create_task(ship.run())
    try:
        a = ship.attempt("gone", 3)
        a.write("INFO", "", "x")
        await clock.until_asleep()  # gathering for batch_s
        clock.advance(0.1)
        await asyncio.wait_for(stub.called.wait(), 2)
        for _ in range(20):
            if a.dead:
                break
            await asyncio.sleep(0)
        assert a.dead and not a.closed and ship.refused == 1
        a.write("INFO", "", "after")
        assert not a.unsent and not a.tail
    finally:
        task.cancel()


def test_an_attempt_that_wrote_nothing_releases_its_report_at_once() -> None:
    clock = FakeClock()
    ship = shipper(Stub(), clock)
    reported: list[str] = []
    ship.close(ship.attempt("e", 1), lambda: reported.append("report"))
    assert reported == ["report"]


@pytest.mark.parametrize("level", ["info", "ERROR"])
def test_ctx_log_writes_to_the_attempt_whatever_the_logging_configuration(level: str) -> None:
    from cronwheel.client.worker_context import JobContext

    clock = FakeClock()
    a = shipper(Stub(), clock).attempt("e", 1)
    ctx = JobContext("e", None, "t", "default", None, clock.now(), 1, 1, 1, None, None, _log=a)
    ctx.log("hello", level)
    assert [(ln[2], ln[4]) for ln in a.take(10, 10**6)] == [(level.upper(), "hello")]


def test_the_capture_leaves_logging_s_last_resort_to_an_unconfigured_process(
        capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = []
    install_capture()
    try:
        logging.getLogger("tests.unconfigured").warning("still printed")
    finally:
        uninstall_capture()
        root.handlers[:] = saved
    assert "still printed" in capsys.readouterr().err


async def test_a_node_without_append_logs_makes_the_shipper_drop_lines_and_hold_no_report() -> None:
    class Old(Stub):
        async def AppendLogs(self, req: dispatch_pb2.AppendLogsRequest, **_: Any) -> Any:  # noqa: N802
            self.called.set()
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       "Method not found!")

    clock = FakeClock()
    stub = Old()
    ship = shipper(stub, clock)
    task = asyncio.create_task(ship.run())
    try:
        a = ship.attempt("e1", 1)
        a.write("INFO", "", "x")
        await clock.until_asleep()
        clock.advance(0.1)
        await asyncio.wait_for(stub.called.wait(), 2)
        for _ in range(10):
            await asyncio.sleep(0)
        assert not ship.enabled
        b = ship.attempt("e2", 1)
        b.write("INFO", "", "y")
        reported: list[str] = []
        ship.close(b, lambda: reported.append("report"))
        assert reported == ["report"]  # at once: nothing to wait for
    finally:
        task.cancel()
