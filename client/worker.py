"""The Python worker SDK.

    worker = Worker("127.0.0.1:7070", concurrency=8)

    @worker.job("send_reminder")
    async def send_reminder(ctx: JobContext) -> dict:
        ...                                  # ctx.payload, ctx.execution_id, ctx.scheduled_for,
        await ctx.checkpoint({"sent": 10})   # ctx.attempt, ctx.fencing_token, ctx.checkpoint_value,
        if ctx.cancelled.is_set(): ...       # ctx.deadline
        return {"ok": True}                  # the result (JSON)

    worker.run()        # or: await worker.serve()

Contract (at-least-once): a handler may run more than once for one execution (a worker that was
killed or paused past its lease is replaced); every call carries the fencing token, and a stale
token is refused, which stops the handler (ctx.cancelled is set, its result is dropped).
Handlers must be idempotent on (execution_id, scheduled_for).

Sync handlers run in a thread. Raise `NonRetryable` for failures another attempt cannot fix.
SIGTERM: stop leasing, set ctx.cancelled on running handlers, wait `grace_s` for them to
checkpoint and return, hand unfinished ones back (FailExecution error_type=worker_shutdown, so
another worker resumes them from their checkpoint at once), exit.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import signal
import socket
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

log = logging.getLogger("cronwheel.client.worker")

Handler = Callable[["JobContext"], Any]


class NonRetryable(Exception):
    """Raise from a handler when another attempt cannot succeed (bad input, ...)."""


class Stale(Exception):
    """The execution was leased again or finished elsewhere: stop working on it."""


def _dur(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


@dataclass
class JobContext:
    execution_id: str
    schedule_id: str | None
    type: str
    tenant: str
    payload: Any
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    fencing_token: int
    checkpoint_value: Any
    deadline: datetime | None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    _worker: Worker | None = field(default=None, repr=False)

    async def checkpoint(self, value: Any) -> None:
        """Save progress; a later attempt receives it as `checkpoint_value`."""
        assert self._worker is not None
        await self._worker._checkpoint(self, value)
        self.checkpoint_value = value


class Worker:
    def __init__(self, address: str = "127.0.0.1:7070", *, worker_id: str | None = None,
                 concurrency: int = 4, lease_s: float = 60.0, heartbeat_every_s: float | None = None,
                 grace_s: float = 10.0, token: str | None = None, poll_wait_s: float = 10.0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.address = address
        self.worker_id = worker_id or f"{socket.gethostname()}-{id(self):x}"
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.heartbeat_every_s = heartbeat_every_s or lease_s / 3
        self.grace_s = grace_s
        self.poll_wait_s = poll_wait_s
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.handlers: dict[str, Handler] = {}
        self.running: dict[str, tuple[JobContext, asyncio.Task[None]]] = {}
        self._stopping = asyncio.Event()
        self._done: list[tuple[dispatch_pb2.CompleteExecutionRequest, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.coalesce_s = 0.002
        self.completed = 0
        self.failed = 0

    def job(self, job_type: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            self.handlers[job_type] = fn
            return fn

        return register

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        asyncio.run(self.serve(install_signals=True))

    async def serve(self, install_signals: bool = False) -> None:
        if not self.handlers:
            raise ValueError("no handlers registered (use @worker.job(type))")
        if install_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        async with grpc.aio.insecure_channel(self.address) as ch:
            self.stub = dispatch_pb2_grpc.DispatchServiceStub(ch)
            slots = asyncio.Semaphore(self.concurrency)
            hb = asyncio.create_task(self._heartbeats(), name="worker-heartbeats")
            try:
                await self._lease_loop(slots)
            finally:
                await self._shutdown()
                hb.cancel()

    async def _lease_loop(self, slots: asyncio.Semaphore) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            free = self.concurrency - len(self.running)
            if free <= 0:
                stop = asyncio.ensure_future(self._stopping.wait())
                await asyncio.wait([t for _, t in self.running.values()] + [stop], return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                continue
            lease = asyncio.ensure_future(self._lease(free))
            stop = asyncio.ensure_future(self._stopping.wait())
            done, _ = await asyncio.wait([lease, stop], return_when=asyncio.FIRST_COMPLETED)
            if stop in done and lease not in done:
                lease.cancel()
                break
            stop.cancel()
            try:
                resp = await lease
                backoff = 0.1
            except grpc.aio.AioRpcError as exc:
                log.warning("lease failed", extra={"event": "lease_failed", "code": exc.code().name})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for ex in resp.executions:
                self._start(ex)

    async def _lease(self, free: int) -> dispatch_pb2.LeaseExecutionsResponse:
        return await self.stub.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
            worker_id=self.worker_id, job_types=sorted(self.handlers), max_count=free,
            lease_duration=_dur(self.lease_s), wait_timeout=_dur(self.poll_wait_s),
        ), timeout=self.poll_wait_s + 5, metadata=self.metadata)

    def _start(self, ex: dispatch_pb2.LeasedExecution) -> None:
        ctx = JobContext(
            execution_id=ex.execution_id, schedule_id=ex.schedule_id or None, type=ex.type, tenant=ex.tenant,
            payload=json.loads(ex.payload_json) if ex.payload_json else None,
            scheduled_for=ex.scheduled_for.ToDatetime().replace(tzinfo=_utc()), attempt=ex.attempt,
            max_attempts=ex.max_attempts, fencing_token=ex.fencing_token,
            checkpoint_value=json.loads(ex.checkpoint_json) if ex.checkpoint_json else None,
            deadline=ex.deadline.ToDatetime().replace(tzinfo=_utc()) if ex.HasField("deadline") else None,
            _worker=self,
        )
        task = asyncio.create_task(self._execute(ctx), name=f"job-{ex.execution_id}")
        self.running[ex.execution_id] = (ctx, task)
        task.add_done_callback(lambda _t: self.running.pop(ex.execution_id, None))

    async def _execute(self, ctx: JobContext) -> None:
        handler = self.handlers[ctx.type]
        try:
            if inspect.iscoroutinefunction(handler):
                result = await handler(ctx)
            else:
                result = await asyncio.to_thread(handler, ctx)
                if inspect.isawaitable(result):
                    result = await result
        except Stale:
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler failure is data: report it, keep serving
            if self._stopping.is_set() and ctx.cancelled.is_set():
                await self._report_fail(ctx, "worker shutting down", True, "worker_shutdown")
                return
            await self._report_fail(ctx, "".join(traceback.format_exception(exc))[-16000:],
                                    not isinstance(exc, NonRetryable), type(exc).__name__)
            return
        if self._stopping.is_set() and ctx.cancelled.is_set() and result is None:
            await self._report_fail(ctx, "worker shutting down", True, "worker_shutdown")
            return
        await self._complete(ctx, json.dumps(result) if result is not None else "")
        self.completed += 1

    async def _complete(self, ctx: JobContext, result_json: str) -> None:
        """Completions that finish close together go as one CompleteExecutions call."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._done.append((dispatch_pb2.CompleteExecutionRequest(
            execution_id=ctx.execution_id, fencing_token=ctx.fencing_token, worker_id=self.worker_id,
            result_json=result_json), fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_completions(), name="worker-completions")
        await fut

    async def _flush_completions(self) -> None:
        await asyncio.sleep(self.coalesce_s)  # let handlers finishing at the same moment join
        while self._done:
            batch, self._done = self._done[:500], self._done[500:]
            try:
                resp = await self.stub.CompleteExecutions(dispatch_pb2.CompleteExecutionsRequest(
                    items=[req for req, _ in batch]), timeout=10, metadata=self.metadata)
                for (req, fut), out in zip(batch, resp.outcomes, strict=True):
                    if out.code != 0:
                        log.warning("report refused", extra={"event": "report_refused", "code": out.code,
                                                             "execution_id": req.execution_id, "detail": out.message})
                    if not fut.done():
                        fut.set_result(None)
            except grpc.aio.AioRpcError as exc:
                log.warning("completions not reported", extra={"event": "report_failed", "code": exc.code().name,
                                                               "count": len(batch)})
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)

    async def _report_fail(self, ctx: JobContext, error: str, retryable: bool, error_type: str) -> None:
        self.failed += 1
        await self._report(self.stub.FailExecution(dispatch_pb2.FailExecutionRequest(
            execution_id=ctx.execution_id, fencing_token=ctx.fencing_token, worker_id=self.worker_id,
            error=error, retryable=retryable, error_type=error_type,
        ), timeout=10, metadata=self.metadata), ctx)

    async def _report(self, call: Awaitable[Any], ctx: JobContext) -> None:
        try:
            await call
        except grpc.aio.AioRpcError as exc:
            # FAILED_PRECONDITION: our token is stale (another attempt owns it now). Nothing to do:
            # the execution's fate is no longer ours to decide.
            log.warning("report refused", extra={"event": "report_refused", "execution_id": ctx.execution_id,
                                                 "code": exc.code().name, "detail": exc.details()})

    async def _checkpoint(self, ctx: JobContext, value: Any) -> None:
        try:
            r = await self.stub.Checkpoint(dispatch_pb2.CheckpointRequest(
                execution_id=ctx.execution_id, fencing_token=ctx.fencing_token, worker_id=self.worker_id,
                checkpoint_json=json.dumps(value)), timeout=10, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                ctx.cancelled.set()
                raise Stale(exc.details()) from None
            raise
        if r.cancel_requested:
            ctx.cancelled.set()

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_every_s)
            for ctx, task in list(self.running.values()):
                try:
                    r = await self.stub.Heartbeat(dispatch_pb2.HeartbeatRequest(
                        execution_id=ctx.execution_id, fencing_token=ctx.fencing_token, worker_id=self.worker_id,
                        lease_extension=_dur(self.lease_s)), timeout=5, metadata=self.metadata)
                    if r.cancel_requested:
                        ctx.cancelled.set()
                except grpc.aio.AioRpcError as exc:
                    if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                        # Stale: someone else owns this run now. Stop the handler.
                        ctx.cancelled.set()
                        task.cancel()

    async def _shutdown(self) -> None:
        if not self.running:
            return
        for ctx, _ in self.running.values():
            ctx.cancelled.set()
        tasks = [t for _, t in self.running.values()]
        done, pending = await asyncio.wait(tasks, timeout=self.grace_s)
        for t in pending:
            t.cancel()
        for ctx, task in list(self.running.values()):
            if task in pending:
                await self._report_fail(ctx, "worker shutting down", True, "worker_shutdown")


def _utc() -> Any:
    from datetime import UTC

    return UTC
