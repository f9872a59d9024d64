"""The clock-skew guard: a node whose wall clock is off PostgreSQL's by more than a bound stands down.

Why: a node's wall clock decides when the runs it claims may start (the claim's `run_at <= now`,
dispatch.sql), when its wheel fires, and when an edit counts as "before the tick"
(`api_unfire_ahead`). Runs are queued ahead of their run_at (FiringConfig.queue_ahead_s), so a
node whose clock runs ahead would start them early by its skew. PostgreSQL's clock is the one all
nodes share (fired_at, the fencing record's times), so each node measures itself against it.

Measure (the shell, `ClockSkewGuard.run`): every `check_every_s`, one `SELECT clock_timestamp()`
(`PartitionsPort.database_ts`) between two local readings. The skew is the midpoint of the two
local wall readings minus the database's (positive: this node runs ahead); the round trip,
measured on the monotonic clock, bounds the error to half of it. A sample whose round trip is
longer than `max_round_trip_s` says nothing (a stalled database or node) and changes nothing, nor
does one during which the wall clock stepped (its two local readings differ from the monotonic
round trip by more than that): its midpoint would be half the step.

Decide (pure, `judge`): the node stands down when a sample's skew exceeds `max_skew_s` in either
direction, and stands up again after `recover_samples` samples in a row within it (one good
sample after a clock step back is no proof the clock stays there; the partitions moved twice for
nothing otherwise). While standing down the node releases its partitions (its member key goes,
so the others take them: `Coordinator.stand_down`), stops firing at once, and its dispatcher
claims nothing (`Dispatcher.hold_claims`); the gauges `cronwheel_clock_skew_seconds` and
`cronwheel_clock_skew_exceeded` and the CronwheelClockSkew alert say why.

How it fails: PostgreSQL away: no sample, the state stays as it was (the fence stops the firing
path anyway). The guard bounds the skew only to within the sample's error (half a round trip,
at most max_round_trip_s / 2).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cronwheel.clock import Clock
from cronwheel.errors import Unavailable

log = logging.getLogger("cronwheel.cluster.coordination.clock_skew")


@dataclass(frozen=True, slots=True)
class ClockSkewConfig:
    max_skew_s: float = 2.0  # --max-clock-skew; the chaos suite skews nodes by up to 1 s
    check_every_s: float = 1.0
    max_round_trip_s: float = 0.5  # a longer sample is inconclusive
    recover_samples: int = 3  # samples in a row within the bound before the node stands up again

    def validate(self) -> ClockSkewConfig:
        if not self.max_skew_s > 0:
            raise ValueError(f"max_skew_s (--max-clock-skew) must be > 0, got {self.max_skew_s}")
        if not self.check_every_s > 0:
            raise ValueError(f"check_every_s must be > 0, got {self.check_every_s}")
        if not self.max_round_trip_s > 0:
            raise ValueError(f"max_round_trip_s must be > 0, got {self.max_round_trip_s}")
        if self.recover_samples < 1:
            raise ValueError(f"recover_samples must be >= 1, got {self.recover_samples}")
        return self


@dataclass(frozen=True, slots=True)
class SkewSample:
    """Local wall time before and after the read, PostgreSQL's time, the monotonic round trip."""

    sent_ts: float
    answered_ts: float
    database_ts: float
    round_trip_s: float

    @property
    def skew_s(self) -> float:
        """This node's wall clock minus PostgreSQL's (positive: the node runs ahead)."""
        return (self.sent_ts + self.answered_ts) / 2 - self.database_ts


@dataclass(frozen=True, slots=True)
class SkewState:
    """What the guard decided so far: standing down or not, and the run of good samples since."""

    skewed: bool = False
    within_streak: int = 0
    skew_s: float | None = None  # the last conclusive sample's skew


@dataclass(frozen=True, slots=True)
class SkewVerdict:
    state: SkewState
    changed: bool  # the node must stand down (state.skewed) or stand up (not state.skewed) now
    conclusive: bool


def judge(state: SkewState, sample: SkewSample, config: ClockSkewConfig) -> SkewVerdict:
    """The next state after `sample`. Pure."""
    stepped = abs((sample.answered_ts - sample.sent_ts) - sample.round_trip_s) > config.max_round_trip_s
    if sample.round_trip_s > config.max_round_trip_s or stepped:
        return SkewVerdict(state, changed=False, conclusive=False)
    skew = sample.skew_s
    if abs(skew) > config.max_skew_s:
        return SkewVerdict(SkewState(True, 0, skew), changed=not state.skewed, conclusive=True)
    if not state.skewed:
        return SkewVerdict(SkewState(False, 0, skew), changed=False, conclusive=True)
    streak = state.within_streak + 1
    recovered = streak >= config.recover_samples
    return SkewVerdict(SkewState(not recovered, 0 if recovered else streak, skew), changed=recovered,
                       conclusive=True)


class ClockSkewGuard:
    """The measuring loop. Not task-safe: `run()` is its only task; `state` is read by others."""

    def __init__(self, database_ts: Callable[[], Awaitable[float]], clock: Clock, config: ClockSkewConfig,
                 on_change: Callable[[bool, float], Awaitable[None]],
                 on_sample: Callable[[SkewState], None] | None = None) -> None:
        self.database_ts = database_ts
        self.clock = clock
        self.config = config.validate()
        self.on_change = on_change
        self.on_sample = on_sample
        self.state = SkewState()

    async def sample(self) -> SkewSample:
        started = self.clock.monotonic()
        sent = self.clock.now_ts()
        db = await self.database_ts()
        answered = self.clock.now_ts()
        return SkewSample(sent, answered, db, self.clock.monotonic() - started)

    async def check(self) -> SkewVerdict | None:
        """One round: measure, judge, act on a change. None: PostgreSQL did not answer."""
        try:
            sample = await self.sample()
        except Unavailable as exc:
            log.info("clock skew not measured", extra={"event": "clock_skew_deferred", "error": str(exc)})
            return None
        verdict = judge(self.state, sample, self.config)
        self.state = verdict.state
        if self.on_sample is not None:
            self.on_sample(verdict.state)
        if verdict.changed:
            skew = verdict.state.skew_s or 0.0
            if verdict.state.skewed:
                log.warning("clock skew beyond the bound: standing down", extra={
                    "event": "clock_skew_exceeded", "skew_s": round(skew, 3), "max_skew_s": self.config.max_skew_s})
            else:
                log.warning("clock skew within the bound again: standing up", extra={
                    "event": "clock_skew_recovered", "skew_s": round(skew, 3), "max_skew_s": self.config.max_skew_s})
            await self.on_change(verdict.state.skewed, skew)
        return verdict

    async def run(self) -> None:
        while True:
            await self.check()
            await self.clock.sleep(self.config.check_every_s)
