"""The Pruner: per owned partition, fenced, in bounded batches, paced by the node's Clock.

A round first asks, in one read for all of them, which owned partitions have anything to look
at, and for which pass (`RetentionPort.due_partitions`); the others rest. It then takes one
batch of each pass with work for every partition that has some: the age pass (the oldest
finished runs, from a keyset cursor kept per partition and epoch) and the keep_last pass (a page
of the partition's keep_last schedules, from an id cursor). Between batches that deleted
something the pruner sleeps `pause_s`, so it holds a connection and row locks for one short
transaction at a time and firing gets the database most of the time; once a round finds nothing
more anywhere it sleeps `idle_s`. A cursor belongs to an epoch: a partition regained later starts
a fresh pass.

Pruning yields to firing. Beside the node's fire loop (`fires`), a paced batch starts when the
loop goes to rest between two fires; its budget is `gap_share` of that rest, and it takes as many
rows as the pruner's rate says fit in the budget (between MIN_BATCH_ROWS and `batch_rows`), so it
runs while no fire statement of this node does and ends before the loop wakes. On a quiet node
(the loop rests long enough for a whole batch) it goes at once with `batch_rows`. The rate (rows
per second of budget) adapts to what batches take, fixed costs and all: a batch that ended within
its budget raises it by RATE_UP, one that overran cuts it by RATE_DOWN. With no rest within
`yield_wait_s` (the loop fires back to back) a batch goes with MIN_BATCH_ROWS: pruning slows down
but never stops.

Not task-safe: one task per node (`run`); tests call `round()` / `drain()` directly on a
FakeClock instead.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

from cronwheel.clock import Clock
from cronwheel.cluster.retention.policy import MIN_BATCH_ROWS, RetentionConfig
from cronwheel.errors import StaleEpoch, Unavailable
from cronwheel.storage.retention import (
    START,
    DuePasses,
    ExpiredCursor,
    PruneExpiredParams,
    PruneExpiredResult,
    PruneKeepLastParams,
    PruneKeepLastResult,
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


class FireRests(Protocol):
    """What the pruner yields to: the node's fire loop (cluster/firing/firer.py, Firer)."""

    def quiet_for(self) -> float:
        """Seconds until the fire loop next wakes (0 while it fires)."""
        ...

    async def next_rest(self, timeout_s: float) -> bool:
        """Until the fire loop next goes to sleep, at most timeout_s."""
        ...


R = TypeVar("R")
BOTH = DuePasses(age=True, keep_last=True)
RATE_START = 20_000.0  # rows per second of budget before any paced batch was measured
RATE_UP, RATE_DOWN = 1.1, 0.5  # after a rate-sized batch that ended within its budget / overran it
RATE_MIN, RATE_MAX = 1_000.0, 1_000_000.0


@dataclass
class _Cursors:
    epoch: int
    expired: ExpiredCursor = START
    keep_after: uuid.UUID | None = None
    rest_until: float = 0.0  # monotonic: both passes ended; the next pass starts after idle_s


class Pruner:
    def __init__(self, port: RetentionPort, owned: Callable[[], Iterable[tuple[int, int]]], *, clock: Clock,
                 config: RetentionConfig | None = None, metrics: RetentionMetrics | None = None,
                 fires: FireRests | None = None) -> None:
        self.port = port
        self.fires = fires
        self.rate = RATE_START  # rows a paced batch takes per second of its budget (adapted)
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
        for p in set(awake) - due.keys():  # nothing to look at: rests like a partition whose passes ended
            cur = self._cursors.get(p)
            if cur is None or cur.epoch != awake[p]:
                cur = self._cursors[p] = _Cursors(awake[p])
            cur.rest_until = self.clock.monotonic() + self.config.idle_s
        for p, epoch in awake.items():
            if p not in due:
                continue
            try:
                deleted, has_more = await self.step(p, epoch, pace=pace, passes=due[p])
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

    async def batch_rows(self, pace: bool) -> tuple[int, float | None]:
        """The next batch's rows and its time budget in seconds (None: none to learn from):
        unpaced, `batch_rows`; paced beside a fire loop, `batch_rows` at once if what is left of
        the loop's rest fits them, else what the rate fits in `gap_share` of its next rest (waited
        for, at most `yield_wait_s`; with none, MIN_BATCH_ROWS)."""
        c = self.config
        if not pace or self.fires is None:
            return c.batch_rows, None
        budget = self.fires.quiet_for() * c.gap_share
        if budget * self.rate >= c.batch_rows:  # a long rest (a quiet node): a whole batch now
            return c.batch_rows, budget
        if not await self.fires.next_rest(c.yield_wait_s):  # firing back to back
            return self._rows(0), None
        budget = self.fires.quiet_for() * c.gap_share
        return self._rows(int(budget * self.rate)), budget

    def _rows(self, fit: int) -> int:
        """`fit` held to MIN_BATCH_ROWS..batch_rows (batch_rows wins: never more than the flag)."""
        return min(self.config.batch_rows, max(MIN_BATCH_ROWS, fit))

    def _adapt(self, rows: int, budget: float | None, seconds: float) -> None:
        """After a paced batch: over its budget, the rate goes down; within it, up, unless
        batch_rows capped the batch (a long rest says nothing about a short one)."""
        if budget is None:
            return
        if seconds > budget:
            self.rate = max(RATE_MIN, self.rate * RATE_DOWN)
        elif rows < self.config.batch_rows:
            self.rate = min(RATE_MAX, self.rate * RATE_UP)

    async def _batch(self, name: str, pace: bool, run: Callable[[int], Awaitable[R]]) -> R:
        """One batch of pass `name`: sized (`batch_rows`), run, timed into the histogram and, paced,
        into the rate."""
        rows, budget = await self.batch_rows(pace)
        t0 = self.clock.monotonic()
        got = await run(rows)
        seconds = self.clock.monotonic() - t0
        self._adapt(rows, budget, seconds)
        self.metrics.batch_s.labels(name).observe(seconds)
        return got

    async def step(self, p: int, epoch: int, pace: bool = False, passes: DuePasses = BOTH) -> tuple[int, bool]:
        """One batch of each of `passes` for partition p: (rows deleted, more to do)."""
        cur = self._cursors.get(p)
        if cur is None or cur.epoch != epoch:
            cur = self._cursors[p] = _Cursors(epoch)
        c = self.config
        m = self.metrics
        exp = PruneExpiredResult(0, 0, START)
        if passes.age:
            exp = await self._batch("age", pace, lambda rows: self.port.prune_expired(PruneExpiredParams(
                p, epoch, self.windows, self.clock.now(), cur.expired, rows)))
        keep = PruneKeepLastResult(0, 0, None, done=True)
        if passes.keep_last:
            keep = await self._batch("keep_last", pace, lambda rows: self.port.prune_keep_last(PruneKeepLastParams(
                p, epoch, self.clock.now(), cur.keep_after, c.keep_last_schedules, rows)))
        cur.expired, cur.keep_after = exp.next, keep.next_after_id
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
