"""The Python worker SDK.

    worker = Worker("127.0.0.1:7070", token="...", tls=True, ca_file="ca.pem")

    @worker.job("send_reminder")
    async def send_reminder(ctx: JobContext) -> dict:
        ctx.log("sending")                   # or logging.getLogger(__name__).info(...): the attempt's log
        ...                                  # ctx.payload, ctx.execution_id, ctx.scheduled_for,
        await ctx.checkpoint({"sent": 10})   # ctx.attempt, ctx.fencing_token, ctx.checkpoint_value,
        if ctx.cancelled.is_set(): ...       # ctx.deadline, ctx.stop_reason
        return {"ok": True}                  # the result (JSON)

    worker.run()        # or: await worker.serve()  (run() freezes the startup heap: cronwheel.heap)

Contract (at-least-once): a handler may run more than once for one execution (a worker that was
killed or paused past its lease is replaced); every call carries the fencing token, and a stale
token is refused, which stops the handler (ctx.cancelled is set, its result is dropped).
Handlers must be idempotent on (execution_id, scheduled_for).

Throughput. `concurrency` (default 100) handlers run at once. 100 suits async handlers, which mostly
wait on I/O: 100 coroutines cost little, one lease call fills an idle worker and its prefetch, and
heartbeats stay at 100 * 3 / lease_s RPCs/s (5/s). Sync handlers run on the worker's own thread pool
of `threads` (default 32) threads, never the loop's default executor; when more sync handlers run
than threads, the rest wait for a thread (their timeout counts). A slot is free the moment its
handler returns: reports go in the background (see cronwheel.client.worker_reports: batched,
retried, flushed on exit; while a herd is being leased its completions wait for it, at most 0.1 s,
worker_policy.hold_completions). Prefetch: the worker leases up to `prefetch` runs beyond its free slots
(0 turns it off), so the next batch is on its way while the current one runs; they start in lease
order as slots free, are heartbeated like running ones while they wait, and are handed back
(worker_shutdown) if the worker stops first. By default (prefetch None) it follows the worker's pace
(worker_policy.default_prefetch): one run per slot, or twice what the worker started in the last
0.1 s if more, at most 1,000: fast handlers get a herd in a few large claims, slow ones hold about 0.2 s
of their own work ahead. Runs leased ahead while handlers were fast wait for slots if the next ones
turn out slow (at most 1,000); a worker whose job types mix very fast and very slow handlers can set
`prefetch` to fix the number. Lease calls are kept in flight while there is room, each asking for
min(room, 250) (worker_policy.LEASE_CALL_RUNS; the node's limit is 1,000,
cronwheel.limits), so an idle worker always waits in a long poll and is handed work as soon
as a node queues it (the node wakes waiting polls on its NOTIFY of queued work and on its own fire
batches). While the node has drained the queue for it (its last answer had fewer runs than asked)
the worker holds one long poll, not several: each would wake on the same notification, and all but
the first would claim nothing; a full answer lets it send several again (worker_policy.lease_size).
A busy worker asks again once half its prefetch (at most 250) is free
(worker_policy.refill_at): the rest feeds slots while that call is out, and the node, which claims
one call at a time, gets a few large calls instead of one per handler that returned. Except after a
full answer with none of its calls out: the node may hold more for it and claims nothing until
asked, so it asks once 32 runs are free (worker_policy.NEXT_CALL_RUNS; a herd's last runs had
waited for the threshold). A large room goes out as several such calls at once: the node claims
them one after another while the worker starts the runs of the earlier ones.

A run is one asyncio task, the handler's own: its end reports it and frees its slot (a done
callback). A watchdog task joins it only once there is something timed to watch: the attempt has
a timeout, or the run was told to stop with a grace (below).

Stopping a handler: the worker sets ctx.cancelled (and ctx.stop_reason) and, after a grace,
cancels the handler's task (a sync handler cannot be interrupted: its thread runs on, its result
is dropped); a handler still running timeout_grace_s after that is reported and its slot freed.
- cancel requested (heartbeat or checkpoint answered cancel_requested: CancelExecution, overlap
  `replace`): grace `cancel_grace_s`; whatever the handler then does, the run ends CANCELLED;
- the attempt's timeout (LeasedExecution.timeout, on the worker's monotonic clock from the
  lease's answer): ctx.cancelled is set `timeout_grace_s` (at most a quarter of the timeout)
  before it, the task is cancelled at it, and the run is reported as error_type "timeout"
  (retried as the server's retry policy says), so a handler never runs past its timeout;
- stale token: at once, nothing reported;
- SIGTERM / stop(): stop leasing, grace `grace_s` for handlers to checkpoint and return; runs
  left are handed back (FailExecution error_type=worker_shutdown, so another worker resumes
  them from their checkpoint at once); reports are flushed (at most `report_flush_s`); exit.

Logs: what a handler logs (Python `logging` in its task or thread, and `ctx.log(...)`) is kept per
attempt and shipped by its own task, within about 0.1 s, a run's last lines before its report
(cronwheel.client.worker_logs: the 1 MiB bound per attempt, head and tail with a mark).

Errors no retry can fix (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT on lease, no node
reachable within `connect_timeout_s` of start-up) stop the worker: serve() raises WorkerStopped,
run() prints it as one line and exits non-zero. UNAVAILABLE after the first success is retried
for ever (a node restarting). Log lines name the worker as `worker`.

(Over 400 lines, 70 of them this note: `Worker` is one state machine, slots, lease calls,
heartbeats and stopping; its decisions are in worker_policy, its reports in worker_reports,
its connection in worker_connection and the handler's view in worker_context.)
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import random
import signal
import socket
import sys
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from cronwheel import tracing
from cronwheel.client.convert import instant
from cronwheel.client.worker_connection import Connection, WorkerStopped, permanent, unreachable
from cronwheel.client.worker_context import JobContext, JobFailed, NonRetryable, Run, Stale
from cronwheel.client.worker_logs import LogShipper, install_capture, uninstall_capture
from cronwheel.client.worker_logs import current as current_log
from cronwheel.client.worker_policy import (
    PREFETCH_WINDOW_S,
    CodeClass,
    StopReason,
    Verdict,
    backoff_s,
    classify,
    default_prefetch,
    lease_size,
    max_lease_calls,
    stronger,
    verdict,
)
from cronwheel.client.worker_reports import Report, Reporter
from cronwheel.clock import Clock, SystemClock
from cronwheel.heap import freeze_startup_heap
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

log = logging.getLogger("cronwheel.client.worker")
# Over ~400 lines on purpose: the lease loop, a handler's supervision and the heartbeats share
# the run table; the pure rules (worker_policy), the outbox (worker_reports), the connection and
# the context live beside it.
__all__ = ["JobContext", "JobFailed", "NonRetryable", "Stale", "Worker", "WorkerStopped"]

Handler = Callable[["JobContext"], Any]
DEFAULT_CONCURRENCY = 100
DEFAULT_THREADS = 32


@dataclass(slots=True, eq=False)
class Pending:
    """A run leased ahead of a free slot: started in lease order once one frees."""

    ex: dispatch_pb2.LeasedExecution
    t0: float  # monotonic: its lease counts from here (the call was sent plus the node's hold, or
    #            its last heartbeat)
    t1: float  # monotonic: the lease's answer arrived (its timeout counts from here)


def _dur(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def split_queues(queues: Sequence[str] | Mapping[str, int | None]) -> tuple[list[str], dict[str, int]]:
    """A Worker's queues (sorted) and its slots per capped queue (Worker.queues, .queue_slots)."""
    if isinstance(queues, str):
        raise ValueError(f"queues must be a list of names or a {{name: slots}} mapping, got {queues!r}")
    if not isinstance(queues, Mapping):
        return sorted(set(queues)), {}
    for name, n in queues.items():
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"queues[{name!r}] must be a number of slots >= 1 or None, got {n!r}")
    return sorted(queues), {q: n for q, n in queues.items() if n is not None}


class Worker:
    def __init__(self, address: str = "127.0.0.1:7070", *, worker_id: str | None = None,
                 concurrency: int = DEFAULT_CONCURRENCY, threads: int = DEFAULT_THREADS, lease_s: float = 60.0,
                 heartbeat_every_s: float | None = None, grace_s: float = 10.0, token: str | None = None,
                 poll_wait_s: float = 10.0, tls: bool = False, ca_file: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None, cancel_grace_s: float | None = None,
                 timeout_grace_s: float = 1.0, connect_timeout_s: float = 30.0, report_flush_s: float = 30.0,
                 interceptors: Sequence[Any] = (), clock: Clock | None = None, prefetch: int | None = None,
                 queues: Sequence[str] | Mapping[str, int | None] = (),
                 capabilities: Sequence[str] | Mapping[str, str] = ()) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if prefetch is not None and prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        # The queues it leases from (none: "default"), a {queue: slots} mapping capping how many
        # runs of a queue it holds at once (None: no cap), and the capabilities it advertises
        # ({"gpu": "a100"} or ["gpu=a100"]): the node leases it only runs of those queues, within
        # the slots, whose required capabilities are all advertised.
        self.queues, self.queue_slots = split_queues(queues)
        self.capabilities = sorted(f"{k}={v}" for k, v in capabilities.items()) \
            if isinstance(capabilities, Mapping) else sorted(capabilities)
        self.address = address
        self.tls, self.ca_file, self.cert_file, self.key_file = tls, ca_file, cert_file, key_file
        self.interceptors = tuple(interceptors)
        self._connection().validate()
        self.worker_id = worker_id or f"{socket.gethostname()}-{id(self):x}"
        self.concurrency = concurrency
        self._prefetch = prefetch
        self.pending: list[Pending] = []  # leased ahead (prefetch), started as slots free, in lease order
        self.threads = threads
        self.lease_s = lease_s
        self.heartbeat_every_s = heartbeat_every_s or lease_s / 3
        self.grace_s = grace_s
        self.cancel_grace_s = grace_s if cancel_grace_s is None else cancel_grace_s
        self.timeout_grace_s = timeout_grace_s
        self.connect_timeout_s = connect_timeout_s
        self.report_flush_s = report_flush_s
        self.poll_wait_s = poll_wait_s
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.clock: Clock = clock or SystemClock()
        self.rng = random.Random()
        self.handlers: dict[str, Handler] = {}
        self.running: dict[str, Run] = {}
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._fatal: WorkerStopped | None = None
        self._connected = False
        self._pool: ThreadPoolExecutor | None = None
        self.reporter: Reporter | None = None
        self.logs: LogShipper  # set by serve_on (client/worker_logs.py)
        self.completed = 0
        self.failed = 0
        self._starts: deque[float] = deque()  # monotonic start times within PREFETCH_WINDOW_S (pace)
        self._intaking = False  # a lease call is out and the last answer was full (hold_completions)

    @property
    def prefetch(self) -> int:
        """Runs leased ahead of free slots. By default the worker's pace: one per slot, or twice
        the runs it started in the last PREFETCH_WINDOW_S if more, at most 1,000
        (worker_policy.default_prefetch); the lease loop reads it before each call."""
        if self._prefetch is not None:
            return self._prefetch
        return default_prefetch(self.concurrency, self._recent_starts())

    def _recent_starts(self) -> int:
        """Runs started within the last PREFETCH_WINDOW_S (older start times are dropped)."""
        cutoff = self.clock.monotonic() - PREFETCH_WINDOW_S
        while self._starts and self._starts[0] < cutoff:
            self._starts.popleft()
        return len(self._starts)

    @prefetch.setter
    def prefetch(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"prefetch must be >= 0, got {value}")
        self._prefetch = value

    @property
    def token(self) -> str | None:
        for k, v in self.metadata:
            if k == "authorization" and v.startswith("Bearer "):
                return v[len("Bearer "):]
        return None

    @token.setter
    def token(self, value: str | None) -> None:
        self.metadata = (("authorization", f"Bearer {value}"),) if value else ()

    def _connection(self) -> Connection:
        return Connection(self.address, tls=self.tls, ca_file=self.ca_file, cert_file=self.cert_file,
                          key_file=self.key_file, interceptors=self.interceptors)

    def job(self, job_type: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            self.handlers[job_type] = fn
            return fn

        return register

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def _stop_fatal(self, err: WorkerStopped) -> None:
        if self._fatal is None:
            self._fatal = err
        self.stop()

    def _side_task_ended(self, task: asyncio.Task[None]) -> None:
        """A side task (reports, heartbeats) that crashed stops the worker instead of leaving it
        leasing work it can no longer report on or keep."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._stop_fatal(WorkerStopped(self.worker_id, "INTERNAL", f"{task.get_name()} crashed: {exc!r}"))

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT; on an error no retry can fix, print one line and exit non-zero.
        The process is the worker's: its startup heap is frozen before the first lease call
        (`serve(freeze_heap=True)`)."""
        try:
            asyncio.run(self.serve(install_signals=True, freeze_heap=True))
        except WorkerStopped as exc:
            print(f"cronwheel: error: {exc.message}", file=sys.stderr, flush=True)
            raise SystemExit(exc.exit_code) from None

    async def serve(self, install_signals: bool = False, freeze_heap: bool = False) -> None:
        """Lease and run until stop(); raises WorkerStopped on an error no retry can fix.

        `freeze_heap`: once set up, collect and freeze what is alive (cronwheel.heap): full
        collections then walk only what was made since. `run()` sets it, as the process is the
        worker's; a program that embeds the worker in its own loop decides for its process."""
        conn = self._connection().validate()
        if install_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        async with conn.channel() as ch:
            await self.serve_on(dispatch_pb2_grpc.DispatchServiceStub(ch), freeze_heap)

    async def serve_on(self, stub: Any, freeze_heap: bool = False) -> None:
        """serve() over a DispatchService stub the caller made (its own channel, or a fake in
        tests); what serve() does after connecting."""
        if not self.handlers:
            raise ValueError("no handlers registered (use @worker.job(type))")
        tracing.setup_tracing("cronwheel-worker")  # an exporter only if OTEL_* / CRONWHEEL_TRACE_FILE ask
        self.stub = stub
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"cronwheel-{self.worker_id}")
        self.reporter = Reporter(stub, self.worker_id, self.metadata, self.clock, self._stop_fatal,
                                 intaking=lambda: self._intaking)
        self.logs = LogShipper(stub, self.worker_id, self.metadata, self.clock, self._stop_fatal)
        reports = asyncio.create_task(self.reporter.run(), name="worker-reports")
        hb = asyncio.create_task(self._heartbeats(), name="worker-heartbeats")
        ship = asyncio.create_task(self.logs.run(), name="worker-logs")
        for side in (reports, hb, ship):
            side.add_done_callback(self._side_task_ended)
        install_capture()
        if freeze_heap:
            freeze_startup_heap()
        try:
            await self._lease_loop()
        finally:
            await self._shutdown()
            hb.cancel()
            flush_s = self.report_flush_s if self._fatal is None else 1.0
            await self.logs.flush(min(flush_s, self.logs.close_wait_s))  # then the reports they held
            await self.reporter.flush(flush_s)
            ship.cancel()
            reports.cancel()
            uninstall_capture()
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._fatal is not None:
            raise self._fatal

    # ------------------------------------------------------------------ leasing

    async def _lease_loop(self) -> None:
        calls: dict[asyncio.Task[tuple[float, float, Any]], int] = {}
        reserved = 0
        drained = True  # the node had no more for the last answered call (lease_size)
        retry_at = 0.0
        failures = 0
        started = self.clock.monotonic()
        try:
            while not self._stopping.is_set():
                self._start_pending()
                prefetch = self.prefetch  # by default the pace: read once per pass
                capacity = self.concurrency + prefetch  # slots plus the runs leased ahead of them
                max_calls = max_lease_calls(capacity)
                now = self.clock.monotonic()
                while now >= retry_at:
                    n = lease_size(capacity, len(self.running) + len(self.pending), reserved, len(calls), max_calls,
                                   prefetch, drained)
                    if n == 0:
                        break
                    task = asyncio.create_task(self._lease(n), name="worker-lease")
                    task.add_done_callback(lambda _t: self._wake.set())
                    calls[task] = n
                    reserved += n
                self._set_intaking(bool(calls) and not drained)
                await self.clock.wait(self._wake, retry_at - now if retry_at > now else 3600.0)
                self._wake.clear()
                for task in [t for t in calls if t.done()]:
                    asked = calls.pop(task)
                    reserved -= asked
                    try:
                        t0, t1, resp = task.result()
                    except grpc.aio.AioRpcError as exc:
                        if classify(exc.code()) in (CodeClass.RETRY, CodeClass.STALE):
                            failures += 1
                            retry_at = self.clock.monotonic() + backoff_s(failures, self.rng.random(), 0.1, 5.0)
                            self._lease_failed(exc, started)
                        else:
                            self._stop_fatal(permanent(self.worker_id, exc, "LeaseExecutions"))
                        continue
                    failures = 0
                    self._connected = True
                    drained = len(resp.executions) < asked
                    # The node held the call `held` before it leased these: their leases count
                    # from then (a long poll's runs keep their whole lease; a late read does not).
                    leased_at = t0 + resp.held.ToTimedelta().total_seconds() if resp.HasField("held") else t0
                    self.pending.extend(Pending(ex, min(leased_at, t1), t1) for ex in resp.executions)
                    self._start_pending()
        finally:
            self._set_intaking(False)
            for task in calls:
                task.cancel()

    def _set_intaking(self, value: bool) -> None:
        if self._intaking and not value and self.reporter is not None:
            self.reporter.wake()  # the herd is in: what its completions waited for is over
        self._intaking = value

    def _lease_failed(self, exc: grpc.aio.AioRpcError, started: float) -> None:
        detail = f"{exc.code().name}: {exc.details() or ''}"
        if self._connected:
            log.warning("lease failed", extra={"event": "lease_failed", "worker": self.worker_id,
                                               "code": exc.code().name, "detail": exc.details()})
            return
        waited = self.clock.monotonic() - started
        if waited >= self.connect_timeout_s:
            self._stop_fatal(unreachable(self.worker_id, self.address, waited, detail))
        else:  # start-up: the node may still be coming up; one line at the end if it never does
            log.debug("waiting for a node", extra={"event": "node_wait", "worker": self.worker_id, "detail": detail})

    async def _lease(self, n: int) -> tuple[float, float, Any]:
        t0 = self.clock.monotonic()  # the lease counts from before the node's clock did: conservative
        resp = await self.stub.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
            worker_id=self.worker_id, job_types=sorted(self.handlers), max_count=n,
            lease_duration=_dur(self.lease_s), wait_timeout=_dur(self.poll_wait_s),
            queues=self.queues, capabilities=self.capabilities,
            queue_slots=[dispatch_pb2.QueueSlots(queue=q, slots=n) for q, n in sorted(self.queue_slots.items())],
        ), timeout=self.poll_wait_s + 5, metadata=self.metadata)
        return t0, self.clock.monotonic(), resp

    def _start_pending(self) -> None:
        """Start leased runs, oldest first, while slots are free. A run whose lease may have
        lapsed already (its answer was read, or its slot freed, more than lease_s after the call
        or its last heartbeat: a paused worker, a congested link) is not started: the node may
        have requeued it, and running it would be a zombie beside its next attempt."""
        while self.pending and len(self.running) < self.concurrency:
            p = self.pending.pop(0)
            if self.clock.monotonic() >= p.t0 + self.lease_s:
                log.warning("leased run not started: its lease may have lapsed", extra={
                    "event": "lease_lapsed_before_start", "worker": self.worker_id,
                    "execution_id": p.ex.execution_id, "late_s": round(self.clock.monotonic() - p.t0, 3)})
                continue
            self._start(p.ex, p.t0, p.t1)

    def _start(self, ex: dispatch_pb2.LeasedExecution, t0: float, t1: float) -> None:
        """Run a leased execution. The lease counts from `t0` (the call was sent: the node's
        lease began later, so this is conservative); the timeout from `t1` (the answer arrived,
        after the node's started_at: a long poll may have waited long before the claim)."""
        ctx = JobContext(
            execution_id=ex.execution_id, schedule_id=ex.schedule_id or None, type=ex.type, tenant=ex.tenant,
            payload=json.loads(ex.payload_json) if ex.payload_json else None,
            scheduled_for=instant(ex.scheduled_for), attempt=ex.attempt,
            max_attempts=ex.max_attempts, fencing_token=ex.fencing_token,
            checkpoint_value=json.loads(ex.checkpoint_json) if ex.checkpoint_json else None,
            deadline=instant(ex.deadline) if ex.HasField("deadline") else None,
            trace=ex.trace_context or None, _worker=self,
            started_at=instant(ex.started_at) if ex.HasField("started_at") else None,
            target=ex.target_json or None,
            _log=self.logs.attempt(ex.execution_id, ex.fencing_token),
        )
        timeout_s: float | None = None
        if ex.HasField("timeout"):
            timeout_s = ex.timeout.ToTimedelta().total_seconds()
        elif ex.HasField("deadline"):
            timeout_s = max(instant(ex.deadline).timestamp() - self.clock.now_ts(), 0.0)
        deadline = None if timeout_s is None else t1 + timeout_s
        warn_at = None if deadline is None or timeout_s is None else deadline - min(self.timeout_grace_s,
                                                                                    timeout_s / 4)
        run = Run(ctx, lease_until=t0 + self.lease_s, deadline=deadline, warn_at=warn_at, timeout_s=timeout_s)
        if ctx.trace is not None:
            run.span = tracing.start("run", parent=ctx.trace, attributes={
                "cronwheel.execution_id": ctx.execution_id, "cronwheel.type": ctx.type,
                "cronwheel.attempt": ctx.attempt, "cronwheel.worker_id": self.worker_id})
            with tracing.use(run.span):  # the handler's task copies the context: its spans join the run
                run.task = asyncio.create_task(self._call(ctx), name=f"handler-{ctx.execution_id}")
        else:
            run.task = asyncio.create_task(self._call(ctx), name=f"handler-{ctx.execution_id}")
        run.task.add_done_callback(lambda _t: self._finish(run))
        self.running[ex.execution_id] = run
        if self._prefetch is None:  # the pace is kept only for the default prefetch
            self._starts.append(self.clock.monotonic())
            self._recent_starts()  # bounded by the window whoever reads the prefetch
        if warn_at is not None:
            self._watch(run)

    # ------------------------------------------------------------------ running a handler

    def _tell(self, run: Run, reason: StopReason, grace_s: float) -> None:
        """Tell the handler to stop (ctx.cancelled); cancel its task after `grace_s`."""
        new = stronger(run.reason, reason)
        if new is run.reason:
            return
        run.reason = new
        run.ctx.stop_reason = new.value
        run.ctx.cancelled.set()
        kill = self.clock.monotonic() + grace_s
        run.kill_at = kill if run.kill_at is None else min(run.kill_at, kill)
        run.changed.set()
        self._watch(run)

    async def _call(self, ctx: JobContext) -> Any:
        current_log.set(ctx._log)  # the handler's task (and its thread's copied context): its records
        handler = self.handlers[ctx.type]
        if inspect.iscoroutinefunction(handler):
            return await handler(ctx)
        assert self._pool is not None
        result = await asyncio.get_running_loop().run_in_executor(
            self._pool, contextvars.copy_context().run, handler, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _finish(self, run: Run) -> None:
        """Report the run once and free its slot: when its handler's task is done (returned,
        raised or cancelled: its done callback), or when it did not stop once cancelled (its
        watchdog). A later end of a stuck handler changes nothing."""
        if run.finished:
            return
        run.finished = True
        run.changed.set()  # a watchdog, if any, has nothing left to watch
        assert run.task is not None
        self._report(run, run.task)
        if self.running.get(run.ctx.execution_id) is run:  # not a later lease of the same execution
            del self.running[run.ctx.execution_id]
        self._wake.set()  # a slot is free: the lease loop may ask for more

    def _watch(self, run: Run) -> None:
        """Give the run a watchdog once it has something timed to watch (a timeout, or a stop it
        was told with a grace). Most runs never have one: they are one task, the handler's."""
        if run.watch is None and run.task is not None and not run.task.done():
            run.watch = asyncio.create_task(self._watchdog(run), name=f"watch-{run.ctx.execution_id}")

    async def _watchdog(self, run: Run) -> None:
        """Tell the handler to stop at its timeout's warning, cancel it at its kill time, and if it
        does not stop within timeout_grace_s of that, report it stuck and free its slot."""
        call = run.task
        assert call is not None
        while not call.done():
            now = self.clock.monotonic()
            if run.warn_at is not None and run.deadline is not None and now >= run.warn_at:
                run.warn_at = None
                self._tell(run, StopReason.TIMEOUT, run.deadline - now)
            if run.kill_at is not None and now >= run.kill_at:
                run.changed.clear()
                call.cancel()
                await self.clock.wait(run.changed, self.timeout_grace_s)
                self._finish(run)  # a no-op if the handler stopped: its end reported it
                return
            wakes = [t for t in (run.warn_at, run.kill_at) if t is not None]
            if wakes:
                await self.clock.wait(run.changed, min(wakes) - now)
            else:
                await run.changed.wait()
            run.changed.clear()

    def _report(self, run: Run, call: asyncio.Task[Any]) -> None:
        returned, result_json, error, error_type, retryable = False, "", "", "", True
        retry_after_s: float | None = None
        if not call.done():
            error, error_type = "the handler did not stop when cancelled", "stuck"
        elif call.cancelled():
            error, error_type = f"stopped by the worker ({run.reason or 'cancelled'})", "cancelled"
        else:
            exc = call.exception()
            if isinstance(exc, Stale):
                self._tell(run, StopReason.STALE, 0.0)
            elif isinstance(exc, JobFailed):
                error, error_type, retryable, retry_after_s = str(exc), "failed", exc.retryable, exc.retry_after_s
            elif exc is not None:
                error = "".join(traceback.format_exception(exc))[-16000:]
                error_type, retryable = type(exc).__name__, not isinstance(exc, NonRetryable)
            else:
                try:
                    result = call.result()
                    result_json = json.dumps(result) if result is not None else ""
                    returned = True
                except (TypeError, ValueError) as jexc:
                    error, error_type, retryable = f"the result is not JSON: {jexc}", "invalid_result", False
        v = verdict(reason=run.reason, returned=returned, result_json=result_json, error=error,
                    error_type=error_type, retryable=retryable, timeout_s=run.timeout_s, retry_after_s=retry_after_s)
        trace_context = tracing.finish_run(run.span, v.kind, error_type) if run.span is not None else ""
        attempt_log = run.ctx._log
        if v.kind == "drop":
            if attempt_log is not None:
                attempt_log.discard()
            return
        if v.kind == "complete":
            self.completed += 1
        else:
            self.failed += 1
        assert self.reporter is not None
        # Given up only once the lease has lapsed a full lease ago: the reaper has requeued it.
        report = Report(run.ctx.execution_id, run.ctx.fencing_token, v,
                        give_up_at=run.lease_until + self.lease_s, trace_context=trace_context)
        if attempt_log is None:
            self.reporter.submit(report)
        else:  # its last lines first (at once if it wrote none): a reader that sees the run final has all
            self.logs.close(attempt_log, lambda: self.reporter.submit(report))

    # ------------------------------------------------------------------ heartbeats, checkpoints

    async def _checkpoint(self, ctx: JobContext, value: Any) -> None:
        try:
            r = await self.stub.Checkpoint(dispatch_pb2.CheckpointRequest(
                execution_id=ctx.execution_id, fencing_token=ctx.fencing_token, worker_id=self.worker_id,
                checkpoint_json=json.dumps(value)), timeout=10, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            if classify(exc.code()) is CodeClass.STALE:
                # Only this attempt: a later lease of the same execution on this worker (this one's
                # lease lapsed, the node requeued it to us) is under the same id and is not stale.
                if (run := self.running.get(ctx.execution_id)) is not None and run.ctx is ctx:
                    self._tell(run, StopReason.STALE, self.timeout_grace_s)  # its result is dropped
                ctx.cancelled.set()
                ctx.stop_reason = StopReason.STALE.value
                raise Stale(exc.details()) from None
            raise
        if r.cancel_requested and (run := self.running.get(ctx.execution_id)) is not None:
            self._tell(run, StopReason.CANCEL, self.cancel_grace_s)

    async def _heartbeats(self) -> None:
        limit = asyncio.Semaphore(32)  # many runs: concurrent heartbeats, never one RPC at a time
        while True:
            await self.clock.sleep(self.heartbeat_every_s)
            runs = list(self.running.values())
            waiting = list(self.pending)
            if runs or waiting:
                await asyncio.gather(*(self._heartbeat(r, limit) for r in runs),
                                     *(self._heartbeat_pending(p, limit) for p in waiting))

    async def _heartbeat(self, run: Run, limit: asyncio.Semaphore) -> None:
        async with limit:
            if run.task is None or run.task.done():
                return
            t0 = self.clock.monotonic()
            try:
                r = await self.stub.Heartbeat(dispatch_pb2.HeartbeatRequest(
                    execution_id=run.ctx.execution_id, fencing_token=run.ctx.fencing_token,
                    worker_id=self.worker_id, lease_extension=_dur(self.lease_s)),
                    timeout=max(1.0, min(5.0, self.heartbeat_every_s)), metadata=self.metadata)
            except grpc.aio.AioRpcError as exc:
                kind = classify(exc.code())
                if kind is CodeClass.STALE:  # someone else owns this run now: stop the handler
                    self._tell(run, StopReason.STALE, 0.0)
                elif kind is CodeClass.FATAL:
                    self._stop_fatal(permanent(self.worker_id, exc, "Heartbeat"))
                else:
                    log.warning("heartbeat failed", extra={"event": "heartbeat_failed", "worker": self.worker_id,
                                                           "execution_id": run.ctx.execution_id,
                                                           "code": exc.code().name})
                return
            run.lease_until = t0 + self.lease_s
            if r.cancel_requested:
                self._tell(run, StopReason.CANCEL, self.cancel_grace_s)

    async def _heartbeat_pending(self, p: Pending, limit: asyncio.Semaphore) -> None:
        """Keep a run leased ahead ours until a slot takes it (its lease then counts from here)."""
        async with limit:
            if p not in self.pending:
                return
            t0 = self.clock.monotonic()
            try:
                await self.stub.Heartbeat(dispatch_pb2.HeartbeatRequest(
                    execution_id=p.ex.execution_id, fencing_token=p.ex.fencing_token,
                    worker_id=self.worker_id, lease_extension=_dur(self.lease_s)),
                    timeout=max(1.0, min(5.0, self.heartbeat_every_s)), metadata=self.metadata)
            except grpc.aio.AioRpcError as exc:
                kind = classify(exc.code())
                if kind is CodeClass.STALE and p in self.pending:  # someone else's now: never start it
                    self.pending.remove(p)
                elif kind is CodeClass.FATAL:
                    self._stop_fatal(permanent(self.worker_id, exc, "Heartbeat"))
                return
            p.t0 = t0  # a cancel asked meanwhile is seen by the run's first heartbeat once started

    async def _shutdown(self) -> None:
        # Runs leased ahead never started: hand them back at once, as for runs told to stop.
        waiting, self.pending = self.pending, []
        for p in waiting:
            assert self.reporter is not None
            self.failed += 1
            self.reporter.submit(Report(p.ex.execution_id, p.ex.fencing_token,
                                        Verdict("fail", error="worker shutting down", retryable=True,
                                                error_type="worker_shutdown"),
                                        give_up_at=p.t0 + 2 * self.lease_s))
        runs = list(self.running.values())
        for run in runs:
            self._tell(run, StopReason.SHUTDOWN, self.grace_s)
        watches = [r.watch for r in runs if r.watch is not None]  # each told run has one (_tell)
        if watches:
            await asyncio.wait(watches)
        for run in runs:  # a handler that ended as told: reported now, not left to its done callback
            if run.task is not None and run.task.done():
                self._finish(run)
