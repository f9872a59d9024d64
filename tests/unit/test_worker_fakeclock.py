"""The Worker on a fake DispatchService stub and a FakeClock: its timers (timeout, cancel grace,
heartbeats) run on the clock it is given, and the lease calls never ask beyond the node's limit."""

from __future__ import annotations

import asyncio
import gc
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from cronwheel.client import JobContext, Worker
from cronwheel.client.worker_policy import LEASE_CALL_RUNS, PREFETCH_WINDOW_S
from cronwheel.clock import FakeClock
from cronwheel.limits import MAX_LEASE_COUNT
from cronwheel.v1 import dispatch_pb2


def leased(eid: str, timeout_s: float | None = None) -> dispatch_pb2.LeasedExecution:
    ex = dispatch_pb2.LeasedExecution(execution_id=eid, type="job", tenant="t", payload_json="{}",
                                      attempt=1, max_attempts=3, fencing_token=7)
    if timeout_s is not None:
        ex.timeout.CopyFrom(Duration(seconds=int(timeout_s)))
    return ex


class FakeDispatch:
    """Hands out `queue` to the first lease calls, then long-polls until the test ends."""

    def __init__(self, queue: list[dispatch_pb2.LeasedExecution], cancel_after_beats: int | None = None) -> None:
        self.queue = queue
        self.asked: list[int] = []
        self.fails: list[dispatch_pb2.FailExecutionRequest] = []
        self.completes: list[str] = []
        self.beats = 0
        self.cancel_after_beats = cancel_after_beats
        self.never = asyncio.Event()

    async def LeaseExecutions(self, req: Any, **_: Any) -> Any:  # noqa: N802 (the RPC's name)
        self.asked.append(req.max_count)
        if self.queue:
            out, self.queue = self.queue[:req.max_count], self.queue[req.max_count:]
            return dispatch_pb2.LeaseExecutionsResponse(executions=out)
        await self.never.wait()
        return dispatch_pb2.LeaseExecutionsResponse()

    async def Heartbeat(self, req: Any, **_: Any) -> Any:  # noqa: N802
        self.beats += 1
        cancel = self.cancel_after_beats is not None and self.beats >= self.cancel_after_beats
        return dispatch_pb2.HeartbeatResponse(cancel_requested=cancel)

    async def FailExecution(self, req: Any, **_: Any) -> Any:  # noqa: N802
        self.fails.append(req)
        return dispatch_pb2.FailExecutionResponse()

    async def CompleteExecutions(self, req: Any, **_: Any) -> Any:  # noqa: N802
        self.completes += [i.execution_id for i in req.items]
        return dispatch_pb2.CompleteExecutionsResponse(outcomes=[
            dispatch_pb2.CompleteExecutionOutcome(execution_id=i.execution_id) for i in req.items])


async def run_until(clock: FakeClock, cond: Any, steps: int = 500) -> None:
    for _ in range(steps):
        if cond():
            return
        await clock.jump_to_next()
    raise AssertionError("condition never held")


async def test_a_handler_past_its_timeout_is_told_then_cancelled_on_the_workers_clock() -> None:
    clock = FakeClock()
    w = Worker("fake:1", concurrency=2, clock=clock, timeout_grace_s=1.0)
    seen: dict[str, Any] = {}

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        t0 = clock.monotonic()
        await clock.wait(ctx.cancelled, 3600)
        seen["told_after"] = clock.monotonic() - t0
        try:
            await clock.sleep(3600)  # ignores the warning
        except asyncio.CancelledError:
            seen["cancelled_after"] = clock.monotonic() - t0
            raise

    stub = FakeDispatch([leased("a", timeout_s=8)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: stub.fails)
    assert seen == {"told_after": 7.0, "cancelled_after": 8.0}
    assert [(f.execution_id, f.error_type, f.retryable) for f in stub.fails] == [("a", "timeout", True)]
    w.stop()
    await serving


async def test_a_cancel_request_stops_a_handler_that_ignores_it_and_ends_as_a_failure() -> None:
    clock = FakeClock()
    w = Worker("fake:1", clock=clock, lease_s=3.0, cancel_grace_s=2.0)

    @w.job("job")
    async def handler(ctx: JobContext) -> dict[str, bool]:
        await clock.sleep(3600)
        return {"never": True}

    stub = FakeDispatch([leased("a")], cancel_after_beats=1)
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: stub.fails)
    assert [(f.error_type, f.retryable) for f in stub.fails] == [("cancelled", False)] and not stub.completes
    w.stop()
    await serving


async def test_a_handler_that_ignores_its_cancellation_is_reported_once_and_its_slot_freed() -> None:
    # The handler's task is the run; its watchdog (made for the timeout) reports it when it
    # has not stopped timeout_grace_s after it was cancelled, frees its slot for the next run,
    # and the handler's own end later reports nothing more.
    clock = FakeClock()
    w = Worker("fake:1", concurrency=1, clock=clock, timeout_grace_s=1.0)
    release = asyncio.Event()
    ended: list[str] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> dict[str, bool] | None:
        if ctx.execution_id == "b":
            return None
        while True:
            try:
                await release.wait()
                ended.append(ctx.execution_id)
                return {"late": True}
            except asyncio.CancelledError:
                continue  # ignores it

    stub = FakeDispatch([leased("a", timeout_s=8), leased("b")])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: stub.completes == ["b"])
    assert [(f.execution_id, f.error_type) for f in stub.fails] == [("a", "timeout")]
    assert "a" not in w.running and ended == []  # reported while the handler still runs
    release.set()
    await run_until(clock, lambda: ended == ["a"])
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(stub.fails) == 1 and stub.completes == ["b"]  # its late end reported nothing
    w.stop()
    await serving


async def test_a_run_is_one_task_until_it_is_told_to_stop_and_shutdown_waits_for_its_handler() -> None:
    clock = FakeClock()
    w = Worker("fake:1", clock=clock, grace_s=5.0)
    told: list[str | None] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> dict[str, bool]:
        await ctx.cancelled.wait()
        await clock.sleep(2.0)  # checkpoints, say: within the grace
        told.append(ctx.stop_reason)
        return {"ok": True}

    stub = FakeDispatch([leased("a")])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: "a" in w.running)
    assert w.running["a"].watch is None  # no timeout, nothing told: no watchdog task
    w.stop()
    await run_until(clock, lambda: serving.done())
    await serving
    assert told == ["shutdown"] and stub.completes == ["a"] and not stub.fails


async def test_no_lease_call_asks_beyond_the_nodes_limit_whatever_the_concurrency() -> None:
    clock = FakeClock()
    w = Worker("fake:1", concurrency=MAX_LEASE_COUNT + 256, clock=clock)

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        return None

    n = 2 * MAX_LEASE_COUNT + 500
    stub = FakeDispatch([leased(f"e{i}") for i in range(n)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: len(stub.completes) == n)
    assert max(stub.asked) == LEASE_CALL_RUNS <= MAX_LEASE_COUNT
    assert sorted(stub.completes) == sorted(f"e{i}" for i in range(n))
    w.stop()
    await serving


async def test_sync_handlers_run_on_the_workers_own_bounded_thread_pool() -> None:
    import threading

    clock = FakeClock()
    w = Worker("fake:1", worker_id="wt", concurrency=8, threads=2, clock=clock)
    lock, running, peak, names = threading.Lock(), [0], [0], set()
    pair = threading.Barrier(2, timeout=10)  # passes only when two handlers run at once

    @w.job("job")
    def handler(ctx: JobContext) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            names.add(threading.current_thread().name.rsplit("_", 1)[0])
        pair.wait()
        with lock:
            running[0] -= 1

    stub = FakeDispatch([leased(f"e{i}") for i in range(4)])
    done = asyncio.Event()
    complete = stub.CompleteExecutions

    async def counting(req: Any, **kw: Any) -> Any:
        out = await complete(req, **kw)
        if len(stub.completes) == 4:
            done.set()
        return out

    stub.CompleteExecutions = counting  # type: ignore[method-assign]
    serving = asyncio.create_task(w.serve_on(stub))
    await asyncio.wait_for(done.wait(), 10)
    assert peak[0] == 2 and names == {"cronwheel-wt"}
    w.stop()
    await serving


async def test_the_next_batch_is_leased_while_the_slots_are_busy_and_started_as_they_free() -> None:
    clock = FakeClock()
    w = Worker("fake:1", concurrency=2, prefetch=2, clock=clock)
    release = asyncio.Event()
    started: list[str] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        started.append(ctx.execution_id)
        await release.wait()

    stub = FakeDispatch([leased(f"e{i}") for i in range(6)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: len(w.pending) == 2)
    assert started == ["e0", "e1"] and len(w.running) == 2  # two run, two more are already leased
    assert sum(stub.asked) == 4  # nothing leased beyond concurrency + prefetch
    release.set()
    await run_until(clock, lambda: len(stub.completes) == 6)
    assert started == [f"e{i}" for i in range(6)]  # in lease order
    w.stop()
    await serving


async def test_runs_leased_ahead_are_heartbeated_and_handed_back_at_shutdown() -> None:
    clock = FakeClock()
    w = Worker("fake:1", concurrency=1, prefetch=2, clock=clock, lease_s=30.0, grace_s=1.0)
    block = asyncio.Event()

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        await block.wait()

    stub = FakeDispatch([leased(f"e{i}") for i in range(3)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: len(w.pending) == 2)
    await run_until(clock, lambda: stub.beats >= 3)  # the running one and both waiting ones
    w.stop()
    await run_until(clock, lambda: len(stub.fails) == 3)
    await serving
    assert sorted(f.execution_id for f in stub.fails) == ["e0", "e1", "e2"]
    assert {(f.error_type, f.retryable) for f in stub.fails} == {("worker_shutdown", True)}


async def test_a_worker_with_a_large_prefetch_asks_in_calls_of_lease_call_runs_and_never_beyond() -> None:
    # 100 slots + 1,000 ahead: an idle worker's 1,100 of room go out as calls of 250 (the node
    # claims them one after another while the worker starts the earlier ones), never a call of
    # 1,000 it would wait for whole.
    clock = FakeClock()
    w = Worker("fake:1", clock=clock, prefetch=MAX_LEASE_COUNT)
    held: list[int] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        held.append(len(w.running) + len(w.pending))

    stub = FakeDispatch([leased(f"e{i}") for i in range(3000)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: len(stub.completes) == 3000, steps=5000)
    assert stub.asked[:4] == [LEASE_CALL_RUNS] * 4 and max(stub.asked) == LEASE_CALL_RUNS
    assert max(held) <= w.concurrency + MAX_LEASE_COUNT  # never beyond slots + prefetch
    assert not w._starts  # a fixed prefetch keeps no pace (start times would pile up)
    w.stop()
    await serving


async def test_the_default_prefetch_grows_with_fast_handlers_and_falls_back_when_the_pace_stops() -> None:
    clock = FakeClock()
    w = Worker("fake:1", clock=clock)
    seen: list[int] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        seen.append(w.prefetch)

    stub = FakeDispatch([leased(f"e{i}") for i in range(3000)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: len(stub.completes) == 3000, steps=5000)
    assert max(seen) == MAX_LEASE_COUNT  # 100 slots that return at once
    assert stub.asked[0] == 200 and max(stub.asked) == LEASE_CALL_RUNS
    clock.advance(PREFETCH_WINDOW_S + 0.01)
    assert w.prefetch == 100  # nothing started lately: one per slot again
    w.stop()
    await serving


async def test_slow_handlers_keep_the_default_prefetch_near_their_own_pace() -> None:
    # 8 slots of 50 ms start at most 24 runs in any 0.1 s: never more than 48 leased ahead.
    clock = FakeClock()
    w = Worker("fake:1", concurrency=8, clock=clock)
    seen: list[int] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        seen.append(w.prefetch)
        await clock.sleep(0.05)

    stub = FakeDispatch([leased(f"e{i}") for i in range(400)])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: len(stub.completes) == 400, steps=20000)
    assert 8 < max(seen) <= 48
    w.stop()
    await serving


def test_prefetch_defaults_to_one_run_per_slot_within_the_nodes_limit() -> None:
    assert Worker("fake:1", concurrency=16).prefetch == 16
    assert Worker("fake:1").prefetch == 100
    assert Worker("fake:1", concurrency=500).prefetch == 500
    assert Worker("fake:1", concurrency=MAX_LEASE_COUNT + 500).prefetch == MAX_LEASE_COUNT
    assert Worker("fake:1", prefetch=0).prefetch == 0


class SlowAnswer(FakeDispatch):
    """The first lease call's answer arrives `delay_s` (fake) after it was sent. With held_s = 0
    the node leased the run at once and the answer was read late (a worker paused with its long
    poll in flight, or a congested network); with held_s = delay_s the node held the long poll
    that long and leased the run just before answering."""

    def __init__(self, queue: list[dispatch_pb2.LeasedExecution], clock: FakeClock, delay_s: float,
                 held_s: float = 0.0) -> None:
        super().__init__(queue)
        self.clock, self.delay_s, self.held_s, self.calls = clock, delay_s, held_s, 0

    async def LeaseExecutions(self, req: Any, **kw: Any) -> Any:  # noqa: N802
        self.calls += 1
        if self.calls == 1:
            await self.clock.sleep(self.delay_s)
            return dispatch_pb2.LeaseExecutionsResponse(executions=[leased("late")],
                                                        held=Duration(seconds=int(self.held_s)))
        return await super().LeaseExecutions(req, **kw)


async def serve_until(stub: SlowAnswer, clock: FakeClock, done: str) -> list[str]:
    """A Worker with lease_s 4 s and no prefetch served by `stub` until `done` is completed: the
    executions its handler ran."""
    w = Worker("fake:1", clock=clock, lease_s=4.0, prefetch=0)
    ran: list[str] = []

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        ran.append(ctx.execution_id)

    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: done in stub.completes)
    w.stop()
    await serving
    return ran


async def test_a_run_whose_lease_lapsed_before_its_answer_was_read_is_not_started() -> None:
    """Its lease counts from the call: past lease_s the node may have requeued it, and starting it
    would run a zombie next to its next attempt (chaos seed 5 saw a concurrency key's runs double).
    Fails without the check (the handler runs 'late')."""
    clock = FakeClock()
    stub = SlowAnswer([leased("fresh")], clock, delay_s=5.0)
    ran = await serve_until(stub, clock, "fresh")
    assert ran == ["fresh"] and "late" not in stub.completes


async def test_a_run_handed_out_after_a_long_poll_held_past_lease_s_is_started() -> None:
    """The node held the poll 5 s (no work yet) and then leased the run: its lease began then, and
    the worker counts it from the call plus the hold the node reports. Fails without the hold (the
    worker took the 5 s wait for a lapsed lease and dropped every run handed out after a wait
    longer than lease_s: CI saw a job go dead after five such attempts)."""
    clock = FakeClock()
    stub = SlowAnswer([], clock, delay_s=5.0, held_s=5.0)
    assert await serve_until(stub, clock, "late") == ["late"]


class CountingDispatch(FakeDispatch):
    """FakeDispatch that counts the lease calls it holds at once; `arrive` queues more work and
    answers the waiting long polls (a node waking them on its notification)."""

    def __init__(self, queue: list[dispatch_pb2.LeasedExecution], clock: FakeClock) -> None:
        super().__init__(queue)
        self.clock = clock
        self.open = 0
        self.most_open: list[int] = [0]  # the most calls held at once, per phase (one per `arrive`)
        self.work = asyncio.Event()

    def arrive(self, more: list[dispatch_pb2.LeasedExecution]) -> None:
        self.queue += more
        self.most_open.append(0)
        self.work.set()
        self.work = asyncio.Event()

    async def LeaseExecutions(self, req: Any, **_: Any) -> Any:  # noqa: N802
        self.asked.append(req.max_count)
        self.open += 1
        self.most_open[-1] = max(self.most_open[-1], self.open)
        arrived = self.clock.monotonic()
        try:
            while not self.queue:
                await self.work.wait()
            out, self.queue = self.queue[:req.max_count], self.queue[req.max_count:]
            held = Duration()
            held.FromTimedelta(timedelta(seconds=self.clock.monotonic() - arrived))  # as the node: leased now
            return dispatch_pb2.LeaseExecutionsResponse(executions=out, held=held)
        finally:
            self.open -= 1


async def test_a_worker_the_node_has_drained_holds_one_long_poll_and_more_once_an_answer_is_full() -> None:
    # 100 slots + 900 ahead: room for four calls of 250. While the node has less than a call's
    # worth queued, the extra polls would each wake on the same notification and claim nothing.
    clock = FakeClock()
    w = Worker("fake:1", clock=clock, prefetch=900)

    @w.job("job")
    async def handler(ctx: JobContext) -> None:
        return None

    stub = CountingDispatch([], clock)
    serving = asyncio.create_task(w.serve_on(stub))
    for k in range(5):  # a trickle: a few runs at a time
        stub.arrive([leased(f"t{k}-{i}") for i in range(3)])
        done = 3 * (k + 1)
        await run_until(clock, lambda d=done: len(stub.completes) >= d, steps=5000)  # type: ignore[misc]
    assert max(stub.most_open) == 1, stub.most_open
    stub.arrive([leased(f"h{i}") for i in range(2000)])  # a herd: the first full answer lifts the limit
    await run_until(clock, lambda: len(stub.completes) >= 15 + 2000, steps=5000)
    assert stub.most_open[-1] >= 3, stub.most_open
    w.stop()
    stub.arrive([])
    await serving


class FreezeProbe(FakeDispatch):
    """FakeDispatch that reads how many objects the collector has frozen at the first lease call."""

    def __init__(self) -> None:
        super().__init__([])
        self.frozen_at_first_call: int | None = None

    async def LeaseExecutions(self, req: Any, **kw: Any) -> Any:  # noqa: N802
        if self.frozen_at_first_call is None:
            self.frozen_at_first_call = gc.get_freeze_count()
        return await super().LeaseExecutions(req, **kw)


async def test_a_worker_that_owns_its_process_freezes_its_startup_heap_before_its_first_lease_call() -> None:
    """A full collection walked the worker's whole startup heap (grpc, protobuf, the handlers'
    modules) with the loop stopped, 15-16 ms a time; in bench.e2e W3 one came 89 ms into a
    1,000-run herd, between two lease answers. `run()` (so `cronwheel worker`) freezes it;
    `serve()` embedded in a program's own loop leaves the collector alone unless asked. Fails
    without the freeze (nothing frozen at the first call)."""
    gc.unfreeze()
    try:
        for freeze, frozen in ((False, False), (True, True)):
            w = Worker("fake:1", clock=FakeClock())

            @w.job("job")
            async def handler(ctx: JobContext) -> None:
                return None

            stub = FreezeProbe()
            serving = asyncio.create_task(w.serve_on(stub, freeze_heap=freeze))
            while stub.frozen_at_first_call is None:
                await asyncio.sleep(0)
            w.stop()
            stub.never.set()
            await serving
            assert (stub.frozen_at_first_call > 10_000) is frozen, (freeze, stub.frozen_at_first_call)
            gc.unfreeze()
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual


def test_worker_run_serves_with_the_heap_frozen(monkeypatch: Any) -> None:
    seen: dict[str, Any] = {}

    async def serve(self: Worker, **kw: Any) -> None:
        seen.update(kw)

    monkeypatch.setattr(Worker, "serve", serve)
    Worker("fake:1").run()
    assert seen == {"install_signals": True, "freeze_heap": True}


class StaleCheckpoints(FakeDispatch):
    """Refuses every checkpoint of a token older than the newest it handed out, as the node does
    once it has requeued a run, and records the tokens whose completions it was sent."""

    def __init__(self, queue: list[dispatch_pb2.LeasedExecution]) -> None:
        super().__init__(queue)
        self.completed_tokens: list[int] = []

    async def Checkpoint(self, req: Any, **_: Any) -> Any:  # noqa: N802
        raise grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   details=f"fencing token {req.fencing_token} is stale")

    async def CompleteExecutions(self, req: Any, **kw: Any) -> Any:  # noqa: N802
        self.completed_tokens += [i.fencing_token for i in req.items]
        return await super().CompleteExecutions(req, **kw)


async def test_an_old_attempts_stale_checkpoint_does_not_stop_the_next_attempt_on_the_same_worker() -> None:
    """Chaos seed 45318: w1 ran token 1 of a long job, its lease lapsed, and w1 leased token 2 of the
    same execution while token 1 still ran; token 1's next checkpoint was refused as stale and
    stopped token 2 (it looked the run up by execution id), so token 2 ended `stopped` at once,
    reported nothing, and the execution ran a third time 6 s later with no cause. Fails without
    the fix: token 2 is told to stop and its completion is never sent."""
    clock = FakeClock()
    w = Worker("fake:1", concurrency=2, clock=clock, lease_s=4.0, prefetch=0)
    second_started = asyncio.Event()
    told: dict[int, bool] = {}

    @w.job("job")
    async def handler(ctx: JobContext) -> dict[str, int] | None:
        if ctx.fencing_token == 1:
            await second_started.wait()
            try:
                await ctx.checkpoint({"step": 1})
            finally:
                told[1] = ctx.cancelled.is_set()
            return None
        second_started.set()
        await clock.sleep(1.0)  # token 1 checkpoints meanwhile
        told[2] = ctx.cancelled.is_set()
        return {"token": ctx.fencing_token}

    old, new = leased("a"), leased("a")
    old.fencing_token, new.fencing_token = 1, 2
    stub = StaleCheckpoints([old, new])
    serving = asyncio.create_task(w.serve_on(stub))
    await run_until(clock, lambda: 2 in told)
    await run_until(clock, lambda: stub.completed_tokens or stub.fails)
    w.stop()
    await serving
    assert told == {1: True, 2: False}
    assert stub.completed_tokens == [2] and not stub.fails
