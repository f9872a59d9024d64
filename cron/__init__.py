"""Cron semantics: parsing, zones, DST, hashed `H` fields, jitter, misfire and overlap decisions.

Pure: no asyncio, no I/O, no clock reads. Every function takes its instants as arguments and
every value is immutable, so everything here is safe to call from any task or thread. The API
validates with `validate_schedule_spec`; the firing path calls `CronSchedule.next_after`,
`decide_misfire`, `last_overdue_tick`, `decide_overlap_step` and `jitter_offset_s`.

Modules::

    expr.py      expression -> CronSpec (a bitmask per field); aliases; H; wall-clock matcher
    days.py      Quartz's day fields L, LW, nW, dL, d#k -> the days of a month (memoised)
    zones.py     required IANA zone; offsets; transition search (no host zone, ever)
    schedule.py  CronSchedule: next_after / ticks_between / preview with the DST rules; memo
    interval.py  IntervalSpec: `@every 90s`, `every: 1h30m` + phase, in absolute time
    combine.py   the Spec protocol; UnionSpec; ExcludingSpec (a spec, or dates in a zone)
    policy.py    misfire, overlap, jitter decisions (frozen records)
    validate.py  validate_schedule_spec (one cron: the API today); validate_timing (several
                 specs and exclusions, issue 54, not wired yet); errors name the field

Every kind of timing is a `Spec`: `next_after(instant) -> datetime | None`, the first tick
strictly after the instant, None when there is none (`combine.py`). `CronSchedule`,
`IntervalSpec`, `UnionSpec` and `ExcludingSpec` all are one, so the firing path can hold one
value per schedule whatever it says.

Contract (each rule is a table test named after it, and a hypothesis property against a
brute-force reference in Europe/London, America/New_York, Australia/Lord_Howe, Asia/Kolkata):

- Ticks are whole UTC seconds. `next_after(t)` is the first tick strictly after t;
  `ticks_between(a, b)` yields the ticks a < tick <= b in increasing order; `preview(after, n)`
  the next n. Results move strictly forward, across every DST transition.
- A wall time that does not exist (spring forward) runs once at the jump, the first valid
  instant after the gap (02:30 -> 03:00 local in New York); several matching nonexistent times
  of one gap collapse into that one run, which also merges with a real match at the gap's end.
  `dst_policy.gap = skip` drops them instead.
- A wall time that occurs twice (fall back) runs once, at its first occurrence; override with
  `dst_policy.repeated = last | both`.
- A schedule whose hour field matches every hour fires at every wall time that really occurs,
  as often as it occurs: both passes of the repeated hour, nothing invented in the gap (its
  defaults are gap `skip`, repeated `both`). An explicit override on an axis wins, also here.
- Quartz's day fields keep the product's day-of-week numbering (0 = Sunday): `5L` is the
  last Friday, `1#2` the second Monday; `L` the last day, `LW` the last weekday, `15W` the
  weekday nearest the 15th within the month. They are restrictions, so the day rule and the
  DST rules above apply to them unchanged.
- An interval's ticks are anchor + phase + k*every in UTC seconds, whatever the zone; a
  union fires each distinct instant once; an exclusion removes the instants it shares (a
  spec) or whose local date it lists (dates).
- Jenkins `H` fields are seeded by blake2b(schedule id, field, position): stable across
  processes and releases, uniform across ids. Aliases (`@hourly`, ...) are not hashed.
- Misfire `catch_up` beyond `max_catch_up` replays none and alerts; `run_once` fires the latest
  missed tick; `skip` fires none. Work is bounded whatever the outage length.

Worked example (Europe/London, 2026; the clocks go forward at 01:00 UTC on 29 March and back at
01:00 UTC on 25 October)::

    expression        policy            fires (UTC)
    30 1 * * *        default           29 Mar 01:00 (01:30 does not exist -> 02:00 BST)
    30 1 * * *        gap=skip          nothing on 29 Mar
    30 1 * * *        default           25 Oct 00:30 (01:30 BST, first of the two 01:30s)
    30 1 * * *        repeated=last     25 Oct 01:30 (01:30 GMT)
    0 * * * *         default           25 Oct 00:00, 01:00, 02:00 (01:00 BST and GMT both)
    0 * * * *         repeated=first    25 Oct 00:00, 02:00

How it fails: bad input raises `InvalidArgument(field, reason)` naming `cron`, `timezone`,
`dst_policy.gap`, `dst_policy.repeated`, `misfire_policy`, `max_catch_up` or `jitter_s`
(and, through validate_timing, `every`, `phase`, `specs[i]`, `exclusions[i]`, `end_at`).
An expression that can never fire (30 FEB, 31W FEB) or fires once in 28 years (1#5 in FEB
only) is refused at parse time, so a CronSchedule's next_after always finds a tick
(OverflowError only past year 9999). Exclusions that leave no tick in the window, or in 10
years, are refused by a bounded check (`first_remaining`).

Performance: next-fire results are memoised in a bounded LRU keyed on the H-resolved spec, the
zone, the effective DST policy and the instant (`python -m bench.cron` prints the figures,
per kind too); parsing is cached separately. L/W/# specs share that memo; a union's later
cron members use a bounded search (`next_after_until`), memoised the same way; intervals are
arithmetic and need none.
"""

from __future__ import annotations

from .combine import (
    DateExclusion,
    ExcludingSpec,
    Exclusion,
    Spec,
    SpecExclusion,
    UnionSpec,
    first_remaining,
    preview,
    ticks_between,
)
from .expr import ALIASES, CronSpec, compile_spec, uses_hash
from .interval import MAX_EVERY_S, MIN_EVERY_S, IntervalSpec, parse_duration_s, parse_every
from .policy import (
    MAX_CATCH_UP_LIMIT,
    MAX_JITTER_S,
    MISFIRE_TRIGGER,
    MisfireDecision,
    MisfirePolicy,
    OverlapAction,
    OverlapDecision,
    OverlapPolicy,
    OverlapStep,
    Priority,
    decide_misfire,
    decide_overlap,
    decide_overlap_step,
    jitter_offset_s,
    last_overdue_tick,
    parse_misfire_policy,
    parse_overlap_policy,
    validate_jitter_s,
    validate_max_catch_up,
)
from .schedule import (
    PREVIEW_MAX,
    CronSchedule,
    DstPolicy,
    GapPolicy,
    RepeatedPolicy,
    parse_schedule,
)
from .validate import parse_dst_policy, parse_spec, validate_schedule_spec, validate_timing
from .zones import load_zone

__all__ = [
    "ALIASES",
    "MAX_CATCH_UP_LIMIT",
    "MAX_EVERY_S",
    "MAX_JITTER_S",
    "MISFIRE_TRIGGER",
    "MIN_EVERY_S",
    "PREVIEW_MAX",
    "CronSchedule",
    "CronSpec",
    "DateExclusion",
    "DstPolicy",
    "ExcludingSpec",
    "Exclusion",
    "IntervalSpec",
    "Spec",
    "SpecExclusion",
    "UnionSpec",
    "GapPolicy",
    "MisfireDecision",
    "MisfirePolicy",
    "OverlapAction",
    "OverlapDecision",
    "OverlapPolicy",
    "OverlapStep",
    "Priority",
    "RepeatedPolicy",
    "compile_spec",
    "decide_misfire",
    "decide_overlap",
    "decide_overlap_step",
    "first_remaining",
    "jitter_offset_s",
    "last_overdue_tick",
    "load_zone",
    "parse_dst_policy",
    "parse_duration_s",
    "parse_every",
    "parse_misfire_policy",
    "parse_overlap_policy",
    "parse_schedule",
    "parse_spec",
    "preview",
    "ticks_between",
    "uses_hash",
    "validate_jitter_s",
    "validate_max_catch_up",
    "validate_schedule_spec",
    "validate_timing",
]
