"""The `Spec` protocol, unions of specs, and exclusions (a spec, or dates in a zone).

Every kind of timing answers one question, `next_after(instant) -> datetime | None`: the first
tick strictly after `instant` as an aware UTC datetime of a whole second, or None when there is
none. `CronSchedule` (cron expressions, L/W/# included), `IntervalSpec`, `UnionSpec` and
`ExcludingSpec` all do, so a caller holds one value whatever the schedule says.

- `UnionSpec(members)`: every instant of any member, once per distinct instant (two members
  that both fire at 09:00 give one 09:00 tick).
- `ExcludingSpec(base, exclusions)`: the instants of `base` that no exclusion removes.
  `SpecExclusion(spec)` removes an instant that is also an instant of `spec` (exactly: the same
  second, with the spec's own DST rules); `DateExclusion(dates, zone)` removes every instant
  whose local date in `zone` is one of `dates` (public holidays).

Cost: a union asks each member once per call (members keep their own memo); a cron member
after the first searches only up to the earliest tick found so far; an exclusion
skips the removed instants one by one, except that a date exclusion jumps to the end of the
excluded local day. `ExcludingSpec.next_after` looks at most `HORIZON_S` (10 years) ahead and
returns None beyond: a schedule whose exclusions remove everything for 10 years is finished.
`first_remaining` is the bounded check the API uses to refuse such a schedule at the door.

Frozen values; safe to share between tasks and threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from cronwheel.errors import InvalidArgument

from .interval import IntervalSpec
from .schedule import PREVIEW_MAX, CronSchedule, to_unix_floor

__all__ = [
    "Spec",
    "Exclusion",
    "UnionSpec",
    "ExcludingSpec",
    "SpecExclusion",
    "DateExclusion",
    "ticks_between",
    "preview",
    "first_remaining",
    "HORIZON_S",
    "CHECK_MAX_STEPS",
]

_SECOND = timedelta(seconds=1)
HORIZON_S = 3653 * 86400  # 10 years (with leap days)
CHECK_MAX_STEPS = 20_000


class Spec(Protocol):
    def next_after(self, instant: datetime) -> datetime | None:
        """The first tick strictly after `instant` (aware UTC, whole second), or None."""
        ...


class Exclusion(Protocol):
    def resume_after(self, tick: datetime) -> datetime | None:
        """None if `tick` is kept; else an instant >= tick before which every tick is removed."""
        ...


@dataclass(frozen=True, slots=True)
class SpecExclusion:
    """Removes the ticks that are also ticks of `spec`."""

    spec: Spec

    def resume_after(self, tick: datetime) -> datetime | None:
        before = tick - _SECOND
        if isinstance(self.spec, CronSchedule):  # only "is tick one of yours?": search no further
            return tick if self.spec.next_after_until(before, tick) == tick else None
        return tick if self.spec.next_after(before) == tick else None


@dataclass(frozen=True, slots=True)
class DateExclusion:
    """Removes the ticks whose local date in `zone` is one of `dates`."""

    dates: frozenset[date]
    timezone: str
    zone: ZoneInfo = field(compare=False, repr=False)

    def resume_after(self, tick: datetime) -> datetime | None:
        day = tick.astimezone(self.zone).date()
        if day not in self.dates:
            return None
        # The day's end: the first instant of the next local date (a midnight in a gap maps to
        # the jump). A repeated midnight can bring `day` back after it; max() keeps progress.
        next_day = datetime.combine(day + timedelta(days=1), time(0), tzinfo=self.zone)
        return max(tick, next_day.astimezone(UTC) - _SECOND)


def _fires_per_day(spec: Spec) -> float:
    """A rough density, only to order a union's members (the densest first)."""
    if isinstance(spec, IntervalSpec):
        return 86400 / spec.every_s
    if isinstance(spec, CronSchedule):
        c = spec.spec
        per_day = c.seconds.bit_count() * c.minutes.bit_count() * c.hours.bit_count()
        if c.special:
            return per_day / 30
        if c.dom_star and c.dow_star:
            return per_day
        if c.dow_star:
            return per_day * c.doms.bit_count() / 31
        return per_day * (c.dows.bit_count() / 7 if c.dom_star else 1)
    return 0.0


@dataclass(frozen=True, slots=True)
class UnionSpec:
    """The instants of any member, each distinct instant once.

    Members are kept densest first: the first answer bounds the later cron members' searches,
    and a near bound cuts them short.
    """

    members: tuple[Spec, ...]

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.members, key=_fires_per_day, reverse=True))
        object.__setattr__(self, "members", ordered)  # frozen: set once, before any use

    def next_after(self, instant: datetime) -> datetime | None:
        best: datetime | None = None
        for member in self.members:
            if best is not None and isinstance(member, CronSchedule):
                t = member.next_after_until(instant, best)  # stops at the best so far
            else:
                t = member.next_after(instant)
            if t is not None and (best is None or t < best):
                best = t
        return best


@dataclass(frozen=True, slots=True)
class ExcludingSpec:
    """The instants of `base` that no exclusion removes (10-year horizon, module doc)."""

    base: Spec
    exclusions: tuple[Exclusion, ...]

    def next_after(self, instant: datetime) -> datetime | None:
        return self.scan(instant, to_unix_floor(instant) + HORIZON_S, None)[0]

    def scan(self, instant: datetime, until_s: int, max_steps: int | None
             ) -> tuple[datetime | None, bool]:
        """(first kept tick in (instant, until_s] or None, True if max_steps ran out first)."""
        t = self.base.next_after(instant)
        steps = 0
        while t is not None and to_unix_floor(t) <= until_s:
            resume = None
            for ex in self.exclusions:
                r = ex.resume_after(t)
                if r is not None and (resume is None or r > resume):
                    resume = r
            if resume is None:
                return t, False
            steps += 1
            if max_steps is not None and steps >= max_steps:
                return None, True
            t = self.base.next_after(resume)
        return None, False


def ticks_between(spec: Spec, after: datetime, until: datetime) -> Iterator[datetime]:
    """Ticks t with after < t <= until, strictly increasing. Lazy: stop whenever you like."""
    end = to_unix_floor(until, "until")
    tick = spec.next_after(after)
    while tick is not None and to_unix_floor(tick) <= end:
        yield tick
        tick = spec.next_after(tick)


def preview(spec: Spec, after: datetime, n: int) -> tuple[datetime, ...]:
    """The next `n` (1..1000) ticks strictly after `after`; fewer if the spec ends."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PREVIEW_MAX:
        raise InvalidArgument("n", f"must be an integer in 1..{PREVIEW_MAX}, got {n!r}")
    out: list[datetime] = []
    tick: datetime | None = after
    while tick is not None and len(out) < n:
        tick = spec.next_after(tick)
        if tick is not None:
            out.append(tick)
    return tuple(out)


def first_remaining(spec: ExcludingSpec, start: datetime, end: datetime | None,
                    field_name: str = "exclusions") -> datetime:
    """The first tick the exclusions leave in (start - 1 s, end], or in 10 years if no end.

    Bounded: at most CHECK_MAX_STEPS removed ticks are examined. Raises
    InvalidArgument(field_name) when nothing remains, naming `exclusions[i]` instead when
    exclusion i alone removes every tick, and refuses (conservatively, saying so) when the
    step budget runs out before a tick is found.
    """
    until_s = to_unix_floor(end, "end_at") if end is not None else (
        to_unix_floor(start, "start_at") + HORIZON_S)
    window = f"until {end.isoformat()}" if end is not None else "in the next 10 years"
    tick, exhausted = spec.scan(start - _SECOND, until_s, CHECK_MAX_STEPS)
    if tick is not None:
        return tick
    if exhausted:
        raise InvalidArgument(field_name, f"the exclusions remove the first {CHECK_MAX_STEPS} "
                                          f"ticks after {start.isoformat()}; refused as removing "
                                          f"every tick (simplify them)")
    for i, ex in enumerate(spec.exclusions):
        alone = ExcludingSpec(spec.base, (ex,)).scan(start - _SECOND, until_s, CHECK_MAX_STEPS)
        if alone == (None, False):
            field_name = f"{field_name}[{i}]"
            break
    raise InvalidArgument(field_name, f"the exclusions remove every tick {window} "
                                      f"(from {start.isoformat()}): it would never fire")
