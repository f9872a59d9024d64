"""The API's one call to validate a schedule's timing fields.

Every error is InvalidArgument naming the field the API exposes: `cron`, `timezone`,
`dst_policy` (unknown key or wrong type), `dst_policy.gap`, `dst_policy.repeated`,
`misfire_policy`, `max_catch_up`, `jitter_s`. Fields are checked in that order, so the first
bad one is reported.

`validate_timing` (issue 54, not wired into the API yet) builds one `Spec` from several specs
(cron text, `@every 90s`, `{'every': '1h30m', 'phase': '15m'}`) and exclusions (a spec, or
`{'dates': [...]}`), naming `specs[i]`, `specs[i].every`, `exclusions[i]`,
`exclusions[i].dates[j]`, `end_at`; `parse_spec` is the one-spec door (field `cron`, `every`).
This module is over 200 lines because it is the one place every timing field is checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime

from cronwheel.errors import InvalidArgument

from .combine import DateExclusion, ExcludingSpec, Exclusion, Spec, SpecExclusion, UnionSpec, first_remaining
from .expr import compile_spec
from .interval import parse_every, parse_every_alias
from .policy import (
    MisfirePolicy,
    parse_misfire_policy,
    validate_jitter_s,
    validate_max_catch_up,
)
from .schedule import (
    CronSchedule,
    DstPolicy,
    GapPolicy,
    RepeatedPolicy,
    parse_schedule,
    to_unix_floor,
)
from .zones import load_zone

__all__ = ["parse_dst_policy", "parse_spec", "validate_schedule_spec", "validate_timing"]


def _axis(enum: type[GapPolicy] | type[RepeatedPolicy], field: str, value: object
          ) -> str | None:
    if value is None or value == "":
        return None  # the default rule
    if isinstance(value, enum):
        return str(value.value)
    if isinstance(value, str) and value.strip().lower() in {m.value for m in enum}:
        return value.strip().lower()
    choices = ", ".join(m.value for m in enum)
    raise InvalidArgument(field, f"unknown value {value!r}; use one of {choices} "
                                 f"(or leave it unset for the default rule)")


def parse_dst_policy(value: DstPolicy | Mapping[str, object] | None) -> DstPolicy:
    """A DstPolicy from None, a DstPolicy, or a mapping {"gap": ..., "repeated": ...}."""
    if value is None:
        return DstPolicy()
    gap: object
    repeated: object
    if isinstance(value, DstPolicy):
        gap, repeated = value.gap, value.repeated
    elif isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in ("gap", "repeated"))
        if unknown:
            raise InvalidArgument("dst_policy", f"unknown key(s) {', '.join(unknown)}; "
                                                f"expected 'gap' and/or 'repeated'")
        gap, repeated = value.get("gap"), value.get("repeated")
    else:
        raise InvalidArgument("dst_policy", f"expected a mapping with 'gap' and/or 'repeated', "
                                            f"got {type(value).__name__}")
    g = _axis(GapPolicy, "dst_policy.gap", gap)
    r = _axis(RepeatedPolicy, "dst_policy.repeated", repeated)
    return DstPolicy(gap=GapPolicy(g) if g else None, repeated=RepeatedPolicy(r) if r else None)


def validate_schedule_spec(cron: str, timezone: str,
                           dst_policy: DstPolicy | Mapping[str, object] | None,
                           misfire_policy: MisfirePolicy | str | None,
                           max_catch_up: int | None, jitter_s: float,
                           schedule_id: str) -> CronSchedule:
    """Validate every timing field of a schedule and return its CronSchedule.

    `misfire_policy` is required. `max_catch_up` (1..1000) is required for catch_up and, when
    given, checked for every policy. `jitter_s` is 0..MAX_JITTER_S (1 h). `schedule_id` seeds `H` fields
    (required when the expression has any). The normalised policy values are available from
    `parse_misfire_policy`, `validate_max_catch_up` and `validate_jitter_s`.
    """
    if not isinstance(schedule_id, str):
        raise InvalidArgument("schedule_id", f"must be a string, got {type(schedule_id).__name__}")
    compile_spec(cron, schedule_id)  # reports `cron` before `timezone`
    load_zone(timezone)
    policy = parse_dst_policy(dst_policy)
    schedule = parse_schedule(cron, timezone, dst_policy=policy, schedule_id=schedule_id)
    misfire = parse_misfire_policy(misfire_policy)
    if max_catch_up is not None or misfire is MisfirePolicy.CATCH_UP:
        if max_catch_up is None:
            raise InvalidArgument("max_catch_up", "required for misfire_policy catch_up "
                                                  "(1..1000)")
        validate_max_catch_up(max_catch_up)
    validate_jitter_s(jitter_s)
    return schedule


# --- several specs, intervals and exclusions (issue 54) ------------------------------------------

MAX_SPECS = 20
MAX_EXCLUSIONS = 100
MAX_DATES = 1000
SpecInput = str | Mapping[str, object]


def _renamed(exc: InvalidArgument, field: str) -> InvalidArgument:
    """The same complaint about `cron` reported under the caller's field name."""
    if exc.field != "cron" or field == "cron":
        return exc
    return InvalidArgument(field, str(exc).removeprefix("cron: "))


def parse_spec(item: object, *, field: str, timezone: str, dst_policy: DstPolicy,
               schedule_id: str, anchor: datetime) -> Spec:
    """One spec: cron text, '@every <duration>', {'cron': text} or {'every': d, 'phase': d}.

    Errors name `field` (or `field.every`, `field.phase` in the mapping form; `every` and
    `phase` when `field` is 'cron', the single-spec API). Intervals are anchored at `anchor`.
    """
    if isinstance(item, Mapping):
        keys = set(item)
        if keys == {"cron"}:
            item = item["cron"]
        elif "every" in keys and keys <= {"every", "phase"}:
            prefix = "" if field == "cron" else f"{field}."
            return parse_every(item["every"], anchor, item.get("phase"),
                               field=f"{prefix}every", phase_field=f"{prefix}phase")
        else:
            raise InvalidArgument(field, f"expected {{'cron': ...}} or {{'every': ..., "
                                         f"'phase': ...}}, got keys {sorted(map(str, keys))}")
    if not isinstance(item, str):
        raise InvalidArgument(field, f"expected cron text, '@every <duration>' or a mapping, "
                                     f"got {type(item).__name__}")
    try:
        interval = parse_every_alias(item, anchor, field)
        if interval is not None:
            return interval
        return parse_schedule(item, timezone, dst_policy=dst_policy, schedule_id=schedule_id)
    except InvalidArgument as exc:
        raise _renamed(exc, field) from None


def _parse_dates(value: object, field: str) -> frozenset[date]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise InvalidArgument(field, "expected a non-empty list of dates ('2026-12-25')")
    if len(value) > MAX_DATES:
        raise InvalidArgument(field, f"at most {MAX_DATES} dates, got {len(value)}")
    out: set[date] = set()
    for j, d in enumerate(value):
        if isinstance(d, date) and not isinstance(d, datetime):
            out.add(d)
            continue
        try:
            out.add(date.fromisoformat(d))
        except (TypeError, ValueError):
            raise InvalidArgument(f"{field}[{j}]", f"{d!r} is not a date (YYYY-MM-DD)") from None
    return frozenset(out)


def _parse_exclusion(item: object, field: str, timezone: str, dst_policy: DstPolicy,
                     schedule_id: str, anchor: datetime) -> Exclusion:
    if isinstance(item, Mapping) and set(item) == {"dates"}:
        return DateExclusion(_parse_dates(item["dates"], f"{field}.dates"), timezone,
                             load_zone(timezone))
    return SpecExclusion(parse_spec(item, field=field, timezone=timezone, dst_policy=dst_policy,
                                    schedule_id=schedule_id, anchor=anchor))


def _items(value: object, field: str, limit: int, required: bool) -> Sequence[object]:
    if value is None and not required:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidArgument(field, f"expected a list, got {type(value).__name__}")
    if required and not value:
        raise InvalidArgument(field, "at least one spec is required")
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} items, got {len(value)}")
    return value


def validate_timing(specs: Sequence[SpecInput], exclusions: Sequence[object] | None = None, *,
                    timezone: str, anchor: datetime,
                    dst_policy: DstPolicy | Mapping[str, object] | None = None,
                    schedule_id: str = "", start: datetime | None = None,
                    end: datetime | None = None) -> Spec:
    """Several specs and exclusions as one Spec; errors name `specs[i]`, `exclusions[i]`, ...

    A single spec without exclusions is returned as itself (a CronSchedule keeps its memo path
    unchanged). Intervals are anchored at `anchor` (the schedule's start, or its creation
    time). With exclusions, refuses (naming `exclusions`, or `exclusions[i]` when that one
    alone is enough) a combination that leaves no tick in [start, end], or in the 10 years
    from start (default: anchor) when there is no end; `end_at` must be after `start_at`.
    """
    zone_name = timezone
    load_zone(zone_name)
    policy = parse_dst_policy(dst_policy)
    if start is not None and end is not None and to_unix_floor(end, "end_at") <= to_unix_floor(
            start, "start_at"):
        raise InvalidArgument("end_at", f"{end.isoformat()} is not after start_at "
                                        f"{start.isoformat()}")
    members = tuple(parse_spec(item, field=f"specs[{i}]", timezone=zone_name, dst_policy=policy,
                               schedule_id=schedule_id, anchor=anchor)
                    for i, item in enumerate(_items(specs, "specs", MAX_SPECS, True)))
    base: Spec = members[0] if len(members) == 1 else UnionSpec(members)
    removed = tuple(_parse_exclusion(item, f"exclusions[{i}]", zone_name, policy, schedule_id,
                                     anchor)
                    for i, item in enumerate(_items(exclusions, "exclusions", MAX_EXCLUSIONS,
                                                    False)))
    if not removed:
        return base
    spec = ExcludingSpec(base, removed)
    first_remaining(spec, start or anchor, end)
    return spec
