"""The Pruner: per owned partition, fenced, in bounded batches, paced by the node's Clock.

A round first asks, in one read for all of them, which owned partitions have anything to look
at (`RetentionPort.due_partitions`); the others rest. It then takes one batch of each pass for
every partition that has: the age pass (the oldest
finished runs, from a keyset cursor kept per partition and epoch) and the keep_last pass (a page
of the partition's keep_last schedules, from an id cursor). Between batches that deleted
something the pruner sleeps `pause_s`, so it holds a connection and row locks for one short
transaction at a time and firing gets the database most of the time; once a round finds nothing
more anywhere it sleeps `idle_s`. A cursor belongs to an epoch: a partition regained later starts
a fresh pass.

Not task-safe: one task per node (`run`); tests call `round()` / `drain()` directly on a
FakeClock instead.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from cronwheel.clock import Clock
from cronwheel.cluster.retention.policy import RetentionConfig
from cronwheel.errors import StaleEpoch, Unavailable
from cronwheel.storage.retention import (
    START,
    ExpiredCursor,
    PruneExpiredParams,
    PruneKeepLastParams,
    RetentionPort,
)

log = logging.getLogger("cronwheel.cluster.retention")

BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class RetentionMetrics:
    """cronwheel_pruned_total{pass}, cronwheel_prune_batch_seconds{pass},
    cronwheel_prune_failures_total, on the node's registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.pruned = Counter("cronwheel_pruned", "Finished executions deleted by retention", ["pass"], registry=r)
        self.batch_s = Histogram("cronwheel_prune_batch_seconds", "Duration of one prune batch (one transaction)",
                                 ["pass"], buckets=BATCH_BUCKETS, registry=r)
        self.failures = Counter("cronwheel_prune_failures", "Prune batches that failed (retried next round)",
                                registry=r)


@dataclass
class _Cursors:
    epoch: int
    expired: ExpiredCursor = START
    keep_after: uuid.UUID | None = None
    rest_until: float = 0.0  # monotonic: both passes ended; the next pass starts after idle_s


class Pruner:
    def __init__(self, port: RetentionPort, owned: Callable[[], Iterable[tuple[int, int]]], *, clock: Clock,
                 config: RetentionConfig | None = None, metrics: RetentionMetrics | None = None) -> None:
        self.port = port
        self.owned = owned
        self.clock = clock
        self.config = (config or RetentionConfig()).validate()
        self.windows = self.config.windows()
        self.metrics = metrics or RetentionMetrics()
        self.pruned = 0
        self.failures = 0
        self._cursors: dict[int, _Cursors] = {}
        # Set after every round (a test clears it, advances the clock and waits on it).
        self.round_done = asyncio.Event()

    async def run(self) -> None:
        if not self.config.enabled:
            return
        while True:
            more = await self.round(pace=True, force=False)
            await self.clock.sleep(self.config.pause_s if more else self.config.idle_s)

    async def drain(self, max_rounds: int = 100_000) -> int:
        """Rounds until nothing more is prunable now (tests, benchmarks): rows deleted."""
        before = self.pruned
        for _ in range(max_rounds):
            if not await self.round():
                break
        return self.pruned - before

    async def round(self, pace: bool = False, force: bool = True) -> bool:
        """One batch of each pass for every owned partition (in `run`, not `force`d: only those
        not resting after a finished pass); True if any has more to do now."""
        more = False
        owned = dict(self.owned())
        for p in set(self._cursors) - set(owned):
            del self._cursors[p]
        awake = {}
        for p, epoch in owned.items():
            cur = self._cursors.get(p)
            if not force and cur is not None and cur.epoch == epoch and self.clock.monotonic() < cur.rest_until:
                continue
            awake[p] = epoch
        try:  # one read for every partition instead of two fenced transactions each with nothing to do
            due = await self.port.due_partitions(sorted(awake), self.windows, self.clock.now())
        except Unavailable as exc:
            log.warning("prune deferred", extra={"event": "prune_deferred", "error": str(exc)})
            self.round_done.set()
            return False
        for p in set(awake) - due:  # nothing to look at: rests like a partition whose passes ended
            cur = self._cursors.get(p)
            if cur is None or cur.epoch != awake[p]:
                cur = self._cursors[p] = _Cursors(awake[p])
            cur.rest_until = self.clock.monotonic() + self.config.idle_s
        for p, epoch in awake.items():
            if p not in due:
                continue
            try:
                deleted, has_more = await self.step(p, epoch)
            except StaleEpoch:
                self._cursors.pop(p, None)  # the partition moved on; its new owner prunes it
                continue
            except Unavailable as exc:
                log.warning("prune deferred", extra={"event": "prune_deferred", "error": str(exc)})
                break
            except Exception as exc:  # pruning is never worth a node: logged, counted, retried
                self.failures += 1
                self.metrics.failures.inc()
                log.error("prune batch failed", exc_info=exc,
                          extra={"event": "prune_failed", "partition": p, "epoch": epoch, "error": str(exc)})
                continue
            more = more or has_more
            if pace and deleted:
                await self.clock.sleep(self.config.pause_s)
        self.round_done.set()
        return more

    async def step(self, p: int, epoch: int) -> tuple[int, bool]:
        """One batch of each pass for partition p: (rows deleted, more to do)."""
        cur = self._cursors.get(p)
        if cur is None or cur.epoch != epoch:
            cur = self._cursors[p] = _Cursors(epoch)
        c = self.config
        t0 = self.clock.monotonic()
        exp = await self.port.prune_expired(PruneExpiredParams(
            p, epoch, self.windows, self.clock.now(), cur.expired, c.batch_rows))
        t1 = self.clock.monotonic()
        keep = await self.port.prune_keep_last(PruneKeepLastParams(
            p, epoch, self.clock.now(), cur.keep_after, c.keep_last_schedules, c.batch_rows))
        t2 = self.clock.monotonic()
        cur.expired, cur.keep_after = exp.next, keep.next_after_id
        m = self.metrics
        m.batch_s.labels("age").observe(t1 - t0)
        m.batch_s.labels("keep_last").observe(t2 - t1)
        if exp.deleted:
            m.pruned.labels("age").inc(exp.deleted)
        if keep.deleted:
            m.pruned.labels("keep_last").inc(keep.deleted)
        deleted = exp.deleted + keep.deleted
        self.pruned += deleted
        more = exp.next != START or not keep.done
        if not more:
            cur.rest_until = self.clock.monotonic() + c.idle_s
        if deleted:
            log.debug("pruned", extra={"event": "pruned", "partition": p, "age": exp.deleted,
                                       "keep_last": keep.deleted})
        return deleted, more
