"""Time zones for cron: loading a required IANA zone, offsets, and finding transitions.

Times here are integers: an instant is Unix seconds (UTC); a wall time is "local seconds",
the Unix seconds a naive local wall clock reading would have if it were UTC. An instant i with
UTC offset o shows wall time i + o. The zone is always an explicit argument; the host's zone is
never consulted (the key `localtime` is refused).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronwheel.errors import InvalidArgument

__all__ = [
    "load_zone",
    "offset_at",
    "wall_offsets",
    "first_change_after",
    "wall_to_fields",
    "fields_to_wall",
]

EPOCH_ORDINAL = date(1970, 1, 1).toordinal()

# The largest backward change of a UTC offset in tzdata since 1970 is 3 hours
# (Antarctica/Casey). Backward changes are searched this far ahead of an instant.
MAX_BACKWARD_SHIFT_S = 3 * 3600


def load_zone(timezone: object) -> ZoneInfo:
    """The IANA zone named `timezone`; InvalidArgument("timezone", ...) if it is not one."""
    if not isinstance(timezone, str) or not timezone.strip():
        raise InvalidArgument("timezone", "required: an IANA time zone name such as "
                                          "'Europe/London' (the host's zone is never used)")
    if timezone.strip().lower() in ("localtime", "local"):
        raise InvalidArgument("timezone", f"{timezone!r} names the host's zone; give an IANA "
                                          f"name such as 'Europe/London'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidArgument("timezone", f"unknown time zone {timezone!r}") from exc


def offset_at(zone: ZoneInfo, ts: int) -> int:
    """UTC offset in seconds in force at instant `ts`."""
    off = datetime.fromtimestamp(ts, zone).utcoffset()
    assert off is not None
    return off.days * 86400 + off.seconds


def wall_offsets(zone: ZoneInfo, y: int, mo: int, d: int, h: int, mi: int, s: int
                 ) -> tuple[int, int]:
    """(offset with fold=0, offset with fold=1) for a wall time, per PEP 495.

    Equal: the wall time exists once. fold0 > fold1: it occurs twice (clocks went back),
    first at wall - fold0, again at wall - fold1. fold0 < fold1: it does not exist (clocks
    jumped forward over it); fold0 is the offset before the jump, fold1 the one after.
    """
    dt = datetime(y, mo, d, h, mi, s, tzinfo=zone)
    o0 = dt.utcoffset()
    o1 = dt.replace(fold=1).utcoffset()
    assert o0 is not None and o1 is not None
    return o0.days * 86400 + o0.seconds, o1.days * 86400 + o1.seconds


@lru_cache(maxsize=4096)
def first_change_after(zone: ZoneInfo, lo: int, hi: int) -> int:
    """The first instant in (lo, hi] whose offset differs from the offset at `lo`.

    Precondition: offset_at(hi) != offset_at(lo). Binary search: about log2(hi - lo) offset
    lookups (13 for an hour). Assumes a single change in the interval, which holds for every
    interval this package asks about (a few hours around one transition).
    """
    base = offset_at(zone, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset_at(zone, mid) == base:
            lo = mid
        else:
            hi = mid
    return hi


def wall_to_fields(wall: int) -> tuple[int, int, int, int, int, int]:
    days, rem = divmod(wall, 86400)
    day = date.fromordinal(days + EPOCH_ORDINAL)
    h, rem = divmod(rem, 3600)
    mi, s = divmod(rem, 60)
    return day.year, day.month, day.day, h, mi, s


def fields_to_wall(y: int, mo: int, d: int, h: int, mi: int, s: int) -> int:
    return (date(y, mo, d).toordinal() - EPOCH_ORDINAL) * 86400 + h * 3600 + mi * 60 + s


def utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)
