"""What the firer holds, and the one place that arms the wheel: the owned partitions' states,
the wheel and the schedule cache, the test signals and stats, and the TaskGroup its background
work runs in. `FirerBase` is the root of the firer's layers (base <- announcing <- writing <-
loading <- firer.Firer), each a module of one concept over this shared state.

Not thread-safe: everything runs on the node's event loop. The wheel is touched only by the
firer's layers, and entries go into it only through `_insert` (which wakes a sleeping fire loop).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from cronwheel import tracing
from cronwheel.clock import Clock
from cronwheel.cluster.firing.config import FiringConfig
from cronwheel.cluster.firing.planning import Item
from cronwheel.cluster.firing.schedule_cache import SchedInfo, ScheduleCache
from cronwheel.cluster.metrics import Metrics
from cronwheel.storage import FiringPort
from cronwheel.wheel import TimingWheel

log = logging.getLogger("cronwheel.cluster.firing.firer")  # one logger for all the firer's layers


@dataclass
class PartitionState:
    epoch: int
    loaded_until: float  # Unix seconds: due index rows up to here are in the wheel
    handles: dict[uuid.UUID, Any] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)



@dataclass
class FirerSignals:
    """Events for tests (River's testsignal), set on every occurrence; a test clears one, acts,
    then waits on it instead of sleeping."""

    loaded: asyncio.Event = field(default_factory=asyncio.Event)  # a partition's first load finished
    written: asyncio.Event = field(default_factory=asyncio.Event)  # a batch answered WRITTEN
    retry: asyncio.Event = field(default_factory=asyncio.Event)  # a batch answered RETRY
    lost: asyncio.Event = field(default_factory=asyncio.Event)  # a batch answered LOST
    extended: asyncio.Event = field(default_factory=asyncio.Event)  # a horizon extension round ended



@dataclass
class FireStats:
    fired: int = 0
    duplicates: int = 0
    stale_epoch: int = 0
    skipped_overlap: int = 0



class FirerBase:
    """The firer's state and wheel arming. Not thread-safe: everything runs on the node's event
    loop."""

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

    def _drop(self, partition: int) -> None:
        st = self.parts.pop(partition, None)
        if st is None:
            return
        for h in st.handles.values():
            self.wheel.cancel(h)
        self.schedules.drop_partition(partition)

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

    async def _until(self, at: float | None) -> None:
        """Return at `at` or later by this node's clock (None: now). A loop, not one sleep: the
        event loop's timer runs on the monotonic clock and may wake a hair before the wall clock
        reads `at`, and what is held for `at` is never sent before it."""
        while at is not None and at > self.clock.now_ts():
            await self.clock.sleep_until_ts(at)
