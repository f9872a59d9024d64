"""Interval specs: `@every 90s`, or `every: 1h30m` with an optional phase, in absolute time.

An interval spec fires at the instants anchor + phase + k * every for every integer k: a grid
of whole UTC seconds fixed by three numbers, with no zone and no wall clock. A DST change moves
none of its instants (`@every 24h` drifts by an hour against local midnight twice a year); the
anchor is given by the caller (the schedule's start, or its creation time), so every node and
every restart computes the same instants. Where the grid starts being used (a start window)
is the caller's business: `next_after` answers for any instant, before the anchor too.

Durations: one or more of `<n>d`, `<n>h`, `<n>m`, `<n>s` in that order (`90s`, `1h30m`,
`2d12h`), whole seconds only. `every` is 1 s .. 366 days; `phase` is 0 <= phase < every.

Pure and O(1): next_after is two integer operations, cheaper than a memo lookup, so it is not
memoised. Frozen and hashable; safe to share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from cronwheel.errors import InvalidArgument

from .schedule import to_unix_floor

__all__ = ["IntervalSpec", "parse_duration_s", "parse_every", "MIN_EVERY_S", "MAX_EVERY_S"]

MIN_EVERY_S = 1
MAX_EVERY_S = 366 * 86400
_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_UNITS_S = (86400, 3600, 60, 1)


def parse_duration_s(text: object, field: str) -> int:
    """Whole seconds of a duration such as `1h30m`; InvalidArgument(field, ...) if malformed."""
    if not isinstance(text, str):
        raise InvalidArgument(field, f"expected a duration such as '90s' or '1h30m', "
                                     f"got {type(text).__name__}")
    m = _DURATION_RE.match(text.strip().lower())
    if not text.strip() or m is None:
        raise InvalidArgument(field, f"{text!r} is not a duration: write whole units in the "
                                     f"order d, h, m, s, such as '90s', '1h30m' or '2d'")
    return sum(int(g) * unit for g, unit in zip(m.groups(), _UNITS_S, strict=True) if g)


@dataclass(frozen=True, slots=True)
class IntervalSpec:
    """Fires at anchor_s + phase_s + k * every_s (Unix seconds) for every integer k."""

    every_s: int
    anchor_s: int
    phase_s: int = 0

    def next_after(self, instant: datetime) -> datetime:
        """The first instant of the grid strictly after `instant` (aware UTC datetime)."""
        base = self.anchor_s + self.phase_s
        t = to_unix_floor(instant)
        return datetime.fromtimestamp(base + ((t - base) // self.every_s + 1) * self.every_s,
                                      UTC)


def parse_every(every: object, anchor: datetime, phase: object = None, *,
                field: str = "every", phase_field: str = "phase") -> IntervalSpec:
    """An IntervalSpec from `every` ('90s', '1h30m'), an aware anchor and an optional phase.

    Errors name `field` (1 s .. 366 days, so `0s` is refused) or `phase_field` (< every).
    A fractional anchor is floored to its second.
    """
    every_s = parse_duration_s(every, field)
    if not MIN_EVERY_S <= every_s <= MAX_EVERY_S:
        raise InvalidArgument(field, f"{every!r} is out of range: an interval is "
                                     f"{MIN_EVERY_S} s .. 366 days")
    phase_s = 0 if phase is None or phase == "" else parse_duration_s(phase, phase_field)
    if phase_s >= every_s:
        raise InvalidArgument(phase_field, f"{phase!r} must be shorter than every ({every!r})")
    return IntervalSpec(every_s, to_unix_floor(anchor, "anchor"), phase_s)


def parse_every_alias(text: str, anchor: datetime, field: str = "cron") -> IntervalSpec | None:
    """`@every <duration>` as an IntervalSpec (errors name `field`); None for other text."""
    parts = text.strip().split()
    if not parts or parts[0].lower() != "@every":
        return None
    if len(parts) != 2:
        raise InvalidArgument(field, f"{text!r}: write '@every <duration>', such as "
                                     f"'@every 90s' or '@every 1h30m'")
    return parse_every(parts[1], anchor, field=field)
