"""When a cron schedule fires: wall-clock matches mapped to instants in a zone, with DST rules.

The fire set. Every wall-clock time W that matches the expression contributes instants:

- W exists once: the instant it denotes.
- W does not exist (clocks jumped forward over it), gap policy `shift`: the instant of the
  jump ("the first valid instant after the gap": 03:00 local for Europe/London's 01:00-02:00
  gap is 01:00 UTC). All matching nonexistent times of one gap collapse into that ONE
  instant, which also coincides with a real match at the gap's end (`*/15 1 * * *` in London
  fires once at 02:00 BST that morning; `*/30 1-2 * * *` fires at 02:00 and 02:30 BST).
  Gap policy `skip`: nothing.
- W occurs twice (clocks went back): `first` -> its first occurrence, `last` -> its second,
  `both` -> both.

Defaults (no override): gap `shift`, repeated `first`, EXCEPT for schedules whose hour field
matches every hour (`*`, `0-23`, `*/1`): they fire at every wall time that really occurs, as
often as it occurs, i.e. gap `skip` and repeated `both` (`0 * * * *` fires at 01:00 BST and
at 01:00 GMT on London's autumn day, and no extra run is invented in the spring gap). An
explicit override always wins, also for every-hour schedules: `DstPolicy(repeated=FIRST)` on
`0 * * * *` fires at 01:00 BST only; `DstPolicy(gap=SHIFT)` on `30 * * * *` adds a run at the
spring jump. Overrides are per axis: the unset axis keeps its default.

`next_after(t)` is min{fire instant > t}; fire instants are whole UTC seconds, so a
fractional `t` behaves like its floor. `ticks_between(a, b)` yields a < tick <= b in
increasing order. Results therefore move strictly forward.

How the search works. Matching wall times are enumerated in wall-clock order (`next_wall`);
each is classified with PEP 495 folds. Mapping each wall time to its "primary" instant (the
unique one, the gap's end, or the occurrence the policy keeps -- the first for `both`) is
monotone, so the first wall time after t's wall time whose primary instant is after t wins.
The only instants that are not found that way are second occurrences (`last`/`both`) of wall
times at or before t's wall time, which exist only when t is in, or at most 3 hours before, a
repeated hour; a second probe handles exactly that. Assumes, as all of tzdata since 1970
does, that backward shifts are at most 3 hours and that transitions are more than 3 hours
apart.

Memo: `next_fire_ts` is memoised on (spec, zone, effective policies, floor(t)) with a bounded
LRU: at the top of the hour a million schedules sharing a handful of (expression, zone) pairs
cost a handful of computations. The spec is the H-resolved bitmask value, so schedules with
different expressions but the same meaning share entries too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache
from typing import overload
from zoneinfo import ZoneInfo

from cronwheel.errors import InvalidArgument
from cronwheel.times import to_unix_s

from .expr import CronSpec, compile_spec, next_wall
from .zones import (
    MAX_BACKWARD_SHIFT_S,
    fields_to_wall,
    first_change_after,
    load_zone,
    offset_at,
    wall_offsets,
    wall_to_fields,
)

__all__ = [
    "GapPolicy",
    "RepeatedPolicy",
    "DstPolicy",
    "CronSchedule",
    "parse_schedule",
    "next_fire_ts",
    "PREVIEW_MAX",
]

PREVIEW_MAX = 1000
MEMO_SIZE = 1 << 16


class GapPolicy(StrEnum):
    """What a wall time that does not exist (spring forward) does."""

    SHIFT = "shift"  # runs once at the first valid instant after the gap
    SKIP = "skip"  # does not run


class RepeatedPolicy(StrEnum):
    """What a wall time that occurs twice (fall back) does."""

    FIRST = "first"
    LAST = "last"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class DstPolicy:
    """Per-schedule DST override; None on an axis means "the default rule" (module doc)."""

    gap: GapPolicy | None = None
    repeated: RepeatedPolicy | None = None

    def effective(self, spec: CronSpec) -> tuple[GapPolicy, RepeatedPolicy]:
        every_hour = spec.hour_every
        gap = self.gap or (GapPolicy.SKIP if every_hour else GapPolicy.SHIFT)
        repeated = self.repeated or (RepeatedPolicy.BOTH if every_hour else RepeatedPolicy.FIRST)
        return gap, repeated


def _primary(spec: CronSpec, zone: ZoneInfo, gap: GapPolicy, repeated: RepeatedPolicy,
             t: int, wall: int, until_day: tuple[int, int, int] | None = None) -> int | None:
    """First instant > t among primary instants of matching wall times >= `wall`.

    None only when `until_day` is given and no matching wall time is on or before it.
    """
    while True:
        found = next_wall(spec, *wall_to_fields(wall), until_day)
        if found is None:
            return None
        y, mo, d, h, mi, s = found
        w = fields_to_wall(y, mo, d, h, mi, s)
        off0, off1 = wall_offsets(zone, y, mo, d, h, mi, s)
        if off0 == off1:
            if w - off0 > t:
                return w - off0
            wall = w + 1
        elif off0 < off1:  # nonexistent: the jump happens at T, w - off1 < T <= w - off0
            jump = first_change_after(zone, w - off1, w - off0)
            if gap is GapPolicy.SHIFT and jump > t:
                return jump
            wall = max(w + 1, jump + off1)  # past the gap: no other wall in it can fire
        else:
            p = w - off1 if repeated is RepeatedPolicy.LAST else w - off0
            if p > t:
                return p
            wall = w + 1


def _second_occurrence(spec: CronSpec, zone: ZoneInfo, t: int, fold: int, off_t: int
                       ) -> int | None:
    """The first second occurrence > t of a matching wall time at or before t's wall time."""
    if fold:
        start = t + off_t + 1  # t is inside a repeated hour's second pass
    else:
        horizon = t + MAX_BACKWARD_SHIFT_S
        if offset_at(zone, horizon) >= off_t:
            return None
        jump = first_change_after(zone, t, horizon)
        off_after = offset_at(zone, jump)
        if off_after >= off_t:
            return None
        start = max(t + off_after + 1, jump + off_after)
    y, mo, d, h, mi, s = next_wall(spec, *wall_to_fields(start))
    off0, off1 = wall_offsets(zone, y, mo, d, h, mi, s)
    if off0 > off1:
        second = fields_to_wall(y, mo, d, h, mi, s) - off1
        if second > t:
            return second
    return None


# No zone is more than 14 hours ahead of UTC: an instant <= b shows a wall time before this.
_MAX_OFFSET_S = 15 * 3600


@overload
def next_fire_ts(spec: CronSpec, zone: ZoneInfo, gap: GapPolicy, repeated: RepeatedPolicy,
                 t: int, bound: None = None) -> int: ...
@overload
def next_fire_ts(spec: CronSpec, zone: ZoneInfo, gap: GapPolicy, repeated: RepeatedPolicy,
                 t: int, bound: int) -> int | None: ...
def next_fire_ts(spec: CronSpec, zone: ZoneInfo, gap: GapPolicy, repeated: RepeatedPolicy,
                 t: int, bound: int | None = None) -> int | None:
    """The first fire instant strictly after Unix second `t` (uncached; see the module doc).

    With `bound`: that instant if it is <= bound, else None, and the search stops soon after
    the bound. A union asks its later members this with the earliest tick found so far.
    """
    until_day = None if bound is None else wall_to_fields(bound + _MAX_OFFSET_S)[:3]
    local = datetime.fromtimestamp(t, zone)
    off = local.utcoffset()
    assert off is not None
    off_t = off.days * 86400 + off.seconds
    start = t + off_t + 1
    if local.fold:
        # In the second pass of a repeated hour: every first occurrence is behind us, so the
        # primary walk resumes at the wall time just after the repeated hour (T + offset
        # before T), where the jump back T lies in (t - shift, t].
        o = local.replace(fold=0).utcoffset()
        assert o is not None
        off_before = o.days * 86400 + o.seconds
        jump = first_change_after(zone, t - (off_before - off_t), t)
        start = jump + off_before
    best = _primary(spec, zone, gap, repeated, t, start, until_day)
    if repeated is not RepeatedPolicy.FIRST:
        second = _second_occurrence(spec, zone, t, local.fold, off_t)
        if second is not None and (best is None or second < best):
            best = second
    if bound is not None and best is not None and best > bound:
        return None
    return best


@lru_cache(maxsize=MEMO_SIZE)
def _next_fire_memo(spec: CronSpec, zone: ZoneInfo, gap: GapPolicy, repeated: RepeatedPolicy,
                    t: int) -> datetime:
    return datetime.fromtimestamp(next_fire_ts(spec, zone, gap, repeated, t), UTC)


@lru_cache(maxsize=MEMO_SIZE)
def _next_fire_until_memo(spec: CronSpec, zone: ZoneInfo, gap: GapPolicy,
                          repeated: RepeatedPolicy, t: int, bound: int) -> datetime | None:
    found = next_fire_ts(spec, zone, gap, repeated, t, bound)
    return None if found is None else datetime.fromtimestamp(found, UTC)


def memo_info() -> str:
    """Hit/miss figures of the next-fire memo (for metrics and the benchmark)."""
    return str(_next_fire_memo.cache_info())


def clear_memo() -> None:
    _next_fire_memo.cache_clear()
    _next_fire_until_memo.cache_clear()


def to_unix_floor(instant: datetime, field_name: str = "instant") -> int:
    """Floor of an aware datetime in Unix seconds (exact, no float rounding)."""
    if not isinstance(instant, datetime) or instant.utcoffset() is None:
        raise InvalidArgument(field_name, "must be a timezone-aware datetime")
    return to_unix_s(instant)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed expression in a zone, with its DST policy and H seed. Immutable, shareable.

    Build with `parse_schedule` (or `validate_schedule_spec` at the API edge).
    """

    expression: str
    timezone: str
    dst_policy: DstPolicy
    schedule_id: str
    spec: CronSpec
    zone: ZoneInfo = field(compare=False, repr=False)
    gap: GapPolicy  # effective gap policy
    repeated: RepeatedPolicy  # effective repeated-hour policy

    def next_after(self, instant: datetime) -> datetime:
        """The first tick strictly after `instant` (aware, any zone) as an aware UTC datetime.

        Memoised (bounded LRU on spec, zone, effective policy, floor(instant)).
        """
        return _next_fire_memo(self.spec, self.zone, self.gap, self.repeated,
                               to_unix_floor(instant))

    def next_after_until(self, instant: datetime, bound: datetime) -> datetime | None:
        """next_after(instant) if it is <= `bound`, else None; stops searching near `bound`.

        Memoised like next_after (keyed on the bound too). UnionSpec's later members use it.
        """
        return _next_fire_until_memo(self.spec, self.zone, self.gap, self.repeated,
                                     to_unix_floor(instant), to_unix_floor(bound, "bound"))

    def next_after_uncached(self, instant: datetime) -> datetime:
        ts = next_fire_ts(self.spec, self.zone, self.gap, self.repeated, to_unix_floor(instant))
        return datetime.fromtimestamp(ts, UTC)

    def ticks_between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Ticks t with after < t <= until, strictly increasing. Lazy: stop whenever you like."""
        end = to_unix_floor(until, "until")
        tick = self.next_after(after)
        while to_unix_floor(tick) <= end:
            yield tick
            tick = self.next_after(tick)

    def preview(self, after: datetime, n: int) -> tuple[datetime, ...]:
        """The next `n` (1..1000) ticks strictly after `after`."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PREVIEW_MAX:
            raise InvalidArgument("n", f"must be an integer in 1..{PREVIEW_MAX}, got {n!r}")
        out: list[datetime] = []
        tick = after
        for _ in range(n):
            tick = self.next_after(tick)
            out.append(tick)
        return tuple(out)


def parse_schedule(cron: str, timezone: str, *, dst_policy: DstPolicy | None = None,
                   schedule_id: str = "") -> CronSchedule:
    """Parse and validate; InvalidArgument names `cron` or `timezone`.

    `schedule_id` seeds `H` fields and is required when the expression has any.
    """
    spec = compile_spec(cron, schedule_id)
    zone = load_zone(timezone)
    policy = dst_policy or DstPolicy()
    gap, repeated = policy.effective(spec)
    return CronSchedule(cron, timezone, policy, schedule_id, spec, zone, gap, repeated)
