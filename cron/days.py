"""Quartz's day specials: which days of a month `L`, `LW`, `nW`, `nL` and `n#k` denote.

Meanings (Quartz's, in cronwheel's day-of-week numbering 0 = Sunday .. 6 = Saturday, 7 also
Sunday; Quartz itself counts 1 = Sunday, so Quartz's `6L` is cronwheel's `5L`)::

    day-of-month  L     the last day of the month
                  LW    the last weekday (Monday-Friday) of the month
                  nW    the weekday nearest to day n, within the same month: a Saturday moves
                        to the Friday before, a Sunday to the Monday after, except that 1W on a
                        Saturday is Monday the 3rd and nW on a Sunday that ends the month is
                        the Friday before. No run in a month that has no day n (31W in April).
    day-of-week   dL    the last weekday d of the month (5L = the last Friday)
                  d#k   the k-th weekday d of the month, k in 1..5 (1#2 = the second Monday);
                        no run in a month that has no k-th d.

They are list items like any other (`L,15`, `1#1,1#3`), but not range ends nor stepped. They
make their field restricted, so Vixie's day rule applies unchanged: with both day fields
restricted a day matches if either does.

Pure and cached: `month_days(spec, y, mo)` is the bitmask of the days of (y, mo) that the
spec's two day fields select, memoised on (spec, y, mo), so the wall-clock search looks a
month up once instead of testing each day.
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .expr import CronSpec

__all__ = ["days_in_month", "weekday", "nearest_weekday", "month_days"]

# Longest each month can be (February: 29, leap years exist).
MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
NTH_MAX = 5  # d#k: k in 1..5


def days_in_month(y: int, mo: int) -> int:
    if mo == 2:
        return 29 if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 28
    return MAX_DAYS[mo]


def weekday(y: int, mo: int, d: int) -> int:
    """Day of week, 0 = Sunday .. 6 = Saturday (cron's numbering)."""
    return (date(y, mo, d).weekday() + 1) % 7


def nearest_weekday(y: int, mo: int, n: int) -> int | None:
    """The day `nW` selects in (y, mo), or None when the month has no day n."""
    dim = days_in_month(y, mo)
    if n > dim:
        return None
    wd = weekday(y, mo, n)
    if wd == 6:  # Saturday: the Friday before, or Monday the 3rd when n is the 1st
        return n - 1 if n > 1 else n + 2
    if wd == 0:  # Sunday: the Monday after, or the Friday before when n ends the month
        return n + 1 if n < dim else n - 2
    return n


def _dom_special_days(spec: CronSpec, y: int, mo: int, dim: int) -> int:
    mask = 0
    if spec.dom_last:
        mask |= 1 << dim
    if spec.dom_last_weekday:
        wd = weekday(y, mo, dim)
        mask |= 1 << (dim - 1 if wd == 6 else dim - 2 if wd == 0 else dim)
    w = spec.dom_weekday
    while w:
        n = (w & -w).bit_length() - 1
        w &= w - 1
        day = nearest_weekday(y, mo, n)
        if day is not None:
            mask |= 1 << day
    return mask


def _dow_days(spec: CronSpec, y: int, mo: int, dim: int) -> int:
    """Days selected by the day-of-week field: plain weekdays, dL and d#k."""
    first = weekday(y, mo, 1)
    mask = 0
    for wd in range(7):
        d0 = 1 + (wd - first) % 7  # the first day of the month that is a `wd`
        if (spec.dows >> wd) & 1:
            for d in range(d0, dim + 1, 7):
                mask |= 1 << d
        if (spec.dow_last >> wd) & 1:
            mask |= 1 << (d0 + 7 * ((dim - d0) // 7))
        for k in range(1, NTH_MAX + 1):
            if (spec.dow_nth >> (wd * 8 + k)) & 1 and d0 + 7 * (k - 1) <= dim:
                mask |= 1 << (d0 + 7 * (k - 1))
    return mask


@lru_cache(maxsize=1 << 14)
def month_days(spec: CronSpec, y: int, mo: int) -> int:
    """Bitmask (bit d = day d) of the days of (y, mo) the spec's day fields select."""
    dim = days_in_month(y, mo)
    in_month = ((1 << (dim + 1)) - 1) & ~1
    dom = (spec.doms | _dom_special_days(spec, y, mo, dim)) & in_month
    dow = _dow_days(spec, y, mo, dim)
    if spec.dom_star or spec.dow_star:
        return dom & dow
    return dom | dow
