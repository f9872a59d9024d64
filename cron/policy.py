"""Pure decisions for the firing path: missed ticks, overlapping runs, jitter.

Each function takes everything it needs as arguments (the schedule, the instants, the counts)
and returns a frozen record of what to do; the caller executes the record and decides nothing.

Misfire (ticks missed while the cluster was down or a partition unowned). The missed ticks are
those t with last_scheduled_for < t <= now (a tick due exactly now counts as missed: the caller
asks only when the normal path did not fire it).

- `skip`: fire none; every missed tick is recorded as skipped.
- `run_once`: fire the latest missed tick only; the others are recorded as skipped (coalesced).
- `catch_up`: if at most `max_catch_up` ticks were missed, fire all of them, oldest first.
  If MORE were missed, fire NONE of them: they are refused, `alert` is set, and an operator
  backfills the window (last_scheduled_for, latest_missed] deliberately. This is the reading of
  DESIGN.md's "beyond it none is replayed automatically" that matches Kubernetes CronJobs (more
  than 100 missed starts: start none, report an error): replaying the oldest N of a long outage
  would run stale work, in a burst, and still leave a hole the operator must fill.

Work is bounded: at most `record_limit` (default 1000, and at least max_catch_up + 1) missed
ticks are enumerated. When there are more, `skipped`/`refused` hold the oldest `record_limit`,
the counts are lower bounds (`counts_are_lower_bounds`), and the latest missed tick is found by
an exponential-then-binary search on next_after (about 2 log2(outage seconds) calls), never by
walking a million ticks.

Overlap (a tick comes due while runs of the same schedule are unfinished or buffered):
`forbid` -> skip (recorded as skipped), `allow` -> start, `replace` -> cancel the unfinished ones
then start, `buffer_one` -> buffer unless one is already buffered (then skip), `buffer_all` ->
buffer. With nothing unfinished every policy starts, even with runs still buffered: a buffered
run is released only when a run of its schedule ends (in the same transaction), so one with
nothing unfinished ahead of it would wait forever; the started run releases it when it ends.
Invariant: a schedule never holds a buffered run with nothing unfinished ahead of it.

Misfire records bypass the overlap policy (`decide_overlap_step`): a tick replayed by the misfire
policy (trigger `catch_up`: run_once's latest, catch_up's every tick) runs, and a `skipped`
misfire record stays skipped; neither is buffered, skipped for overlap or used to replace. A
replayed run still counts as unfinished for the ticks after it; a skipped record never does, and
a buffered tick counts as buffered, never as unfinished.

Jitter: a tick's run_at is scheduled_for + jitter_offset_s(id, tick, jitter_s), a value in
[0, jitter_s) derived from blake2b(id, tick): the same tick of the same schedule always gets
the same offset on every node, different ticks and schedules spread uniformly. A tick is late
(missed) by its RUN TIME, not by its tick: `last_overdue_tick` gives the ticks a load finds
overdue (run time before now - grace), and the misfire policy decides about those only; a
tick whose run time is still ahead is armed for it, whenever the load happens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from cronwheel import jitter
from cronwheel.errors import InvalidArgument
from cronwheel.times import from_unix_s

from .schedule import CronSchedule, to_unix_floor

__all__ = [
    "MisfirePolicy",
    "MisfireDecision",
    "decide_misfire",
    "OverlapPolicy",
    "OverlapAction",
    "OverlapDecision",
    "decide_overlap",
    "OverlapStep",
    "decide_overlap_step",
    "MISFIRE_TRIGGER",
    "jitter_offset_s",
    "last_overdue_tick",
    "parse_misfire_policy",
    "parse_overlap_policy",
    "validate_max_catch_up",
    "validate_jitter_s",
    "MAX_CATCH_UP_LIMIT",
    "MAX_JITTER_S",
    "Priority",
]

MAX_CATCH_UP_LIMIT = 1000
# The trigger of a tick replayed by the misfire policy (run_once's latest, catch_up's every tick).
MISFIRE_TRIGGER = "catch_up"
# The contract's limit (common.proto Schedule.jitter, docs/semantics.md "Jitter"): 0 .. 1 h.
MAX_JITTER_S = 3_600.0
DEFAULT_RECORD_LIMIT = 1000


class Priority(StrEnum):
    """An execution's priority queue, most urgent first (the dispatcher's order)."""

    CRITICAL = "critical"
    DEFAULT = "default"
    BULK = "bulk"


class MisfirePolicy(StrEnum):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    CATCH_UP = "catch_up"


class OverlapPolicy(StrEnum):
    FORBID = "forbid"
    ALLOW = "allow"
    REPLACE = "replace"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"


class OverlapAction(StrEnum):
    START = "start"
    SKIP = "skip"
    CANCEL_RUNNING_THEN_START = "cancel_running_then_start"
    BUFFER = "buffer"


def _choice(enum: type[StrEnum], field: str, value: object) -> str:
    choices = ", ".join(m.value for m in enum)
    if value is None or value == "":
        raise InvalidArgument(field, f"required: one of {choices}")
    if isinstance(value, enum):
        return value.value
    if isinstance(value, str) and value.strip().lower() in {m.value for m in enum}:
        return value.strip().lower()
    raise InvalidArgument(field, f"unknown value {value!r}; use one of {choices}")


def parse_misfire_policy(value: object) -> MisfirePolicy:
    """A MisfirePolicy from an enum or its name; missing -> InvalidArgument("misfire_policy")."""
    return MisfirePolicy(_choice(MisfirePolicy, "misfire_policy", value))


def parse_overlap_policy(value: object) -> OverlapPolicy:
    return OverlapPolicy(_choice(OverlapPolicy, "overlap_policy", value))


def validate_max_catch_up(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument("max_catch_up", f"must be an integer in 1..{MAX_CATCH_UP_LIMIT}, "
                                              f"got {value!r}")
    if not 1 <= value <= MAX_CATCH_UP_LIMIT:
        raise InvalidArgument("max_catch_up", f"must be in 1..{MAX_CATCH_UP_LIMIT}, got {value}")
    return value


def validate_jitter_s(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument("jitter_s", f"must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= MAX_JITTER_S:
        raise InvalidArgument("jitter_s", f"must be in 0..{MAX_JITTER_S:g} seconds, got {value}")
    return float(value)


@dataclass(frozen=True, slots=True)
class MisfireDecision:
    """What to do about missed ticks. All tuples are in increasing time order.

    fire: ticks to insert as executions now. skipped: ticks to record as skipped (misfire).
    refused: catch_up ticks not replayed (operator backfill). latest_missed: the newest missed
    tick (advance last_scheduled_for to it), None when nothing was missed.
    """

    fire: tuple[datetime, ...] = ()
    skipped: tuple[datetime, ...] = ()
    refused: tuple[datetime, ...] = ()
    skipped_count: int = 0
    refused_count: int = 0
    counts_are_lower_bounds: bool = False
    alert: bool = False
    latest_missed: datetime | None = None

    @property
    def missed_count(self) -> int:
        return len(self.fire) + self.skipped_count + self.refused_count


def _latest_at_or_before(schedule: CronSchedule, floor: int, now: int) -> datetime:
    """The last tick in (floor, now]; precondition: there is one."""
    step, lo = 1, now - 1
    while lo > floor and to_unix_floor(schedule.next_after(_utc(lo))) > now:
        step *= 2
        lo = max(floor, now - step)
    # Now next_after(lo) <= now. Find the largest lo with that property: next_after(lo) is then
    # the latest tick <= now (next_after is monotone in its argument).
    hi = now  # next_after(now) > now
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if to_unix_floor(schedule.next_after(_utc(mid))) <= now:
            lo = mid
        else:
            hi = mid
    return schedule.next_after(_utc(lo))


def _utc(ts: int) -> datetime:
    return from_unix_s(ts)


def decide_misfire(schedule: CronSchedule, last_scheduled_for: datetime | None, now: datetime,
                   policy: MisfirePolicy | str | None, max_catch_up: int | None = None, *,
                   record_limit: int = DEFAULT_RECORD_LIMIT) -> MisfireDecision:
    """Decide about the ticks in (last_scheduled_for, now] (see the module doc for the rules).

    `max_catch_up` is required (1..1000) for catch_up and ignored otherwise. Pure: the
    schedule's next_after is the only computation.
    """
    pol = parse_misfire_policy(policy)
    limit = validate_max_catch_up(max_catch_up) if pol is MisfirePolicy.CATCH_UP else 0
    if last_scheduled_for is None:
        return MisfireDecision()
    floor, end = to_unix_floor(last_scheduled_for, "last_scheduled_for"), to_unix_floor(now, "now")
    cap = max(record_limit, limit + 1)
    missed: list[datetime] = []
    tick = schedule.next_after(last_scheduled_for)
    while len(missed) < cap and to_unix_floor(tick) <= end:
        missed.append(tick)
        tick = schedule.next_after(tick)
    if not missed:
        return MisfireDecision()
    truncated = len(missed) == cap and to_unix_floor(tick) <= end
    latest = _latest_at_or_before(schedule, floor, end) if truncated else missed[-1]
    count = len(missed)  # exact unless truncated, then a lower bound
    if pol is MisfirePolicy.SKIP:
        return MisfireDecision(skipped=tuple(missed[:record_limit]), skipped_count=count,
                               counts_are_lower_bounds=truncated, latest_missed=latest)
    if pol is MisfirePolicy.RUN_ONCE:
        others = [t for t in missed[:record_limit] if t != latest]
        skipped_count = count if truncated else count - 1  # truncated: latest not in `missed`
        return MisfireDecision(fire=(latest,), skipped=tuple(others), skipped_count=skipped_count,
                               counts_are_lower_bounds=truncated, latest_missed=latest)
    if count <= limit:
        return MisfireDecision(fire=tuple(missed), latest_missed=latest)
    return MisfireDecision(refused=tuple(missed[:record_limit]), refused_count=count,
                           counts_are_lower_bounds=truncated, alert=True, latest_missed=latest)


@dataclass(frozen=True, slots=True)
class OverlapDecision:
    action: OverlapAction
    reason: str


def decide_overlap(policy: OverlapPolicy | str, running: int, buffered: int) -> OverlapDecision:
    """What a live tick that comes due does, given how many runs of its schedule are unfinished
    (`running`: queued, running, retry_scheduled) and buffered. Nothing unfinished: START under
    every policy, buffered runs or not (see the module doc: nothing else would release them)."""
    pol = parse_overlap_policy(policy)
    if isinstance(running, bool) or not isinstance(running, int) or running < 0:
        raise InvalidArgument("running", f"must be a count >= 0, got {running!r}")
    if isinstance(buffered, bool) or not isinstance(buffered, int) or buffered < 0:
        raise InvalidArgument("buffered", f"must be a count >= 0, got {buffered!r}")
    busy = f"{running} running, {buffered} buffered"
    if running == 0:
        return OverlapDecision(OverlapAction.START, "nothing running" if buffered == 0
                               else f"nothing running ahead of {buffered} buffered")
    if pol is OverlapPolicy.FORBID:
        return OverlapDecision(OverlapAction.SKIP, f"overlap forbidden: {busy}")
    if pol is OverlapPolicy.ALLOW:
        return OverlapDecision(OverlapAction.START, f"overlap allowed: {busy}")
    if pol is OverlapPolicy.REPLACE:
        return OverlapDecision(OverlapAction.CANCEL_RUNNING_THEN_START,
                               f"replacing: {busy}")
    if pol is OverlapPolicy.BUFFER_ONE and buffered >= 1:
        return OverlapDecision(OverlapAction.SKIP, f"buffer of one is full: {busy}")
    return OverlapDecision(OverlapAction.BUFFER, f"buffered behind: {busy}")


@dataclass(frozen=True, slots=True)
class OverlapStep:
    """One tick of a batch through the overlap policy: `decision` (None: a misfire record, which
    bypasses the policy and is written as it is) and the counts of the schedule's unfinished and
    buffered runs once this tick is written, for the next tick of the same schedule."""

    decision: OverlapDecision | None
    running: int
    buffered: int


def decide_overlap_step(policy: OverlapPolicy | str, running: int, buffered: int, *,
                        trigger: str = "cron", state: str = "queued") -> OverlapStep:
    """`decide_overlap` for one tick of a batch, in tick order, folding the counts.

    `trigger` and `state` are the tick's as the misfire policy made it: trigger `catch_up`
    (MISFIRE_TRIGGER, a replayed tick) or state `skipped` (a misfire record) bypass the policy
    (decision None). Counts after the tick: a started or replacing tick and a replayed one are
    unfinished (running + 1); a buffered tick is buffered (buffered + 1); a skipped one changes
    nothing. Pure; InvalidArgument as decide_overlap for a bad policy or count.
    """
    if trigger == MISFIRE_TRIGGER or state == "skipped":
        decide_overlap(policy, running, buffered)  # validates the arguments alike
        return OverlapStep(None, running + (state == "queued"), buffered)
    d = decide_overlap(policy, running, buffered)
    if d.action is OverlapAction.BUFFER:
        return OverlapStep(d, running, buffered + 1)
    if d.action is OverlapAction.SKIP:
        return OverlapStep(d, running, buffered)
    return OverlapStep(d, running + 1, buffered)


def last_overdue_tick(schedule: CronSchedule, cursor: datetime, cutoff: datetime, schedule_id: str,
                      jitter_s: float) -> datetime | None:
    """The last of the ticks a load finds missed, or None when the cursor tick is not missed.

    A tick is overdue when its run time (tick + jitter_offset_s) is before `cutoff` (now minus
    the misfire grace). The missed ticks are the schedule's ticks from `cursor` (its next_run_at,
    included) on, in order, while overdue: the first tick that is not overdue stops them, and is
    the schedule's next tick (armed for its run time). With jitter_s 0 they are the ticks in
    [cursor, cutoff). Every tick before cutoff - jitter_s is overdue (an offset is below
    jitter_s), so only the ticks of the last jitter_s seconds are looked at one by one (at most
    3,600 for a 1-second cron); the rest is found by the search decide_misfire uses. Pure.
    """
    window = validate_jitter_s(jitter_s)

    def overdue(t: datetime) -> bool:
        return t + timedelta(seconds=jitter_offset_s(schedule_id, t, window)) < cutoff

    if not overdue(cursor):
        return None
    # A whole-second tick t <= safe has t + jitter_s < cutoff, so it is overdue whatever its offset.
    last, start = cursor, to_unix_floor(cursor, "cursor")
    safe = math.ceil((cutoff - _utc(0)).total_seconds() - window) - 1
    if start <= safe:
        last = _latest_at_or_before(schedule, start - 1, safe)
    tick = schedule.next_after(last)
    while overdue(tick):
        last, tick = tick, schedule.next_after(tick)
    return last


def jitter_offset_s(schedule_id: str, tick: datetime, jitter_s: float) -> float:
    """Deterministic offset in [0, jitter_s) for this schedule's tick; 0.0 when jitter_s is 0."""
    window = validate_jitter_s(jitter_s)
    if not isinstance(tick, datetime) or tick.utcoffset() is None:
        raise InvalidArgument("tick", "must be a timezone-aware datetime")
    return jitter.offset_s(schedule_id, tick, window)
