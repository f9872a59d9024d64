"""The API's one call to validate a schedule's timing fields.

Every error is InvalidArgument naming the field the API exposes: `cron`, `timezone`,
`dst_policy` (unknown key or wrong type), `dst_policy.gap`, `dst_policy.repeated`,
`misfire_policy`, `max_catch_up`, `jitter_s`. Fields are checked in that order, so the first
bad one is reported.
"""

from __future__ import annotations

from collections.abc import Mapping

from cronwheel.errors import InvalidArgument

from .expr import compile_spec
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
)
from .zones import load_zone

__all__ = ["parse_dst_policy", "validate_schedule_spec"]


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
