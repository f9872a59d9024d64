"""Cron expressions: parsing, names, aliases, hashed `H` fields and the wall-clock matcher.

An expression compiles to a `CronSpec`: one bitmask per field (bit v set = value v matches)
plus the two flags the day rule needs. Matching is therefore a handful of shifts and ANDs, and
a `CronSpec` is a small hashable value that memo tables can key on. This module knows nothing
about time zones: it answers "which wall-clock times match", and `schedule` decides which
instants those wall times are.

Grammar (case-insensitive)::

    expr    := alias | [seconds] minute hour day-of-month month day-of-week
    field   := item ("," item)*
    item    := "*" ["/" step] | "?" ["/" step]            ("?" only in the two day fields)
             | value ["-" value] ["/" step]              ("a/n" means "a-max/n")
             | "H" ["(" value "-" value ")"] ["/" step]  (hashed, seeded by the schedule id)
             | "L" | "LW" | integer "W"                  (day-of-month only; see days.py)
             | value "L" | value "#" integer             (day-of-week only; see days.py)
    value   := integer | JAN..DEC (month) | SUN..SAT (day of week; 0 and 7 are Sunday)

Quartz's specials keep cronwheel's day-of-week numbering: `5L` is the last Friday and `1#2`
the second Monday (Quartz, counting 1 = Sunday, writes them `6L` and `2#2`).

Aliases (not hashed; they mean exactly the classic expressions): `@yearly`/`@annually`
= `0 0 1 1 *`, `@monthly` = `0 0 1 * *`, `@weekly` = `0 0 * * 0`, `@daily`/`@midnight`
= `0 0 * * *`, `@hourly` = `0 * * * *`.

Day rule (Vixie cron, as robfig/cron and so Kubernetes apply it): when both day-of-month and
day-of-week are restricted a day matches if EITHER matches; when one of them is unrestricted
only the other decides. A day field is unrestricted only if it is `*` or `?` (optionally
`/1`); `*/2` is a restriction (Vixie's "first character is `*`" quirk is not reproduced).

Hashed fields (Jenkins): `H` picks one value of the field, `H/n` every n-th value from a hashed
offset in [0, n), `H(a-b)` one value in a..b, `H(a-b)/n` every n-th from a hashed offset within
a..b. The hash is blake2b of (schedule id, field, item position), so it is stable across
processes and versions and different ids spread uniformly. In day-of-month a bare `H` ranges
over 1-28 so that it exists in every month. An expression using `H` needs a schedule id.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from typing import overload

from cronwheel.errors import InvalidArgument

from .days import MAX_DAYS, NTH_MAX, days_in_month, month_days

__all__ = ["CronSpec", "compile_spec", "next_wall", "ALIASES"]

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTHS = {n: i + 1 for i, n in enumerate(
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}
_DAYS = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    lo: int  # smallest value accepted in the text
    hi: int  # largest value accepted in the text (7 for day-of-week)
    star_hi: int  # what `*` and "a/n" run up to (6 for day-of-week, so 7 is not a duplicate)
    h_lo: int
    h_hi: int
    names: tuple[tuple[str, int], ...] = ()
    day_field: bool = False


_SECOND = _Field("second", 0, 59, 59, 0, 59)
_MINUTE = _Field("minute", 0, 59, 59, 0, 59)
_HOUR = _Field("hour", 0, 23, 23, 0, 23)
_DOM = _Field("day-of-month", 1, 31, 31, 1, 28, day_field=True)
_MONTH = _Field("month", 1, 12, 12, 1, 12, tuple(_MONTHS.items()))
_DOW = _Field("day-of-week", 0, 7, 6, 0, 6, tuple(_DAYS.items()), day_field=True)

_STAR_RE = re.compile(r"^[*?](?:/(\d+))?$")
_HASH_RE = re.compile(r"^H(?:\((\w+)-(\w+)\))?(?:/(\d+))?$")
_PLAIN_RE = re.compile(r"^(\w+)(?:-(\w+))?(?:/(\d+))?$")
_MISPLACED_RE = re.compile(r"^(\w*L|\d+W|LW|\w+#\d*)$")
_DOM_SPECIAL_RE = re.compile(r"^(?:(L)|(LW)|(\d+)W)$")
_DOW_SPECIAL_RE = re.compile(r"^(?:(\w+?)L|(\w+)#(\d+))$")
_WHERE_SPECIALS = "L, LW and nW go in day-of-month, dL and d#k in day-of-week"

FULL_HOURS = (1 << 24) - 1


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A compiled expression: bit v of a mask is set when value v matches that field.

    Day-of-week uses 0 = Sunday .. 6 = Saturday. `hour_every` is true when every hour of the
    day matches (`*`, `0-23`, `*/1`): those schedules get the "every real hour" DST rule.
    Quartz's day specials (days.py): `dom_last` (L), `dom_last_weekday` (LW), `dom_weekday`
    (bit n: nW), `dow_last` (bit d: dL), `dow_nth` (bit 8d + k: d#k); `special` is true when
    any is set, and only then does the day search go through `days.month_days`.
    Immutable and hashable; safe to share between threads and tasks.
    """

    seconds: int
    minutes: int
    hours: int
    doms: int
    months: int
    dows: int
    dom_star: bool
    dow_star: bool
    hour_every: bool
    dom_last: bool = False
    dom_last_weekday: bool = False
    dom_weekday: int = 0
    dow_last: int = 0
    dow_nth: int = 0
    special: bool = False

    def day_matches(self, y: int, mo: int, d: int) -> bool:
        if self.special:
            return bool((month_days(self, y, mo) >> d) & 1)
        dom_ok = (self.doms >> d) & 1
        dow_ok = (self.dows >> ((date(y, mo, d).weekday() + 1) % 7)) & 1
        if self.dom_star or self.dow_star:
            return bool(dom_ok and dow_ok)
        return bool(dom_ok or dow_ok)


# A field before `H` is resolved: the mask of its plain items and its hashed items
# (lo, hi, step, position), step 0 meaning "one value", and its day specials: (L, LW, nW mask)
# in day-of-month, (dL mask, d#k mask, 0) in day-of-week, zeros elsewhere.
_HItem = tuple[int, int, int, int]
_Specials = tuple[int, int, int]
_NO_SPECIALS: _Specials = (0, 0, 0)
# mask, hashed items, unrestricted, specials
_FieldTemplate = tuple[int, tuple[_HItem, ...], bool, _Specials]
_Template = tuple[_FieldTemplate, ...]


def _bad(message: str) -> InvalidArgument:
    return InvalidArgument("cron", message)


def _value(f: _Field, token: str, text: str) -> int:
    if token.isdigit():
        v = int(token)
    else:
        v = dict(f.names).get(token, -1)
        if v < 0 and _MISPLACED_RE.match(token):
            raise _bad(f"{f.name} field {text!r}: {token!r} is not allowed here "
                       f"({_WHERE_SPECIALS})")
        if v < 0:
            kinds = " or a name (JAN-DEC)" if f.name == "month" else (
                " or a name (SUN-SAT)" if f.name == "day-of-week" else "")
            raise _bad(f"{f.name} field {text!r}: {token!r} is not a number{kinds}")
    if not f.lo <= v <= f.hi:
        raise _bad(f"{f.name} field {text!r}: value {v} is out of range {f.lo}-{f.hi}")
    return v


def _step(f: _Field, token: str | None, text: str) -> int:
    if token is None:
        return 1
    step = int(token)
    width = f.star_hi - f.lo + 1
    if not 1 <= step <= width:
        raise _bad(f"{f.name} field {text!r}: step {step} must be in 1-{width}")
    return step


def _mask(f: _Field, lo: int, hi: int, step: int) -> int:
    m = 0
    for v in range(lo, hi + 1, step):
        m |= 1 << (0 if f.name == "day-of-week" and v == 7 else v)
    return m


def _special(f: _Field, item: str, text: str) -> _Specials | None:
    """The specials of one day-field item (L, LW, nW; dL, d#k), or None if it is not one."""
    if f is _DOM and (m := _DOM_SPECIAL_RE.match(item)):
        if m.group(3) is None:
            return (1, 0, 0) if m.group(1) else (0, 1, 0)
        return 0, 0, 1 << _value(f, m.group(3), text)
    if f is _DOW and (m := _DOW_SPECIAL_RE.match(item)):
        v = _value(f, m.group(1) or m.group(2), text) % 7
        if m.group(1) is not None:
            return 1 << v, 0, 0
        k = int(m.group(3))
        if not 1 <= k <= NTH_MAX:
            raise _bad(f"{f.name} field {text!r}: in {item!r} the occurrence {k} must be "
                       f"in 1-{NTH_MAX}")
        return 0, 1 << (v * 8 + k), 0
    return None


def _parse_field(f: _Field, text: str) -> _FieldTemplate:
    if text in ("*", "?", "*/1", "?/1"):
        if text.startswith("?") and not f.day_field:
            raise _bad(f"{f.name} field {text!r}: '?' is only allowed in the day fields")
        return _mask(f, f.lo, f.star_hi, 1), (), f.day_field, _NO_SPECIALS
    mask = 0
    hashed: list[_HItem] = []
    specials = _NO_SPECIALS
    for pos, item in enumerate(text.split(",")):
        if not item:
            raise _bad(f"{f.name} field {text!r}: empty list item")
        if (sp := _special(f, item, text)) is not None:
            specials = (specials[0] | sp[0], specials[1] | sp[1], specials[2] | sp[2])
        elif m := _STAR_RE.match(item):
            if item[0] == "?" and not f.day_field:
                raise _bad(f"{f.name} field {text!r}: '?' is only allowed in the day fields")
            mask |= _mask(f, f.lo, f.star_hi, _step(f, m.group(1), text))
        elif m := _HASH_RE.match(item):
            lo, hi = f.h_lo, f.h_hi
            if m.group(1) is not None:
                lo, hi = _value(f, m.group(1), text), _value(f, m.group(2), text)
                if lo > hi:
                    raise _bad(f"{f.name} field {text!r}: range H({lo}-{hi}) is reversed")
            step = 0 if m.group(3) is None else _step(f, m.group(3), text)
            hashed.append((lo, hi, step, pos))
        elif m := _PLAIN_RE.match(item):
            lo = _value(f, m.group(1), text)
            step = _step(f, m.group(3), text)
            if m.group(2) is not None:
                hi = _value(f, m.group(2), text)
            elif m.group(3) is not None:
                hi = f.star_hi
            else:
                hi = lo
            if lo > hi:
                raise _bad(f"{f.name} field {text!r}: range {lo}-{hi} is reversed "
                           f"(write it as two ranges)")
            mask |= _mask(f, lo, hi, step)
        else:
            hint = f" ({_WHERE_SPECIALS})" if any(c in item for c in "LW#") else ""
            raise _bad(f"{f.name} field {text!r}: cannot parse {item!r}{hint}")
    return mask, tuple(hashed), False, specials


@lru_cache(maxsize=4096)
def _parse_template(expression: str) -> _Template:
    text = expression.strip()
    if not text:
        raise _bad("empty expression")
    if text.startswith("@"):
        alias = ALIASES.get(text.lower())
        if alias is None:
            raise _bad(f"unknown alias {text!r}; use one of {', '.join(sorted(ALIASES))}")
        text = alias
    parts = text.upper().split()
    if len(parts) == 5:
        parts.insert(0, "0")
    elif len(parts) != 6:
        raise _bad(f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 with "
                   f"a leading seconds field, got {len(parts)} in {expression!r}")
    fields = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)
    return tuple(_parse_field(f, p) for f, p in zip(fields, parts, strict=True))


def _seed(schedule_id: str, field: str, pos: int) -> int:
    digest = hashlib.blake2b(f"{schedule_id}\x1f{field}\x1f{pos}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big")


def _resolve(f: _Field, ft: _FieldTemplate, schedule_id: str) -> int:
    mask, hashed, _, _ = ft
    for lo, hi, step, pos in hashed:
        seed = _seed(schedule_id, f.name, pos)
        width = hi - lo + 1
        if step == 0:
            mask |= _mask(f, lo + seed % width, lo + seed % width, 1)
        else:
            mask |= _mask(f, lo + seed % min(step, width), hi, step)
    return mask


def uses_hash(expression: str) -> bool:
    """True if the expression has `H` fields (its meaning then depends on the schedule id)."""
    return any(ft[1] for ft in _parse_template(expression))


def compile_spec(expression: str, schedule_id: str = "") -> CronSpec:
    """Parse `expression`, resolving `H` fields with `schedule_id`. Cached (bounded LRU).

    Expressions without `H` share one cache entry whatever the id.
    Raises InvalidArgument("cron", ...) naming the bad field and token.
    """
    if not isinstance(expression, str):
        raise _bad(f"expected a string, got {type(expression).__name__}")
    if uses_hash(expression):
        if not schedule_id:
            raise _bad("H (hashed) fields need a schedule id to seed them")
        return _compile(expression, schedule_id)
    return _compile(expression, "")


@lru_cache(maxsize=65536)
def _compile(expression: str, schedule_id: str) -> CronSpec:
    template = _parse_template(expression)
    fields = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)
    s, mi, h, dom, mo, dow = (_resolve(f, ft, schedule_id) for f, ft in zip(fields, template,
                                                                          strict=True))
    (last, last_wd, w_days), (d_last, d_nth, _) = template[3][3], template[5][3]
    spec = CronSpec(s, mi, h, dom, mo, dow, dom_star=template[3][2], dow_star=template[5][2],
                    hour_every=h == FULL_HOURS, dom_last=bool(last),
                    dom_last_weekday=bool(last_wd), dom_weekday=w_days, dow_last=d_last,
                    dow_nth=d_nth, special=bool(last or last_wd or w_days or d_last or d_nth))
    _check_satisfiable(spec, expression)
    return spec


_NTH_BELOW_5 = sum(((1 << NTH_MAX) - 2) << (8 * d) for d in range(7))  # every d#k with k < 5


def _check_satisfiable(spec: CronSpec, expression: str) -> None:
    """Refuse a spec that never fires, or (d#5 in February only) fires once in 28 years.

    What passes fires within 13 years of any instant, the bound `next_wall` searches.
    """
    months = [m for m in range(1, 13) if (spec.months >> m) & 1]
    dom_ok = spec.dom_last or spec.dom_last_weekday or any(
        (spec.doms | spec.dom_weekday) & ((1 << (MAX_DAYS[m] + 1)) - 1) for m in months)
    dow_ok = bool(spec.dows or spec.dow_last or spec.dow_nth & _NTH_BELOW_5
                  or (spec.dow_nth and months != [2]))
    if spec.dow_star and not dom_ok:
        raise _bad(f"day-of-month and month never coincide in {expression!r} "
                   f"(e.g. 30 FEB): it would never fire")
    if spec.dom_star and not dow_ok or not (spec.dom_star or spec.dow_star or dom_ok or dow_ok):
        raise _bad(f"day-of-week and month in {expression!r}: a fifth weekday of February "
                   f"happens once in 28 years; refused as never firing")


def _next_bit(mask: int, v: int) -> int:
    """Smallest set bit >= v, or -1."""
    m = mask >> v
    if not m:
        return -1
    return v + (m & -m).bit_length() - 1


# Far enough for any satisfiable spec (29 FEB can be 8 years away: 2096 -> 2104).
_MAX_YEARS_AHEAD = 12

WallTime = tuple[int, int, int, int, int, int]


Day = tuple[int, int, int]


@overload
def next_wall(spec: CronSpec, y: int, mo: int, d: int, h: int, mi: int, s: int,
              until_day: None = None) -> WallTime: ...
@overload
def next_wall(spec: CronSpec, y: int, mo: int, d: int, h: int, mi: int, s: int,
              until_day: Day) -> WallTime | None: ...
def next_wall(spec: CronSpec, y: int, mo: int, d: int, h: int, mi: int, s: int,
              until_day: Day | None = None) -> WallTime | None:
    """The first wall-clock time >= (y, mo, d, h, mi, s) that matches `spec`.

    Pure calendar arithmetic, no zone. Each step either returns or moves the cursor forward
    to the next candidate of the coarsest failing field, so the loop is short.
    Raises OverflowError if nothing matches within 12 years (impossible for a compiled spec
    unless the calendar ends first).

    With `until_day`, gives up (None) once the search has moved past that day. A result is
    never wrong: it may lie past `until_day`, and None means no match on or before that day.
    """
    limit = y + _MAX_YEARS_AHEAD
    while True:
        if y > limit or y > 9999:
            raise OverflowError("no matching time within the supported calendar range")
        if until_day is not None and (y, mo, d) > until_day:
            return None
        nm = _next_bit(spec.months, mo)
        if nm < 0:
            y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
            continue
        if nm != mo:
            mo, d, h, mi, s = nm, 1, 0, 0, 0
        dim = last = days_in_month(y, mo)
        if until_day is not None and (y, mo) >= until_day[:2]:
            if (y, mo, d) > until_day:
                return None
            last = until_day[2]  # the day walk stops at the limit too
        if spec.special:
            nd = _next_bit(month_days(spec, y, mo), d)
            if nd < 0:
                d = dim + 1
            elif nd != d:
                d, h, mi, s = nd, 0, 0, 0
        while d <= last and not spec.day_matches(y, mo, d):
            d, h, mi, s = d + 1, 0, 0, 0
        if d > last:
            if last < dim:
                return None
            mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
            continue
        nh = _next_bit(spec.hours, h)
        if nh < 0:
            d, h, mi, s = d + 1, 0, 0, 0
            continue
        if nh != h:
            h, mi, s = nh, 0, 0
        nmi = _next_bit(spec.minutes, mi)
        if nmi < 0:
            h, mi, s = h + 1, 0, 0
            continue
        if nmi != mi:
            mi, s = nmi, 0
        ns = _next_bit(spec.seconds, s)
        if ns < 0:
            mi, s = mi + 1, 0
            continue
        return y, mo, d, h, mi, ns
