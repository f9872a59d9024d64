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
    cronwheel_executions{state}           gauge      live executions by state (queued, running,
                                                     scheduled, retry_scheduled)
    cronwheel_failures_total{type}        counter    failed attempts by error type
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
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from cronwheel.clock import Clock
from cronwheel.cluster.dispatch.policy import PRIORITIES
from cronwheel.errors import Unavailable
from cronwheel.storage import PgStore
from cronwheel.storage.dispatch import DispatchPort

log = logging.getLogger("cronwheel.cluster.metrics")

# A run still `running` this long past its lease counts as stuck (the reaper should have taken it).
STUCK_GRACE_S = 30.0
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


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.fire_lag = Histogram("cronwheel_fire_lag_seconds", "Fire batch commit minus run_at",
                                  buckets=LAG_BUCKETS, registry=r)
        self.start_lag = Histogram("cronwheel_start_lag_seconds", "Lease minus run_at", buckets=LAG_BUCKETS,
                                   registry=r)
        self.fired = Counter("cronwheel_fired", "Executions fired", registry=r)
        self.stale_epoch = Counter("cronwheel_stale_epoch", "Fenced writes refused (stale epoch)", registry=r)
        self.queue_depth = Gauge("cronwheel_queue_depth", "Queued executions", ["priority"], registry=r)
        self.by_state = Gauge("cronwheel_executions", "Live executions by state", ["state"], registry=r)
        self.failures = Counter("cronwheel_failures", "Failed attempts by error type", ["type"], registry=r)
        self.retries = Counter("cronwheel_retries", "Attempts scheduled for retry", registry=r)
        self.dead_letters = Counter("cronwheel_dead_letters", "Executions out of attempts", registry=r)
        self.reap_failures = Counter("cronwheel_reap_failures", "Reaped rows (or rounds) that failed; retried",
                                     registry=r)
        self.stuck = Gauge("cronwheel_stuck_executions", "Running past lease + grace", registry=r)
        self.success_alerts = Gauge("cronwheel_success_alerts", "Schedules whose dead man's switch is raised",
                                    registry=r)
        self.partitions_owned = Gauge("cronwheel_partitions_owned", "Partitions this node acts for", registry=r)
        self.epoch = Gauge("cronwheel_partition_epoch", "Epoch of each owned partition", ["partition"], registry=r)
        self.wheel_size = Gauge("cronwheel_wheel_size", "Timers in the wheel", registry=r)
        self.lease_trust = Gauge("cronwheel_lease_trust_seconds", "Seconds of lease trust left", registry=r)
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

    def record_outcome(self, state: str, error_type: str) -> None:
        if state in ("retry_scheduled", "failed", "dead"):
            self.failures.labels(error_type or "error").inc()
        if state == "retry_scheduled":
            self.retries.inc()
        if state == "dead":
            self.dead_letters.inc()

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
                await self.refresh_db(store.dispatch, clock.now())
            except Unavailable as exc:
                log.info("metrics refresh skipped", extra={"event": "metrics_skipped", "error": str(exc)})
            await clock.sleep(refresh_s)

    async def refresh_db(self, port: DispatchPort, now: datetime) -> None:
        """The gauges read from the database, as of `now` (node time)."""
        depth = dict.fromkeys(PRIORITIES, 0)
        for d in await port.queue_depths():
            depth[d.priority] = d.queued
        for p, n in depth.items():
            self.queue_depth.labels(p).set(n)
        for state, n in (await port.executions_by_state()).items():
            self.by_state.labels(state).set(n)
        self.by_state.labels("queued").set(sum(depth.values()))  # counted once, by queue_depths
        self.stuck.set(await port.stuck_executions(STUCK_GRACE_S, now))
        self.success_alerts.set(await port.overdue_success_alerts())
