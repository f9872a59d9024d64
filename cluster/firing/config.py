"""The firing path's tunables: one frozen config, validated at construction (`Firer` calls
`validate()`); the node's config composes it."""

from __future__ import annotations

from dataclasses import dataclass


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

