"""The firing path: preload owned partitions into the timing wheel, fire due entries in fenced
batches, keep the horizon extended, and follow changes.

    gain p  -> load schedules with next_run_at <= horizon and one-off jobs with run_at <= horizon;
               schedules whose run_at (tick + jitter) is older than the misfire grace get their
               misfire policy (one fenced transaction), the rest go into the wheel at run_at
    loop    -> sleep until wheel.next_deadline() (or a wake-up), advance, cut what is due into
               per-partition chunks and deal them into statements: the plain ticks of many
               partitions go as ONE statement (one transaction, one commit), each tick fenced by
               its own partition's epoch, so a whole second's herd is one or a few commits, not
               one per partition; a partition's other work (one-offs, overlap policies) is ONE
               fenced transaction of its own that inserts the executions (ON CONFLICT DO
               NOTHING), advances next_run_at, queues one-offs, applies overlap decisions; after
               commit the next tick goes into the wheel
    extend  -> every extend_every_s, one read finds the partitions with anything due in
               (loaded_until, now + horizon]; load that window of those, move the others' on
    change  -> `reload(p, kind, id)` re-reads one schedule or job (NOTIFY from the API)
    lose p  -> drop its timers at once; release p -> finish its in-flight batch, then drop

A partition's share of a statement has three outcomes (`WriteOutcome`), its own even when it
shares the statement with other partitions: WRITTEN (committed: arm the next ticks),
RETRY (not written, the partition is still ours: PostgreSQL away, or the lease's trust window
lapsed and may come back; re-arm the same entries) and LOST (the partition is not ours: drop).
Only WRITTEN moves anything forward, and the database refuses to move a schedule's cursor from
any tick but the one the batch recorded (storage/firing.py, the fire guard), so no tick is lost
silently whatever the order of trust lapses, keepalives and drops.

Time comes from the injected Clock only (waits, backoff, the extender), so a FakeClock test
drives the whole loop. Background work (preloads, the NOTIFY announcer) runs in the TaskGroup
that `run()` owns: expected errors (Unavailable) are handled where they occur; any other error
ends the group and takes the node down.

Not thread-safe: everything runs on the node's event loop. The wheel is touched only here.
Every decision about ticks is made by cronwheel.cron (pure); this module executes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from cronwheel import tracing
from cronwheel.clock import Clock
from cronwheel.cluster.firing.overlap import apply_overlap
from cronwheel.cluster.firing.schedule_cache import SchedInfo, ScheduleCache
from cronwheel.cluster.metrics import Metrics, observe_many
from cronwheel.cron import decide_misfire, last_overdue_tick
from cronwheel.errors import StaleEpoch, Unavailable
from cronwheel.storage import (
    DueSchedule,
    FireBatchParams,
    FireBatchResult,
    FiringPort,
    PartitionEvent,
    PlainTicks,
    ScheduleAdvance,
    Tick,
)
from cronwheel.storage.firing import StagedFire, stage_fire
from cronwheel.storage.notifications import queued_at_payload
from cronwheel.wheel import TimingWheel

log = logging.getLogger("cronwheel.cluster.firing.firer")

# Wheel items: (partition, kind, id, tick_ts). kind "s" = cron schedule tick, "o" = one-off job.
Item = tuple[int, str, uuid.UUID, float]


@dataclass(frozen=True, slots=True)
class FiringConfig:
    horizon_s: float = 120.0
    extend_every_s: float = 30.0
    tick_s: float = 0.01
    batch_size: int = 5000
    misfire_grace_s: float = 10.0
    parallel_batches: int = 4
    retry_after_s: float = 0.5
    # The ticks due at one instant go as one statement per `herd_ticks_per_statement` ticks (at
    # least; up to batch_size), so a big herd runs on several PostgreSQL backends (cores) at once
    # while a small one stays one commit.
    herd_ticks_per_statement: int = 500
    # A whole second, where cron ticks meet (every `*/5 * * * *` fires at :00), is prepared ahead:
    # when it is the next deadline and within `prepare_ahead_s`, the loop takes its entries that
    # early, builds their statements (schedule lookups, next ticks, parameters: 3-4 ms a statement
    # of 500 ticks) and holds them until the instant; they are sent at it, never before. 0 turns
    # it off. The trade: a job submitted due at once while an instant is being held waits for it
    # (at most this long).
    prepare_ahead_s: float = 0.02
    # A run whose start needs no decision at its time is queued this long before its run_at (its
    # wheel deadline is run_at - queue_ahead_s): a delayed one-off job, and a cron tick of an
    # overlap-`allow` schedule (a policed tick, forbid / skip / buffer / replace, looks at the
    # runs in flight, so it is decided at its time). The claim takes a run only from its run_at,
    # and a waiting lease call sleeps until then (`claim_wait`). So the fire's write is done
    # before the run is due, not between its run_at and its claim: 20,000 jobs due at one instant
    # were queued ~0.5 s late and claimed behind it (stop 41), and 1,000 ticks of one minute
    # boundary started 30-40 ms later than queued ahead (stop 42, docs/perf-log.md). Such a run
    # reads `queued` that early; a schedule edited, paused or deleted before its queued tick is
    # due takes that tick back (`SchedulesPort.unfire_ahead`). 0: queued at its run_at.
    queue_ahead_s: float = 1.0

    def validate(self) -> FiringConfig:
        if not 1 <= self.horizon_s <= 3600:
            raise ValueError(f"horizon_s must be in 1..3600, got {self.horizon_s}")
        if not 0 < self.extend_every_s < self.horizon_s:
            raise ValueError("extend_every_s must be positive and below horizon_s")
        if not 1 <= self.batch_size <= 50_000:
            raise ValueError(f"batch_size must be in 1..50000, got {self.batch_size}")
        if self.herd_ticks_per_statement < 1:
            raise ValueError("herd_ticks_per_statement must be >= 1")
        if self.misfire_grace_s < 0:
            raise ValueError("misfire_grace_s must be >= 0")
        if not 0 <= self.prepare_ahead_s <= 0.5:
            raise ValueError(f"prepare_ahead_s must be in 0..0.5, got {self.prepare_ahead_s}")
        if not 0 <= self.queue_ahead_s <= self.horizon_s - self.extend_every_s:
            raise ValueError(f"queue_ahead_s must be in 0..horizon_s - extend_every_s, got {self.queue_ahead_s}")
        return self


@dataclass
class PartitionState:
    epoch: int
    loaded_until: float  # Unix seconds: due index rows up to here are in the wheel
    handles: dict[uuid.UUID, Any] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True)
class _Batch:
    """One partition's share of a fire: the entries taken from the wheel, what to write for them,
    and the next tick of each schedule (armed after WRITTEN)."""

    p: int
    st: PartitionState
    chunk: list[Item]
    params: FireBatchParams
    nexts: dict[uuid.UUID, tuple[SchedInfo, float]]


class WriteOutcome(StrEnum):
    """What became of one fire batch (a decision value: the caller acts on it, never guesses)."""

    WRITTEN = "written"  # committed: the next ticks may be armed
    RETRY = "retry"  # not written, partition still ours: re-arm the same entries
    LOST = "lost"  # not written, partition not ours any more: drop the entries


@dataclass
class FirerSignals:
    """Events for tests (River's testsignal), set on every occurrence; a test clears one, acts,
    then waits on it instead of sleeping."""

    loaded: asyncio.Event = field(default_factory=asyncio.Event)  # a partition's first load finished
    written: asyncio.Event = field(default_factory=asyncio.Event)  # a batch answered WRITTEN
    retry: asyncio.Event = field(default_factory=asyncio.Event)  # a batch answered RETRY
    lost: asyncio.Event = field(default_factory=asyncio.Event)  # a batch answered LOST
    extended: asyncio.Event = field(default_factory=asyncio.Event)  # a horizon extension round ended


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass
class FireStats:
    fired: int = 0
    duplicates: int = 0
    stale_epoch: int = 0
    skipped_overlap: int = 0


class Firer:
    def __init__(
        self,
        firing: FiringPort,
        clock: Clock,
        config: FiringConfig,
        epoch_if_trusted: Callable[[int], int | None],
        on_stale: Callable[[int, int], None],
        on_fired: Callable[[float | None], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics
        self.firing = firing
        self.clock = clock
        self.config = config.validate()
        self.epoch_if_trusted = epoch_if_trusted
        self.on_stale = on_stale
        self.on_fired = on_fired
        self.wheel: TimingWheel[Item] = TimingWheel(clock.now_ts(), tick=config.tick_s)
        self.parts: dict[int, PartitionState] = {}
        self.schedules = ScheduleCache()
        self.stats = FireStats()
        self.traced = tracing.enabled()  # decided once: the fire path pays nothing while tracing is off
        self.signals = FirerSignals()
        self._wake = asyncio.Event()
        self._sem = asyncio.Semaphore(config.parallel_batches)
        # Background work goes into run()'s TaskGroup; what is spawned before run() starts waits here.
        self._tg: asyncio.TaskGroup | None = None
        self._pending: list[tuple[Callable[[], Coroutine[Any, Any, None]], str]] = []
        self._announcing = False  # an announcer task is scheduled or running
        # When the fire loop sleeps, until when (-inf while it is awake): an insert earlier than
        # that wakes it. Comparing with wheel.next_deadline() per insert cost 9% of a preload.
        self._sleeping_until = float("-inf")
        # Set (and replaced by a fresh one) each time the fire loop goes to sleep: what background
        # writers (the pruner) wait on to use the database between fires (`quiet_for`, `next_rest`).
        self._resting = asyncio.Event()
        # Queued runs committed since the last NOTIFY went out: the soonest instant they are
        # claimable from (not after now: claimable now, announced as "fired"), None when none.
        self._announce_at: float | None = None
        self.recent_lags: deque[float] = deque(maxlen=10_000)  # for ClusterStatus percentiles

    # ------------------------------------------------------------------ ownership hooks

    async def partition_gained(self, partition: int, epoch: int) -> None:
        st = PartitionState(epoch=epoch, loaded_until=self.clock.now_ts() - 1e9)
        self.parts[partition] = st
        # Loaded in the background, retried while PostgreSQL is away: the coordinator is not held
        # up, and nothing fires for the partition before its first load.
        self._spawn(lambda: self._initial_load(partition, st), f"preload-{partition}")

    def _spawn(self, start: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run `start()` in the firer's TaskGroup (an unexpected error there ends the group)."""
        if self._tg is None:
            self._pending.append((start, name))
        else:
            self._task(start(), name)

    def _task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        """`coro` as a task of the running TaskGroup; None (and not run) once the group is shutting
        down: a write that completes while the firer is being stopped must not fail the stop."""
        assert self._tg is not None
        try:
            return self._tg.create_task(coro, name=name)
        except RuntimeError:  # "TaskGroup ... is shutting down"
            coro.close()
            return None

    async def _initial_load(self, p: int, st: PartitionState) -> None:
        delay = self.config.retry_after_s
        while self.parts.get(p) is st:
            try:
                async with st.lock:
                    if self.parts.get(p) is st:
                        await self._load(p, st, self.clock.now_ts() + self.config.horizon_s, full=True)
                self.signals.loaded.set()
                return
            except Unavailable as exc:
                log.warning("preload deferred", extra={"event": "preload_deferred", "partition": p,
                                                       "error": str(exc)})
                await self.clock.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def partition_releasing(self, partition: int, epoch: int) -> None:
        st = self.parts.get(partition)
        if st is None:
            return
        async with st.lock:  # the in-flight batch finishes first
            self._drop(partition)

    def partition_lost(self, partition: int, epoch: int, reason: str) -> None:
        self._drop(partition)

    def _drop(self, partition: int) -> None:
        st = self.parts.pop(partition, None)
        if st is None:
            return
        for h in st.handles.values():
            self.wheel.cancel(h)
        self.schedules.drop_partition(partition)

    # ------------------------------------------------------------------ loading

    async def _load(self, p: int, st: PartitionState, horizon: float, full: bool) -> None:
        after = None if full else utc(st.loaded_until)
        misfired: list[tuple[SchedInfo, DueSchedule]] = []
        # Streamed in chunks, yielding between them: a big preload must not starve the lease.
        async for rows in self.firing.due_schedules(p, utc(horizon), after):
            if self.parts.get(p) is not st:
                return
            cutoff = self.clock.now_ts() - self.config.misfire_grace_s
            for r in rows:
                info = self.schedules.put(p, r)
                if info is None or r.next_run_at is None:
                    continue
                tick = r.next_run_at.timestamp()
                if info.overdue(tick, cutoff):
                    misfired.append((info, r))
                else:
                    self._arm_tick(st, p, info, tick)
            await asyncio.sleep(0)
        async for oneoffs in self.firing.due_oneoffs(p, utc(horizon), after):
            if self.parts.get(p) is not st:
                return
            for o in oneoffs:
                ts = o.run_at.timestamp()
                self._arm_oneoff(st, p, o.id, ts)
            await asyncio.sleep(0)
        st.loaded_until = max(st.loaded_until, horizon)
        for i in range(0, len(misfired), self.config.batch_size):
            await self._apply_misfires(p, st, misfired[i:i + self.config.batch_size], self.clock.now_ts())

    def _arm_oneoff(self, st: PartitionState, p: int, ident: uuid.UUID, run_at: float) -> None:
        """A scheduled one-off job into the wheel: due `queue_ahead_s` before its run_at."""
        self._insert(st, p, ident, run_at, run_at - self.config.queue_ahead_s, kind="o")

    def _arm_tick(self, st: PartitionState, p: int, info: SchedInfo, tick: float) -> None:
        """A schedule's tick into the wheel: an overlap-`allow` tick `queue_ahead_s` before its
        run_at, a policed one at it (FiringConfig.queue_ahead_s)."""
        ahead = self.config.queue_ahead_s if info.overlap == "allow" else 0.0
        self._insert(st, p, info.id, tick, info.run_at(tick) - ahead)

    def _insert(self, st: PartitionState, p: int, ident: uuid.UUID, tick: float, run_at: float,
                kind: str = "s") -> None:
        old = st.handles.pop(ident, None)
        if old is not None:
            self.wheel.cancel(old)
        st.handles[ident] = self.wheel.insert(run_at, (p, kind, ident, tick))
        if run_at < self._sleeping_until:  # earlier than the fire loop means to wake: wake it now
            self._wake.set()

    async def _apply_misfires(self, p: int, st: PartitionState, misfired: list[tuple[SchedInfo, DueSchedule]],
                              now: float) -> None:
        """Schedules whose tick's run_at passed while nobody owned them (`SchedInfo.overdue`):
        each gets its misfire policy on its overdue ticks (`last_overdue_tick`)."""
        cutoff = utc(now - self.config.misfire_grace_s)
        ticks: list[Tick] = []
        advances: list[ScheduleAdvance] = []
        events: list[PartitionEvent] = []
        nexts: list[tuple[SchedInfo, float]] = []
        for info, r in misfired:
            first = r.next_run_at
            assert first is not None  # due rows have a tick
            through = last_overdue_tick(info.cron, first, cutoff, str(info.id), info.jitter_s)
            if through is None:  # the wall clock stepped back since the caller's check: not late
                nexts.append((info, first.timestamp()))
                continue
            d = decide_misfire(info.cron, first - timedelta(seconds=1), through, info.misfire, info.max_catch_up)
            # Every record names the cursor the decision started from (`first`): the database
            # writes them only while the schedule is still there, unedited and unpaused.
            for t in d.fire:
                ticks.append(Tick(info.id, t, utc(info.run_at(t.timestamp())), trigger="catch_up",
                                  version=info.version, cursor=first))
            for t in d.skipped:
                ticks.append(Tick(info.id, t, t, state="skipped", state_reason=f"misfire:{info.misfire}",
                                  version=info.version, cursor=first))
            if d.skipped_count or d.refused_count:
                events.append(PartitionEvent(
                    "misfire_refused" if d.refused_count else "misfire_skipped", info.id, d.alert,
                    {"policy": str(info.misfire), "first_missed": first.isoformat(),
                     "latest_missed": d.latest_missed.isoformat() if d.latest_missed else None,
                     "fired": len(d.fire), "skipped": d.skipped_count, "refused": d.refused_count,
                     "max_catch_up": info.max_catch_up, "counts_are_lower_bounds": d.counts_are_lower_bounds},
                ))
            nxt = info.cron.next_after(through)  # the first tick not overdue
            advances.append(ScheduleAdvance(info.id, nxt, d.latest_missed, info.version, cursor=first))
            nexts.append((info, nxt.timestamp()))
        params = FireBatchParams(p, st.epoch, ticks=ticks, advances=advances, events=events, now=self.clock.now())
        delay = self.config.retry_after_s
        # The misfire records must land before the next tick is armed (and the database refuses
        # to advance the cursor from anything but `first`, so the next tick could not skip them).
        while (outcome := await self._write(p, st, params)) is WriteOutcome.RETRY:
            if self.parts.get(p) is not st:
                return
            await self.clock.sleep(delay)
            delay = min(delay * 2, 5.0)
        if outcome is WriteOutcome.WRITTEN and self.parts.get(p) is st:
            for info, nxt in nexts:
                if nxt <= st.loaded_until:
                    self._arm_tick(st, p, info, nxt)

    async def reload(self, p: int, kind: str, ident: uuid.UUID) -> None:
        """A schedule or job changed (created, updated, paused, resumed, deleted, cancelled)."""
        st = self.parts.get(p)
        if st is None:
            return
        async with st.lock:
            h = st.handles.pop(ident, None)
            if h is not None:
                self.wheel.cancel(h)
            if kind == "s":
                self.schedules.forget(ident)
                r = await self.firing.schedule_for_fire(ident)
                if r is None or r.next_run_at is None or self.parts.get(p) is not st:
                    return
                info = self.schedules.put(p, r)
                tick = r.next_run_at.timestamp()
                if info is not None and tick <= st.loaded_until:
                    if info.overdue(tick, self.clock.now_ts() - self.config.misfire_grace_s):
                        await self._apply_misfires(p, st, [(info, r)], self.clock.now_ts())
                    else:
                        self._arm_tick(st, p, info, tick)
            else:
                o = await self.firing.oneoff_for_fire(ident)
                if o is not None and self.parts.get(p) is st and o.run_at.timestamp() <= st.loaded_until:
                    ts = o.run_at.timestamp()
                    self._arm_oneoff(st, p, ident, ts)

    async def add_oneoffs(self, entries: list[tuple[int, uuid.UUID, float]]) -> None:
        """New scheduled one-off jobs (partition, id, run_at) from a submit group's notification:
        armed with no lookup when this node owns the partition and run_at is within what is
        loaded (later ones come with the horizon). A job cancelled meanwhile is refused by the
        fire statement itself (it queues only `scheduled` rows)."""
        by_p: dict[int, list[tuple[uuid.UUID, float]]] = {}
        for p, ident, ts in entries:
            by_p.setdefault(p, []).append((ident, ts))
        for p, items in by_p.items():
            st = self.parts.get(p)
            if st is None:
                continue
            async with st.lock:
                if self.parts.get(p) is not st:
                    continue
                for ident, ts in items:
                    if ts <= st.loaded_until:
                        self._arm_oneoff(st, p, ident, ts)

    async def resync(self) -> None:
        """After a missed notification: reload every owned partition from scratch."""
        for p, st in list(self.parts.items()):
            async with st.lock:
                for h in st.handles.values():
                    self.wheel.cancel(h)
                st.handles.clear()
                self.schedules.drop_partition(p)
                st.loaded_until = self.clock.now_ts() - 1e9
                await self._load(p, st, self.clock.now_ts() + self.config.horizon_s, full=True)

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        """The fire loop, the horizon extender and every background task of the firer, in one
        TaskGroup: a failure of any of them ends run() (and the node) instead of vanishing."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                pending, self._pending = self._pending, []
                for start, name in pending:
                    tg.create_task(start(), name=name)
                tg.create_task(self._fire_loop(), name="fire-loop")
                tg.create_task(self._extend_loop(), name="horizon-extender")
        finally:
            self._tg = None

    async def _extend_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.extend_every_s)
            horizon = self.clock.now_ts() + self.config.horizon_s
            try:
                due = await self._extend_quiet(horizon)
            except Unavailable as exc:
                log.warning("preload deferred", extra={"event": "preload_deferred", "error": str(exc)})
                continue
            for p, st in list(self.parts.items()):
                if p not in due:
                    continue
                try:
                    async with st.lock:
                        if self.parts.get(p) is st:
                            await self._load(p, st, horizon, full=False)
                except Unavailable as exc:
                    log.warning("preload deferred", extra={"event": "preload_deferred", "partition": p,
                                                           "error": str(exc)})
            self.signals.extended.set()

    async def _extend_quiet(self, horizon: float) -> set[int]:
        """Move the window of every owned partition with nothing due in (loaded_until, horizon]
        to `horizon` after one read for all of them; the partitions that do have something are
        returned, to be loaded. A partition's lock is held across the read and the move, so no
        fire, reload or submit of it can commit a due time into the window unseen; only free locks
        are taken (a partition busy with a preload is returned as due: loaded the usual way), so
        this never waits while holding a lock and never holds a partition up behind another."""
        held: list[PartitionState] = []
        busy: set[int] = set()
        try:
            live = []
            for p, st in sorted(self.parts.items()):
                if st.lock.locked():
                    busy.add(p)
                    continue
                await st.lock.acquire()  # free: returns at once
                held.append(st)
                live.append((p, st))
            due = await self.firing.extend_due_partitions([(p, utc(st.loaded_until)) for p, st in live],
                                                          utc(horizon))
            for p, st in live:
                if p not in due and self.parts.get(p) is st:
                    st.loaded_until = max(st.loaded_until, horizon)
            return due | busy
        finally:
            for st in held:
                st.lock.release()

    async def _fire_loop(self) -> None:
        tick = self.config.tick_s
        while True:
            self._wake.clear()
            due = self.wheel.advance(max(self.clock.now_ts(), self.wheel.now))
            if due:
                await self._fire_due(due)
                continue
            nd = self.wheel.next_deadline()
            now = self.clock.now_ts()
            ahead = self.config.prepare_ahead_s if nd is not None and nd == int(nd) else 0.0
            if ahead and nd is not None and nd - now <= ahead:
                await self._fire_due(self.wheel.advance(nd), at=nd)
                # Whatever came of it, the loop goes on at the instant, not before: the wheel
                # stands at `at` now, and what was inserted meanwhile at or before it comes with
                # the next advance.
                await self._until(nd)
                continue
            delay = 1.0 if nd is None else min(1.0, max(nd - now - ahead, tick / 2))
            self._sleeping_until = now + delay
            rested, self._resting = self._resting, asyncio.Event()
            rested.set()
            await self.clock.wait(self._wake, delay)
            self._sleeping_until = float("-inf")  # awake: the loop advances the wheel next anyway

    def quiet_for(self) -> float:
        """Seconds from now until the fire loop next wakes (0 while it fires): how long a
        background writer may hold the database without meeting a fire statement of this node.
        A new job due earlier than that wakes the loop sooner."""
        return max(0.0, self._sleeping_until - self.clock.now_ts())

    async def next_rest(self, timeout_s: float) -> bool:
        """Wait until the fire loop next goes to sleep (its fire done), at most timeout_s."""
        return await self.clock.wait(self._resting, timeout_s)

    async def _until(self, at: float | None) -> None:
        """Return at `at` or later by this node's clock (None: now). A loop, not one sleep: the
        event loop's timer runs on the monotonic clock and may wake a hair before the wall clock
        reads `at`, and what is held for `at` is never sent before it."""
        while at is not None and at > self.clock.now_ts():
            await self.clock.sleep_until_ts(at)

    async def _fire_due(self, due: list[Item], at: float | None = None) -> None:
        """Everything due at one instant, across partitions; with `at`, an instant prepared ahead:
        the statements are built now and sent at `at`, never before. Each partition's entries are cut into
        chunks of at most batch_size, dealt round-robin (so concurrent statements hold different
        partitions), and consecutive chunks of distinct partitions share ONE statement (see `cap`):
        a whole second's herd over 64 partitions is one or a few commits, not 64."""
        by_p: dict[int, list[Item]] = defaultdict(list)
        for it in due:
            by_p[it[0]].append(it)
        size = self.config.batch_size
        per_p = [[(p, items[i:i + size]) for i in range(0, len(items), size)] for p, items in by_p.items()]
        # Statements of about len(due) / parallel_batches ticks each, between herd_ticks_per_statement
        # and batch_size: every batch slot gets a share, but no statement is cut smaller than that.
        cap = min(size, max(self.config.herd_ticks_per_statement, -(-len(due) // self.config.parallel_batches)))
        groups: list[list[tuple[int, list[Item]]]] = []
        group: list[tuple[int, list[Item]]] = []
        in_group: set[int] = set()
        ticks = 0
        for row in itertools.zip_longest(*per_p):
            for c in row:
                if c is None:
                    continue
                if group and (ticks + len(c[1]) > cap or c[0] in in_group):
                    groups.append(group)
                    group, in_group, ticks = [], set(), 0
                group.append(c)
                in_group.add(c[0])
                ticks += len(c[1])
        if group:
            groups.append(group)
        await asyncio.gather(*(self._fire_group(g, at) for g in groups))

    async def _fire_group(self, group: list[tuple[int, list[Item]]], at: float | None = None) -> None:
        """One statement's worth of chunks. A partition's lock is taken only if it is free right
        now (a preload or reload holding it must not hold up the other partitions' ticks); a
        busy partition's chunk goes on its own once its lock is free (`_fire_partition`). Taking
        only free locks, never waiting while holding one, cannot deadlock. The plain batches go
        as one statement; each batch with a policed tick then goes on its own, in the background,
        its partition's lock held from its preparation to its write (released by
        `_write_policed`): one waiting on a row lock holds up no other partition, nor the loop."""
        deferred: list[tuple[int, list[Item]]] = []
        policed: list[_Batch] = []
        async with self._sem:
            held: list[tuple[int, PartitionState, list[Item]]] = []
            try:
                for p, items in group:
                    st = self.parts.get(p)
                    if st is None:
                        continue
                    if st.lock.locked():
                        deferred.append((p, items))
                        continue
                    await st.lock.acquire()
                    held.append((p, st, items))
                batches: list[_Batch] = []
                for p, st, items in held:
                    if self.parts.get(p) is not st:
                        continue
                    for it in items:  # advance() returned it, so it is the live handle for its id
                        st.handles.pop(it[2], None)
                    batches.append(self._prepare(p, st, items))
                policed = [b for b in batches if not b.params.only_plain]
                await self._write_plain_many([b for b in batches if b.params.only_plain], at)
            except BaseException:
                policed = []
                raise
            finally:
                handed = {b.p for b in policed}  # released by _write_policed
                for p, st, _items in held:
                    if p not in handed:
                        st.lock.release()
        # Not awaited by the fire loop (which waits for the plain statement only): a policed
        # write can wait on a row lock (a session stopped mid-transaction: the chaos failpoint
        # `stall-completion`), and a deferred chunk on its partition's lock. Each holds up only
        # its own partition, whose later chunks queue behind it on that lock, in order.
        later = [self._write_policed(b, at) for b in policed] + [
            self._fire_partition(p, items, at) for p, items in deferred]
        if self._tg is None:  # not under run()
            await asyncio.gather(*later)
            return
        for coro in later:
            self._task(coro, "fire-later")  # None once the firer is stopping: the coroutine is closed

    async def _write_policed(self, b: _Batch, at: float | None) -> None:
        """A batch with a policed tick (the general fire path), whose partition's lock the caller
        took and hands over: released here, once the batch is written or given up."""
        try:
            async with self._sem:
                await self._until(at)
                params = b.params if at is None else dataclasses.replace(b.params, now=self.clock.now())
                self._after(b, await self._write(b.p, b.st, params))
        finally:
            b.st.lock.release()

    async def _fire_partition(self, p: int, items: list[Item], at: float | None = None) -> None:
        await self._until(at)
        st = self.parts.get(p)
        if st is None:
            return
        for i in range(0, len(items), self.config.batch_size):
            chunk = items[i:i + self.config.batch_size]
            async with st.lock, self._sem:  # lock, then slot, as _write_policed: no cycle
                if self.parts.get(p) is not st:
                    return
                for it in chunk:  # advance() returned it, so it is the live handle for its id
                    st.handles.pop(it[2], None)
                b = self._prepare(p, st, chunk)
                if b.params.only_plain:
                    await self._write_plain_many([b])
                else:
                    self._after(b, await self._write(p, st, b.params))

    def _prepare(self, p: int, st: PartitionState, chunk: list[Item]) -> _Batch:
        # Hot loop: plain ticks (overlap `allow`) go as parallel columns of floats, and due one-off
        # jobs as ids, to the one-statement fast path; ticks whose overlap policy needs a look at
        # running work take the general path (with the rest of the chunk).
        plain = PlainTicks([], [], [], [], [])
        ticks: list[Tick] = []
        advances: dict[uuid.UUID, ScheduleAdvance] = {}
        oneoffs = plain.oneoffs
        nexts: dict[uuid.UUID, tuple[SchedInfo, float]] = {}
        get = self.schedules.get
        next_of: dict[tuple[int, float], float] = {}  # (id of a parsed expression, tick) -> next tick
        for _p, kind, ident, tick_ts in chunk:
            if kind == "o":
                oneoffs.append(ident)
                continue
            info = get(ident)
            if info is None:
                continue  # deleted or paused since it was loaded
            key = (id(info.cron), tick_ts)  # the infos, so their expressions, live through the batch
            nxt = next_of.get(key)
            if nxt is None:
                nxt = next_of[key] = info.cron.next_after(utc(tick_ts)).timestamp()
            nexts[ident] = (info, nxt)
            if info.overlap == "allow":
                plain.schedule_ids.append(ident)
                plain.ticks.append(tick_ts)
                plain.run_ats.append(info.run_at(tick_ts))
                plain.nexts.append(nxt)
                plain.versions.append(info.version)
            else:
                tick = utc(tick_ts)
                ticks.append(Tick(ident, tick, utc(info.run_at(tick_ts)), version=info.version, cursor=tick))
                advances[ident] = ScheduleAdvance(ident, utc(nxt), tick, info.version, cursor=tick)
        params = FireBatchParams(p, st.epoch, ticks=ticks, advances=list(advances.values()), plain=plain,
                                 now=self.clock.now())
        return _Batch(p, st, chunk, params, nexts)

    def _after(self, b: _Batch, outcome: WriteOutcome) -> None:
        """Act on a batch's outcome (its signal is already set)."""
        p, st = b.p, b.st
        if outcome is WriteOutcome.LOST:
            return  # the partition is (being) dropped; its next owner loads the cursors as they are
        if outcome is WriteOutcome.RETRY:
            if self.parts.get(p) is st:  # not written: the same entries again shortly
                retry_at = self.clock.now_ts() + self.config.retry_after_s
                for it in b.chunk:
                    self._insert(st, p, it[2], it[3], retry_at, kind=it[1])
            return
        # Arming every schedule's next tick is safe even where the guard refused the write: that
        # tick fires only if the database's cursor has reached it (compare-and-set).
        for ident, (info, nxt) in b.nexts.items():
            if nxt <= st.loaded_until and self.schedules.get(ident) is info:
                self._arm_tick(st, p, info, nxt)

    def _signal(self, outcome: WriteOutcome) -> WriteOutcome:
        {WriteOutcome.WRITTEN: self.signals.written, WriteOutcome.RETRY: self.signals.retry,
         WriteOutcome.LOST: self.signals.lost}[outcome].set()
        return outcome

    async def _write(self, p: int, st: PartitionState, params: FireBatchParams) -> WriteOutcome:
        return self._signal(await self._try_write(p, st, params))

    async def _write_plain_many(self, batches: list[_Batch], at: float | None = None) -> None:
        """Plain-only batches of distinct partitions as ONE statement (`fire_plain_many`), each
        fenced by its own partition's epoch; every batch gets its own outcome: a stale partition
        is LOST (and dropped) while the others are WRITTEN. With `at`, the statement is built
        now and sent at `at` (the checks below are made then)."""
        def staged(bs: list[_Batch]) -> StagedFire:
            return stage_fire([(b.p, b.st.epoch, b.params.plain) for b in bs if b.params.plain is not None])

        early = None
        if at is not None and batches:
            early = staged(batches)
            await self._until(at)
        ready: list[_Batch] = []
        for b in batches:
            refused = self._refused_before_write(b.p, b.st)
            if refused is not None:
                self._after(b, self._signal(refused))
            else:
                ready.append(b)
        if not ready:
            return
        t0 = tracing.ns(self.clock.now_ts()) if self.traced else 0
        try:
            fire = staged(ready) if early is None or [(b.p, b.st.epoch) for b in ready] != [
                (bp, be) for bp, be, _ in early.batches] else early
            res = await self.firing.fire_plain_many(fire, self.clock.now())
        except Unavailable as exc:
            log.warning("fire deferred", extra={"event": "fire_deferred", "partitions": [b.p for b in ready],
                                                "error": str(exc)})
            for b in ready:
                self._after(b, self._signal(WriteOutcome.RETRY if self.parts.get(b.p) is b.st else WriteOutcome.LOST))
            return
        for b in ready:
            r = res[b.p]
            if isinstance(r, StaleEpoch):
                self._stale(b.p, b.st, r)
                self._after(b, self._signal(WriteOutcome.LOST))
            else:
                if self.traced:
                    await self._trace_fired(b.params, r, t0)
                self._written(b.params, r)
                self._after(b, self._signal(WriteOutcome.WRITTEN))

    def _refused_before_write(self, p: int, st: PartitionState) -> WriteOutcome | None:
        """RETRY or LOST when this node must not write for `p` now; None when it may."""
        epoch = self.epoch_if_trusted(p)
        if epoch is None:
            # Trust lapsed (no keepalive answer within the window). Not written; it may come back
            # before the partition is dropped, and then these same entries must fire.
            return WriteOutcome.RETRY if self.parts.get(p) is st else WriteOutcome.LOST
        if epoch != st.epoch:
            return WriteOutcome.LOST  # held under another epoch now: this state is history
        return None

    def _stale(self, p: int, st: PartitionState, exc: StaleEpoch) -> None:
        """The database refused a write of `st.epoch`: drop that state (and only that one)."""
        self.stats.stale_epoch += 1
        if self.metrics is not None:
            self.metrics.stale_epoch.inc()
        log.warning("stale epoch: write refused", extra={"event": "stale_epoch", "partition": p,
                                                         "epoch": st.epoch, "current": exc.current})
        # Only the state this write was made for: a late refusal of an old epoch must not drop
        # the partition this node has since acquired again under a new one.
        if self.parts.get(p) is st:
            self._drop(p)
            self.on_stale(p, st.epoch)

    async def _try_write(self, p: int, st: PartitionState, params: FireBatchParams) -> WriteOutcome:
        refused = self._refused_before_write(p, st)
        if refused is not None:
            return refused
        t0 = tracing.ns(self.clock.now_ts()) if self.traced else 0
        try:
            if params.only_plain:
                assert params.plain is not None
                res = await self.firing.fire_plain(p, st.epoch, params.plain, params.now)
            else:
                policed = list({t.schedule_id for t in params.ticks
                                if self._overlap_of(t.schedule_id) not in (None, "allow")})
                buffers = [s for s in policed if self._overlap_of(s) in ("buffer_one", "buffer_all")]
                res = await self.firing.fire(params, policed, self._decide_overlap, lock=buffers)
        except StaleEpoch as exc:
            self._stale(p, st, exc)
            return WriteOutcome.LOST
        except Unavailable as exc:
            log.warning("fire deferred", extra={"event": "fire_deferred", "partition": p, "error": str(exc)})
            return WriteOutcome.RETRY if self.parts.get(p) is st else WriteOutcome.LOST
        if self.traced:
            await self._trace_fired(params, res, t0)
        self._written(params, res)
        return WriteOutcome.WRITTEN

    async def _trace_fired(self, params: FireBatchParams, res: FireBatchResult, t0: int) -> None:
        """Tracing only: a root "fire" span per cron tick the batch wrote (from before the write
        to now), its traceparent stored on the tick's execution (one UPDATE, before the ticks are
        announced to workers). A failure here costs the traces, never the fire."""
        ticks = [(f.schedule_id, f.scheduled_for.timestamp()) for f in res.fired if f.schedule_id is not None]
        if params.plain is not None and res.plain_inserted:
            ticks.extend(zip(params.plain.schedule_ids, params.plain.ticks, strict=True))
        if not ticks:
            return
        stored = []
        for sid, tick in ticks:
            tp = tracing.record_span("fire", t0, root=True, attributes={
                "cronwheel.partition": params.partition, "cronwheel.schedule_id": str(sid),
                "cronwheel.scheduled_for": utc(tick).isoformat()})
            if tp is not None:
                stored.append((sid, tick, tp))
        try:
            await self.firing.set_tick_trace_contexts(stored)
        except Exception as exc:  # noqa: BLE001 - tracing must never break firing
            log.warning("trace contexts not stored", extra={"event": "trace_store_failed", "error": str(exc)})

    def _written(self, params: FireBatchParams, res: FireBatchResult) -> None:
        self.stats.fired += len(res.fired) + res.plain_inserted
        now = self.clock.now_ts()
        lags = [max(0.0, now - f.run_at.timestamp()) for f in res.fired]  # queued ahead: 0
        if params.plain is not None and res.plain_inserted:
            lags.extend(max(0.0, now - run_at) for run_at in params.plain.run_ats)
        self.recent_lags.extend(lags)
        if self.metrics is not None:
            observe_many(self.metrics.fire_lag, lags)
            self.metrics.fired.inc(len(res.fired) + res.plain_inserted)
            moved = itertools.chain(((f.state, f.type) for f in res.fired), (("cancelled", t) for t in res.replaced))
            self.metrics.executions_entered(moved, res.plain_entered)
        self.stats.duplicates += res.duplicates
        # When what this batch queued is claimable: its soonest run_at (runs queued ahead of it,
        # queue_ahead_s), or now; waiting calls are woken then, not sooner.
        queued = [f.run_at.timestamp() for f in res.fired if f.state == "queued"]
        if res.plain_inserted and params.plain is not None and params.plain.run_ats:
            queued.append(min(params.plain.run_ats))  # some may be quota-skipped: a wake-up too many
        if queued:
            soonest = min(queued)
            at = soonest if soonest > now else None
            self._announce(soonest)
            if self.on_fired is not None:
                self.on_fired(at)

    def _announce(self, at: float) -> None:
        """Tell other nodes' workers that runs were queued, claimable from `at`: one NOTIFY after
        commit for however many batches committed meanwhile, for the soonest of them (this
        node's own workers are woken by on_fired). A call woken for the soonest that finds later
        runs not yet due sleeps until they are by itself (`claim_wait`)."""
        if self._announce_at is None or at < self._announce_at:
            self._announce_at = at
        if not self._announcing:
            self._announcing = True
            self._spawn(self._announce_loop, "firer-announce")

    async def _announce_loop(self) -> None:
        try:
            while self._announce_at is not None:
                at, self._announce_at = self._announce_at, None
                payload = "fired" if at <= self.clock.now_ts() else queued_at_payload(at)
                try:
                    await self.firing.notify_queued(payload)
                except Unavailable as exc:  # other nodes' fallback poll picks the runs up
                    log.warning("notify deferred", extra={"event": "notify_deferred", "error": str(exc)})
                    return
        finally:
            self._announcing = False

    def _decide_overlap(self, params: FireBatchParams, counts: dict[uuid.UUID, tuple[int, int]]) -> FireBatchParams:
        """Inside the fire transaction, from the active runs read under the fence (`apply_overlap`)."""
        params, skipped = apply_overlap(params, counts, self._overlap_of)
        self.stats.skipped_overlap += skipped
        return params

    def _overlap_of(self, sid: uuid.UUID) -> str | None:
        info = self.schedules.get(sid)
        return None if info is None else info.overlap

    def wheel_size(self) -> int:
        return len(self.wheel)

    def lag_percentiles(self) -> tuple[float, float] | None:
        """(p50, p99) fire lag in seconds over the last 10,000 fires, or None before any."""
        if not self.recent_lags:
            return None
        xs = sorted(self.recent_lags)
        return xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.99))]

    def owned(self) -> Iterable[int]:
        return self.parts.keys()
