"""The worker's outbox on a fake DispatchService stub and a FakeClock: reports are batched,
retried through UNAVAILABLE, given up only after the lease lapsed, and never block a slot."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from cronwheel.client.worker_connection import WorkerStopped
from cronwheel.client.worker_policy import HOLD_COMPLETIONS_RUNS, HOLD_COMPLETIONS_S, Verdict
from cronwheel.client.worker_reports import Report, Reporter
from cronwheel.clock import FakeClock
from cronwheel.limits import MAX_COMPLETE_BATCH
from cronwheel.v1 import dispatch_pb2


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=code.name)


class FakeStub:
    """Answers from scripted lists of errors; records what reached it."""

    def __init__(self) -> None:
        self.complete_errors: list[grpc.StatusCode] = []
        self.fail_errors: list[grpc.StatusCode] = []
        self.item_codes: dict[str, int] = {}
        self.batches: list[list[str]] = []
        self.fails: list[dispatch_pb2.FailExecutionRequest] = []
        self.gate: asyncio.Event | None = None

    async def CompleteExecutions(self, req: Any, **_: Any) -> Any:  # noqa: N802 (the RPC's name)
        if self.gate is not None:
            await self.gate.wait()
        if self.complete_errors:
            raise rpc_error(self.complete_errors.pop(0))
        self.batches.append([i.execution_id for i in req.items])
        return dispatch_pb2.CompleteExecutionsResponse(outcomes=[
            dispatch_pb2.CompleteExecutionOutcome(execution_id=i.execution_id,
                                                  code=self.item_codes.pop(i.execution_id, 0), message="refused")
            for i in req.items])

    async def FailExecution(self, req: Any, **_: Any) -> Any:  # noqa: N802
        if self.fail_errors:
            raise rpc_error(self.fail_errors.pop(0))
        self.fails.append(req)
        return dispatch_pb2.FailExecutionResponse()


def done(eid: str, give_up_at: float = 1e9) -> Report:
    return Report(eid, 1, Verdict("complete", result_json="{}"), give_up_at)


def failed(eid: str, give_up_at: float = 1e9) -> Report:
    return Report(eid, 1, Verdict("fail", error="boom", error_type="RuntimeError"), give_up_at)


async def drain(clock: FakeClock, reporter: Reporter, rounds: int = 200) -> None:
    for _ in range(rounds):
        if not reporter.pending:
            return
        await clock.jump_to_next()
    raise AssertionError(f"{reporter.pending} reports still pending")


async def settle() -> None:
    """Let every runnable task run until it waits (no clock moves)."""
    for _ in range(50):
        await asyncio.sleep(0)


@pytest.fixture
def setup() -> tuple[FakeStub, FakeClock, list[WorkerStopped]]:
    return FakeStub(), FakeClock(), []


async def test_completions_that_arrive_while_a_call_is_in_flight_leave_together(setup: Any) -> None:
    stub, clock, fatal = setup
    r = Reporter(stub, "w", (), clock, fatal.append, max_batches=1)
    task = asyncio.create_task(r.run())
    stub.gate = asyncio.Event()
    r.submit(done("a"))
    await asyncio.sleep(0)
    for e in "bcd":
        r.submit(done(e))
    stub.gate.set()
    await drain(clock, r)
    assert stub.batches == [["a"], ["b", "c", "d"]] and r.sent == 4
    task.cancel()


async def test_completions_wait_while_a_herd_is_leased_and_leave_when_it_is_in(setup: Any) -> None:
    stub, clock, fatal = setup
    herd, t0 = [True], clock.monotonic()
    r = Reporter(stub, "w", (), clock, fatal.append, intaking=lambda: herd[0])
    task = asyncio.create_task(r.run())
    for e in "ab":
        r.submit(done(e))
    await settle()
    assert stub.batches == []  # held: the herd's claims go first
    clock.advance(HOLD_COMPLETIONS_S / 2)
    r.submit(done("c"))
    await settle()
    assert stub.batches == []
    herd[0] = False  # the last lease answer was short: the herd is in
    r.wake()
    await drain(clock, r)
    assert stub.batches == [["a", "b", "c"]]
    assert clock.monotonic() - t0 == pytest.approx(HOLD_COMPLETIONS_S / 2, abs=1e-3)
    task.cancel()


async def test_completions_are_held_at_most_hold_completions_s_even_during_a_long_herd(setup: Any) -> None:
    stub, clock, fatal = setup
    t0 = clock.monotonic()
    r = Reporter(stub, "w", (), clock, fatal.append, intaking=lambda: True)
    task = asyncio.create_task(r.run())
    r.submit(done("a"))
    await drain(clock, r)
    assert stub.batches == [["a"]] and clock.monotonic() - t0 == pytest.approx(HOLD_COMPLETIONS_S, abs=1e-3)
    for i in range(HOLD_COMPLETIONS_RUNS):  # or until enough wait: they go at once
        r.submit(done(str(i)))
    await drain(clock, r)
    assert len(stub.batches[1]) == HOLD_COMPLETIONS_RUNS
    assert clock.monotonic() - t0 == pytest.approx(HOLD_COMPLETIONS_S, abs=1e-3)
    task.cancel()


async def test_completions_left_after_a_full_batch_are_held_from_their_arrival_not_from_the_send(
        setup: Any) -> None:
    stub, clock, fatal = setup
    t0 = clock.monotonic()
    r = Reporter(stub, "w", (), clock, fatal.append, max_batches=1, intaking=lambda: True)
    task = asyncio.create_task(r.run())
    stub.gate = asyncio.Event()
    for i in range(HOLD_COMPLETIONS_RUNS):  # enough to go at once: the one batch allowed is out
        r.submit(done(f"a{i}"))
    await settle()
    for i in range(MAX_COMPLETE_BATCH + 100):  # arrive at t0 behind it: a full batch and 100 more
        r.submit(done(f"b{i}"))
    clock.advance(0.9 * HOLD_COMPLETIONS_S)
    stub.gate.set()
    await drain(clock, r)
    assert [len(b) for b in stub.batches] == [HOLD_COMPLETIONS_RUNS, MAX_COMPLETE_BATCH, 100]
    # the last 100 arrived at t0: they go once HOLD_COMPLETIONS_S has passed since then, not that
    # long after the batch before them was sent (at 0.9 * HOLD_COMPLETIONS_S)
    assert clock.monotonic() - t0 == pytest.approx(HOLD_COMPLETIONS_S, abs=1e-3)
    task.cancel()


async def test_a_report_that_meets_unavailable_is_retried_not_dropped(setup: Any) -> None:
    stub, clock, fatal = setup
    stub.complete_errors = [grpc.StatusCode.UNAVAILABLE] * 3
    stub.fail_errors = [grpc.StatusCode.DEADLINE_EXCEEDED] * 2
    r = Reporter(stub, "w", (), clock, fatal.append)
    task = asyncio.create_task(r.run())
    r.submit(done("a"))
    r.submit(failed("b"))
    await drain(clock, r)
    assert stub.batches == [["a"]] and [f.execution_id for f in stub.fails] == ["b"]
    assert r.sent == 2 and r.retries == 5 and r.given_up == 0 and not fatal
    task.cancel()


async def test_a_report_is_given_up_only_once_its_lease_has_lapsed(setup: Any) -> None:
    stub, clock, fatal = setup
    stub.complete_errors = [grpc.StatusCode.UNAVAILABLE] * 1000
    r = Reporter(stub, "w", (), clock, fatal.append)
    task = asyncio.create_task(r.run())
    start = clock.monotonic()
    r.submit(done("a", give_up_at=start + 30))
    await drain(clock, r, rounds=1000)
    assert r.given_up == 1 and clock.monotonic() >= start + 30 and r.retries > 10
    task.cancel()


async def test_a_refused_result_ends_the_run_as_a_failure_and_a_stale_one_is_dropped(setup: Any) -> None:
    stub, clock, fatal = setup
    stub.item_codes = {"big": grpc.StatusCode.INVALID_ARGUMENT.value[0],
                       "old": grpc.StatusCode.FAILED_PRECONDITION.value[0]}
    r = Reporter(stub, "w", (), clock, fatal.append)
    task = asyncio.create_task(r.run())
    for e in ("big", "old", "ok"):
        r.submit(done(e))
    await drain(clock, r)
    assert [(f.execution_id, f.error_type, f.retryable) for f in stub.fails] == [("big", "invalid_result", False)]
    assert r.refused == 1
    task.cancel()


async def test_unauthenticated_stops_the_worker(setup: Any) -> None:
    stub, clock, fatal = setup
    stub.complete_errors = [grpc.StatusCode.UNAUTHENTICATED]
    r = Reporter(stub, "w", (), clock, fatal.append)
    task = asyncio.create_task(r.run())
    r.submit(done("a"))
    await drain(clock, r)
    assert [f.code for f in fatal] == ["UNAUTHENTICATED"] and fatal[0].exit_code == 1
    task.cancel()


async def test_flush_waits_for_the_outbox_and_says_when_it_could_not(setup: Any) -> None:
    stub, clock, fatal = setup
    stub.gate = asyncio.Event()
    r = Reporter(stub, "w", (), clock, fatal.append)
    task = asyncio.create_task(r.run())
    r.submit(done("a"))
    flushing = asyncio.create_task(r.flush(5.0))
    await clock.jump_to_next()
    assert await flushing is False
    stub.gate.set()
    assert await r.flush(5.0) is True
    task.cancel()
