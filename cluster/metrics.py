"""Prometheus metrics of a node, served on its own HTTP port (`--metrics-listen`).

Each node has its own registry (so tests can run several nodes in one process). Counters and
histograms are fed by the components as things happen; gauges that need the database (queue
depth, executions by state, stuck runs, raised dead man's switches) are refreshed every
`refresh_s` by one task.

    cronwheel_fire_lag_seconds            histogram  commit of the fire batch - run_at
    cronwheel_start_lag_seconds           histogram  lease (start) - run_at
    cronwheel_fired_total                 counter    executions fired
    cronwheel_stale_epoch_total           counter    fenced writes the database refused
    cronwheel_queue_depth{priority}       gauge      queued executions
    cronwheel_queue_ready{queue,priority} gauge      runs a worker could take now (queued, run_at
                                                     come): the scaling signals (issue 53,
                                                     docs/operating.md "Scaling workers"); queue
                                                     bounded by MAX_QUEUE_LABELS, priority is 3
    cronwheel_queue_oldest_ready_age_seconds{queue,priority}
                                          gauge      now - run_at of the oldest ready run (0: none)
    cronwheel_queue_running{queue,priority}
                                          gauge      runs running
    cronwheel_executions{state}           gauge      live executions by state (queued, running,
                                                     scheduled, retry_scheduled)
    cronwheel_failures_total{type}        counter    failed attempts by error type (a worker's word:
                                                     `other` unless an identifier of at most 64
                                                     characters, and past the first 50 distinct;
                                                     never free text on the public endpoint)
    cronwheel_retries_total               counter    attempts scheduled for retry
    cronwheel_dead_letters_total          counter    executions that ran out of attempts
    cronwheel_reap_failures_total         counter    reaped rows (or whole rounds) that failed to
                                                     process (logged as reap_row_failed /
                                                     reap_failed; retried next round)
    cronwheel_stuck_executions            gauge      running past their lease + grace
    cronwheel_success_alerts              gauge      schedules whose dead man's switch is raised
    cronwheel_partitions_owned            gauge      partitions this node acts for
    cronwheel_partition_epoch{partition}  gauge      epoch of each owned partition
    cronwheel_wheel_size                  gauge      timers in this node's wheel
    cronwheel_lease_trust_seconds         gauge      seconds of lease trust left
    cronwheel_clock_skew_seconds          gauge      this node's wall clock minus PostgreSQL's, last
                                                     conclusive sample (clock_skew.py)
    cronwheel_clock_skew_exceeded         gauge      1 while the node stands down for clock skew
    cronwheel_executions_entered_total{state,job_type}
                                          counter    executions this node moved into `state`
                                                     (counted where the transition is decided:
                                                     fire batch, claim, worker report, reaper);
                                                     job_type bounded by `JobTypeLabels`
    cronwheel_grpc_server_handled_total{service,method,code}
                                          counter    RPCs finished, by status code
    cronwheel_grpc_server_handling_seconds{service,method}
                                          histogram  RPC duration (a stream: until its end)
    process_*                             (prometheus_client ProcessCollector) CPU, memory, fds
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import re
from collections import Counter as Tally
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server

from cronwheel.clock import Clock
from cronwheel.cluster.api.handlers import responses, rewrap, wrapped_once
from cronwheel.cluster.dispatch.policy import PRIORITIES
from cronwheel.errors import Unavailable
from cronwheel.storage import PgStore
from cronwheel.storage.dispatch import DispatchPort
from cronwheel.storage.logs import LogsPort, ScalingSignal

log = logging.getLogger("cronwheel.cluster.metrics")

# A run still `running` this long past its lease counts as stuck (the reaper should have taken it).
STUCK_GRACE_S = 30.0
# At most this many distinct job types get their own `job_type` label value on a node; later ones
# are counted as OTHER_JOB_TYPE (a series per label pair lives for the process's lifetime).
MAX_JOB_TYPE_LABELS = 50
OTHER_JOB_TYPE = "other"
# The scaling signals' labels (scaling.sql groups by the same pair): at most MAX_QUEUE_LABELS queues
# get their own `queue` value per node, later ones are summed into OTHER_JOB_TYPE.
SCALING_LABELS = ("queue", "priority")
MAX_QUEUE_LABELS = 50
DEFAULT_QUEUE = "default"
# A worker chooses its error_type (up to 200 characters of anything): only identifier-like words
# (an exception's class name) become a label value, so no message or payload reaches /metrics.
_ERROR_TYPE_LABEL = re.compile(r"[A-Za-z_][\w.:-]{0,63}")
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def observe_many(hist: Histogram, values: Iterable[float]) -> None:
    """Histogram.observe for each value, with one counter update per bucket instead of per value
    (a 5,000-tick fire batch spent more time in observe() than in building its statement).
    Uses prometheus_client's histogram internals; falls back to observe() if they change."""
    bounds = getattr(hist, "_upper_bounds", None)
    buckets = getattr(hist, "_buckets", None)
    total = getattr(hist, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for v in values:
            hist.observe(v)
        return
    tally: Tally[int] = Tally()
    acc = 0.0
    for v in values:
        tally[bisect.bisect_left(bounds, v)] += 1  # first bucket whose bound is >= v, as observe()
        acc += v
    if tally:
        total.inc(acc)
        for i, n in tally.items():
            buckets[i].inc(n)


class JobTypeLabels:
    """The one cap on `job_type` label cardinality: the first `cap` distinct job types seen keep
    their name, every later one is `other`. Event-loop only (not thread-safe)."""

    def __init__(self, cap: int = MAX_JOB_TYPE_LABELS) -> None:
        self.cap = cap
        self.seen: set[str] = set()

    def __call__(self, job_type: str) -> str:
        if job_type in self.seen:
            return job_type
        if len(self.seen) < self.cap:
            self.seen.add(job_type)
            return job_type
        return OTHER_JOB_TYPE


def scaling_values(signals: Iterable[ScalingSignal], now: datetime, queue_label: Callable[[str], str],
                   shown: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, float, int]]:
    """The scaling gauges' values per (queue, priority) label pair: ready, age of the oldest ready
    run in seconds, running. Queues past the label cap are summed into one pair (their oldest
    run the oldest of all); every pair in `shown` (shown before, or always shown) is there, 0
    when nothing is left, so a scaler sees its series fall to 0 instead of vanish."""
    out: dict[tuple[str, str], tuple[int, float, int]] = dict.fromkeys(shown, (0, 0.0, 0))
    for sig in signals:
        key = (queue_label(sig.queue), sig.priority)
        ready, age, running = out.get(key, (0, 0.0, 0))
        oldest = max(0.0, (now - sig.oldest_ready_at).total_seconds()) if sig.oldest_ready_at is not None else 0.0
        out[key] = (ready + sig.ready, max(age, oldest), running + sig.running)
    return out


class Metrics:
    def __init__(self, *, job_type_cap: int = MAX_JOB_TYPE_LABELS) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)
        self.job_type_label = JobTypeLabels(job_type_cap)
        self.error_type_label = JobTypeLabels(job_type_cap)  # the same cap on `type` of cronwheel_failures
        self.entered = Counter("cronwheel_executions_entered", "Executions this node moved into a state",
                               ["state", "job_type"], registry=r)
        self.rpc_handled = Counter("cronwheel_grpc_server_handled", "RPCs finished, by status code",
                                   ["service", "method", "code"], registry=r)
        self.rpc_seconds = Histogram("cronwheel_grpc_server_handling_seconds", "RPC duration",
                                     ["service", "method"], buckets=RPC_BUCKETS, registry=r)
        self.fire_lag = Histogram("cronwheel_fire_lag_seconds", "Fire batch commit minus run_at",
                                  buckets=LAG_BUCKETS, registry=r)
        self.start_lag = Histogram("cronwheel_start_lag_seconds", "Lease minus run_at", buckets=LAG_BUCKETS,
                                   registry=r)
        self.fired = Counter("cronwheel_fired", "Executions fired", registry=r)
        self.stale_epoch = Counter("cronwheel_stale_epoch", "Fenced writes refused (stale epoch)", registry=r)
        self.queue_depth = Gauge("cronwheel_queue_depth", "Queued executions", ["priority"], registry=r)
        self.by_state = Gauge("cronwheel_executions", "Live executions by state", ["state"], registry=r)
        self.queue_label = JobTypeLabels(MAX_QUEUE_LABELS)
        self.queue_ready = Gauge("cronwheel_queue_ready", "Runs a worker could take now (queued, run_at come)",
                                 SCALING_LABELS, registry=r)
        self.queue_oldest_age = Gauge("cronwheel_queue_oldest_ready_age_seconds",
                                      "Now minus the run_at of the oldest ready run (0: none)", SCALING_LABELS,
                                      registry=r)
        self.queue_running = Gauge("cronwheel_queue_running", "Runs running", SCALING_LABELS, registry=r)
        self._scaling_shown: set[tuple[str, str]] = {(DEFAULT_QUEUE, p) for p in PRIORITIES}
        self.failures = Counter("cronwheel_failures", "Failed attempts by error type", ["type"], registry=r)
        self.retries = Counter("cronwheel_retries", "Attempts scheduled for retry", registry=r)
        self.dead_letters = Counter("cronwheel_dead_letters", "Executions out of attempts", registry=r)
        self.reap_failures = Counter("cronwheel_reap_failures", "Reaped rows (or rounds) that failed; retried",
                                     registry=r)
        self.overrun_sessions_ended = Counter(
            "cronwheel_overrun_sessions_ended",
            "Database sessions this node ended: a transaction past the lease TTL (PostgreSQL < 17)", registry=r)
        self.overrun_sessions_unpoliced = Gauge(
            "cronwheel_overrun_sessions_unpoliced",
            "Other node sessions this node's overrun sweep cannot end: their transaction start hidden from its "
            "role, or not its to signal (PostgreSQL < 17)",
            registry=r,
        )
        self.stuck = Gauge("cronwheel_stuck_executions", "Running past lease + grace", registry=r)
        self.success_alerts = Gauge("cronwheel_success_alerts", "Schedules whose dead man's switch is raised",
                                    registry=r)
        self.partitions_owned = Gauge("cronwheel_partitions_owned", "Partitions this node acts for", registry=r)
        self.epoch = Gauge("cronwheel_partition_epoch", "Epoch of each owned partition", ["partition"], registry=r)
        self.wheel_size = Gauge("cronwheel_wheel_size", "Timers in the wheel", registry=r)
        self.lease_trust = Gauge("cronwheel_lease_trust_seconds", "Seconds of lease trust left", registry=r)
        self.clock_skew = Gauge("cronwheel_clock_skew_seconds", "This node's wall clock minus PostgreSQL's",
                                registry=r)
        self.clock_skew_exceeded = Gauge("cronwheel_clock_skew_exceeded",
                                         "1 while the node holds no partitions and claims nothing: clock skew "
                                         "beyond --max-clock-skew", registry=r)
        self.port = 0

    def serve(self, listen: str) -> int:
        host, _, port = listen.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        self.port = int(server.server_port)
        self._server = server
        return self.port

    def close(self) -> None:
        srv = getattr(self, "_server", None)
        if srv is not None:
            srv.shutdown()
            srv.server_close()

    def execution_entered(self, state: str, job_type: str, n: int = 1) -> None:
        """`n` executions of `job_type` entered `state`, as decided on this node."""
        if n:
            self.entered.labels(state, self.job_type_label(job_type)).inc(n)

    def executions_entered(self, pairs: Iterable[tuple[str, str]],
                           counted: Iterable[tuple[str, str, int]] = ()) -> None:
        """execution_entered for many (state, job_type) pairs, one counter update per pair kind,
        and for (state, job_type, n) already counted (the fire statement's plain ticks)."""
        for (state, job_type), n in Tally(pairs).items():
            self.execution_entered(state, job_type, n)
        for state, job_type, n in counted:
            self.execution_entered(state, job_type, n)

    def record_outcome(self, state: str, error_type: str, job_type: str = "") -> None:
        """The outcome of one attempt (a worker's report, or the reaper's verdict on a lapsed lease
        or a timeout): the state it entered, and failures/retries/dead letters."""
        self.record_outcomes(state, error_type, (job_type,))

    def record_outcomes(self, state: str, error_type: str, job_types: Iterable[str]) -> None:
        """`record_outcome` for attempts that ended alike (a completion batch), one counter
        update per job type (a label lookup per run cost a 250-run batch ~1 ms of the node)."""
        n = 0
        for job_type, k in Tally(job_types).items():
            self.execution_entered(state, job_type, k)
            n += k
        if state in ("retry_scheduled", "failed", "dead"):
            word = error_type or "error"
            self.failures.labels(self.error_type_label(word if _ERROR_TYPE_LABEL.fullmatch(word)
                                                       else OTHER_JOB_TYPE)).inc(n)
        if state == "retry_scheduled":
            self.retries.inc(n)
        if state == "dead":
            self.dead_letters.inc(n)

    async def refresh_loop(self, store: PgStore, owned: Callable[[], dict[int, int]], wheel_size: Callable[[], int],
                           trust_left: Callable[[], float], *, clock: Clock, refresh_s: float = 5.0) -> None:
        seen: set[int] = set()
        await clock.sleep(min(1.0, refresh_s))  # let the node acquire its partitions first
        while True:
            epochs = owned()
            self.partitions_owned.set(len(epochs))
            for p in seen - set(epochs):
                self.epoch.remove(str(p))
            for p, e in epochs.items():
                self.epoch.labels(str(p)).set(e)
            seen = set(epochs)
            self.wheel_size.set(wheel_size())
            self.lease_trust.set(max(-1.0, trust_left()))
            try:
                await self.refresh_db(store.dispatch, clock.now(), store.logs)
            except Unavailable as exc:
                log.info("metrics refresh skipped", extra={"event": "metrics_skipped", "error": str(exc)})
            await clock.sleep(refresh_s)

    async def refresh_db(self, port: DispatchPort, now: datetime, scaling: LogsPort) -> None:
        """The gauges read from the database, as of `now` (node time). The ready runs per priority
        (cronwheel_queue_depth, and the live `queued` count) are the scaling signals' sums: one
        read of the queued runs per refresh, not one for each set of gauges."""
        signals = await scaling.scaling_signals(now)
        depth = dict.fromkeys(PRIORITIES, 0)
        for sig in signals:
            depth[sig.priority] = depth.get(sig.priority, 0) + sig.ready
        for p, n in depth.items():
            self.queue_depth.labels(p).set(n)
        for state, n in (await port.executions_by_state()).items():
            self.by_state.labels(state).set(n)
        self.by_state.labels("queued").set(sum(depth.values()))  # counted once, by scaling_signals
        self.stuck.set(await port.stuck_executions(STUCK_GRACE_S, now))
        values = scaling_values(signals, now, self.queue_label, self._scaling_shown)
        for key, (ready, age, running) in values.items():
            self.queue_ready.labels(*key).set(ready)
            self.queue_oldest_age.labels(*key).set(age)
            self.queue_running.labels(*key).set(running)
        self._scaling_shown.update(values)
        self.success_alerts.set(await port.overdue_success_alerts())

def _split(method: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method')."""
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every RPC of a registered method (outermost interceptor: it sees the
    codes the auth interceptor answers too). Unknown methods are not counted (bounded labels)."""

    def __init__(self, metrics: Metrics, clock: Clock) -> None:
        self.metrics = metrics
        self.clock = clock
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def _recorder(self, method: str) -> Callable[[float, grpc.StatusCode], None]:
        """What ends one call of `method`: its count by code and its duration, into children
        looked up once per method and code (`labels()` takes a lock and hashes its labels)."""
        service, name = _split(method)
        seconds = self.metrics.rpc_seconds.labels(service, name)
        handled: dict[grpc.StatusCode, Any] = {}

        def done(started: float, code: grpc.StatusCode) -> None:
            counter = handled.get(code)
            if counter is None:
                counter = handled[code] = self.metrics.rpc_handled.labels(service, name, code.name)
            counter.inc()
            seconds.observe(self.clock.monotonic() - started)

        return done

    @staticmethod
    def _code(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None) -> grpc.StatusCode:
        """The status the call ends with: the one set by abort()/set_code(), else OK when the
        handler returned, CANCELLED when its task was cancelled, UNKNOWN for an escaped error."""
        code = context.code()
        if isinstance(code, grpc.StatusCode):
            return code
        if isinstance(code, int):  # grpc.aio keeps the raw integer of abort()'s code
            return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
        if exc is None:
            return grpc.StatusCode.OK
        return grpc.StatusCode.CANCELLED if isinstance(exc, asyncio.CancelledError) else grpc.StatusCode.UNKNOWN

    def _unary(self, inner: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Awaitable[Any]]:
        done = self._recorder(method)

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started, exc = self.clock.monotonic(), None
            try:
                return await inner(request, context)
            except BaseException as e:
                exc = e
                raise
            finally:
                done(started, self._code(context, exc))

        return behavior

    def _streaming(self, inner: Callable[..., Any], method: str) -> Callable[..., AsyncIterator[Any]]:
        done = self._recorder(method)

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            started, exc = self.clock.monotonic(), None
            try:
                async for item in responses(inner(request, context)):
                    yield item
            except BaseException as e:
                exc = e
                raise
            finally:
                done(started, self._code(context, exc))

        return behavior

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        return await wrapped_once(self._handlers, continuation, details,
                                  lambda handler, method: rewrap(handler, method, self._unary, self._streaming))
