"""The worker's outbox: completion and failure reports, sent in the background so a handler's
slot is free the moment it returns.

- Completions go as CompleteExecutions batches of up to 1000: while `max_batches` calls are in
  flight, new completions gather and leave together in the next one (batching without a timer).
  While the worker is taking in a herd (a lease call is out and its last answer was full), they
  wait until it is in, at most HOLD_COMPLETIONS_S (0.1 s) or HOLD_COMPLETIONS_RUNS (500) of them
  (worker_policy.hold_completions): each is a row update PostgreSQL would otherwise make beside
  the node's claims of the herd's next runs (W3 in bench.e2e: p99 137 -> 119 ms).
- Failures go one FailExecution each (there is no batch RPC), `max_fails` at a time.
- A call that meets UNAVAILABLE, DEADLINE_EXCEEDED or another transient code is retried with
  backoff; an item the batch answered with a transient code is retried alone. Both RPCs are
  idempotent for a repeated token, so a retry of a report that did land answers the same.
- A report is given up (and logged, `report_given_up`) only once its lease has certainly lapsed
  (`give_up_at`, on the worker's monotonic clock): the reaper has requeued the run by then and
  the node would refuse the stale token anyway. FAILED_PRECONDITION / NOT_FOUND: the run is no
  longer ours (logged, `report_refused`). A completion whose result the node refuses
  (INVALID_ARGUMENT, e.g. over 256 KiB) becomes a non-retryable failure, so the run ends.
- UNAUTHENTICATED / PERMISSION_DENIED are handed to `on_fatal`: the worker stops.

Concurrency: one event loop; `submit()` never blocks or awaits; `flush()` waits until nothing
is pending or in flight.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc

from cronwheel.client.worker_connection import WorkerStopped, permanent
from cronwheel.client.worker_policy import CodeClass, Verdict, backoff_s, classify, hold_completions, status_code
from cronwheel.clock import Clock
from cronwheel.limits import MAX_COMPLETE_BATCH
from cronwheel.v1 import dispatch_pb2

log = logging.getLogger("cronwheel.client.worker")


@dataclass(frozen=True, slots=True)
class Report:
    execution_id: str
    fencing_token: int
    verdict: Verdict
    give_up_at: float  # monotonic: past it the lease has certainly lapsed
    trace_context: str = ""  # the run span's traceparent (tracing on): the node's complete span joins it


class Reporter:
    def __init__(self, stub: Any, worker_id: str, metadata: tuple[tuple[str, str], ...], clock: Clock,
                 on_fatal: Callable[[WorkerStopped], None], *, max_batches: int = 2, max_fails: int = 16,
                 call_timeout_s: float = 10.0, rng: random.Random | None = None,
                 intaking: Callable[[], bool] = lambda: False) -> None:
        self.stub = stub
        self.worker_id = worker_id
        self.metadata = metadata
        self.clock = clock
        self.on_fatal = on_fatal
        self.max_batches = max_batches
        self.max_fails = max_fails
        self.call_timeout_s = call_timeout_s
        self.rng = rng or random.Random()
        self.intaking = intaking  # the worker is leasing a herd (worker_policy.hold_completions)
        self._completes: list[Report] = []
        # Monotonic: when the list last went from empty to one completion. Those left after a send
        # came no earlier, so they are never held longer than HOLD_COMPLETIONS_S from their arrival.
        self._held_since = 0.0
        self._fails: list[Report] = []
        self._batches = 0
        self._fail_calls = 0
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._fatal = False
        self.sent = 0
        self.refused = 0
        self.given_up = 0
        self.retries = 0  # calls (or items) that met a transient code and were tried again

    @property
    def pending(self) -> int:
        return len(self._completes) + len(self._fails) + self._batches + self._fail_calls

    def submit(self, report: Report) -> None:
        if report.verdict.kind == "complete":
            if not self._completes:
                self._held_since = self.clock.monotonic()
            self._completes.append(report)
        else:
            self._fails.append(report)
        self._idle.clear()
        self._wake.set()

    def wake(self) -> None:
        """Look again now (the worker's intake ended: held completions may go)."""
        self._wake.set()

    async def run(self) -> None:
        try:
            hold = 0.0
            while True:
                if hold > 0:
                    await self.clock.wait(self._wake, hold)
                else:
                    await self._wake.wait()
                self._wake.clear()
                hold = hold_completions(self.intaking(), len(self._completes),
                                        self.clock.monotonic() - self._held_since)
                while not hold and self._completes and self._batches < self.max_batches:
                    batch, self._completes = self._completes[:MAX_COMPLETE_BATCH], self._completes[MAX_COMPLETE_BATCH:]
                    self._batches += 1
                    self._spawn(self._send_completes(batch), "batch")
                while self._fails and self._fail_calls < self.max_fails:
                    self._fail_calls += 1
                    self._spawn(self._send_one(self._fails.pop(0)), "fail")
                if not self.pending:
                    self._idle.set()
        finally:
            for t in self._tasks:
                t.cancel()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every report was answered or given up; False if `timeout_s` passed first."""
        done = await self.clock.wait(self._idle, timeout_s)
        if not done:
            lost = self.pending
            log.error("reports not flushed before exit", extra={
                "event": "report_not_flushed", "worker": self.worker_id, "count": lost})
        return done

    def _spawn(self, coro: Any, kind: str) -> None:
        task = asyncio.create_task(coro, name=f"worker-report-{kind}")
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if kind == "batch":
                self._batches -= 1
            else:
                self._fail_calls -= 1
            self._wake.set()

        task.add_done_callback(done)

    # ------------------------------------------------------------------ sending

    def _live(self, items: list[Report], attempt: int, why: str) -> list[Report]:
        now = self.clock.monotonic()
        keep = [r for r in items if now < r.give_up_at and not self._fatal]
        for r in items:
            if r not in keep:
                self.given_up += 1
                log.error("report given up", extra={
                    "event": "report_given_up", "worker": self.worker_id, "execution_id": r.execution_id,
                    "kind": r.verdict.kind, "attempts": attempt, "error": why})
        return keep

    def _fatal_code(self, exc: grpc.aio.AioRpcError, rpc: str) -> None:
        self._fatal = True
        self.on_fatal(permanent(self.worker_id, exc, rpc))

    def _refused(self, r: Report, code: str, detail: str) -> None:
        self.refused += 1
        log.warning("report refused", extra={
            "event": "report_refused", "worker": self.worker_id, "execution_id": r.execution_id,
            "kind": r.verdict.kind, "code": code, "detail": detail})

    def _result_refused(self, r: Report, detail: str) -> None:
        """The node will never store this result: end the run as a failure instead."""
        self.submit(replace(r, verdict=Verdict("fail", error=f"result refused by the node: {detail}",
                                                retryable=False, error_type="invalid_result")))

    async def _send_completes(self, batch: list[Report]) -> None:
        attempt = 0
        while batch:
            attempt += 1
            req = dispatch_pb2.CompleteExecutionsRequest()
            add = req.items.add  # in place: an item built apart is copied in, twice the work
            for r in batch:
                add(execution_id=r.execution_id, fencing_token=r.fencing_token, worker_id=self.worker_id,
                    result_json=r.verdict.result_json, trace_context=r.trace_context)
            try:
                resp = await self.stub.CompleteExecutions(req, timeout=self.call_timeout_s, metadata=self.metadata)
            except grpc.aio.AioRpcError as exc:
                kind = classify(exc.code())
                if kind is CodeClass.FATAL:
                    self._fatal_code(exc, "CompleteExecutions")
                elif kind is not CodeClass.RETRY:  # the batch as a whole was refused: judge each alone
                    for r in batch:
                        await self._send_one(r)
                    return
                self.retries += 1
                batch = self._live(batch, attempt, exc.code().name)
                if batch:
                    await self.clock.sleep(backoff_s(attempt, self.rng.random()))
                continue
            retry: list[Report] = []
            for r, out in zip(batch, resp.outcomes, strict=True):
                code = status_code(out.code)
                kind = classify(code)
                if kind is CodeClass.OK:
                    self.sent += 1
                elif kind is CodeClass.RETRY:
                    retry.append(r)
                elif code == grpc.StatusCode.INVALID_ARGUMENT:
                    self._result_refused(r, out.message)
                else:
                    self._refused(r, code.name, out.message)
            self.retries += len(retry)
            batch = self._live(retry, attempt, "per-item transient code")
            if batch:
                await self.clock.sleep(backoff_s(attempt, self.rng.random()))

    async def _send_one(self, r: Report) -> None:
        """One report by its single RPC (FailExecution, or CompleteExecution as a fallback)."""
        v = r.verdict
        attempt = 0
        while True:
            attempt += 1
            try:
                if v.kind == "complete":
                    await self.stub.CompleteExecution(dispatch_pb2.CompleteExecutionRequest(
                        execution_id=r.execution_id, fencing_token=r.fencing_token, worker_id=self.worker_id,
                        result_json=v.result_json, trace_context=r.trace_context), timeout=self.call_timeout_s,
                        metadata=self.metadata)
                else:
                    req = dispatch_pb2.FailExecutionRequest(
                        execution_id=r.execution_id, fencing_token=r.fencing_token, worker_id=self.worker_id,
                        error=v.error, retryable=v.retryable, error_type=v.error_type,
                        trace_context=r.trace_context)
                    if v.retry_after_s:
                        req.retry_after.FromNanoseconds(int(v.retry_after_s * 1e9))
                    await self.stub.FailExecution(req, timeout=self.call_timeout_s, metadata=self.metadata)
                self.sent += 1
                return
            except grpc.aio.AioRpcError as exc:
                kind = classify(exc.code())
                if kind is CodeClass.FATAL:
                    self._fatal_code(exc, "FailExecution" if v.kind == "fail" else "CompleteExecution")
                elif kind is CodeClass.STALE:
                    self._refused(r, exc.code().name, exc.details() or "")
                    return
                elif kind is CodeClass.REFUSED:
                    if v.kind == "complete" and exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                        self._result_refused(r, exc.details() or "")
                    else:
                        self._refused(r, exc.code().name, exc.details() or "")
                    return
                self.retries += 1
                if not self._live([r], attempt, exc.code().name):
                    return
                await self.clock.sleep(backoff_s(attempt, self.rng.random()))
