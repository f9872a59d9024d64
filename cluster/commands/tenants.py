"""What the tenant API asks of tenants and tokens: validation, pure (the servicer,
cluster/api/tenant_service.py, decodes the request and calls the storage port).

Every check raises `InvalidArgument("tenant.<field>", ...)` (the request's path) before anything
is stored. The limits are defined here once:

- max_concurrency 1..1,000,000 (default 1000); weight 1..1000 (default 1);
- rate_per_s: None (no rate limit) or 0.001..1,000,000 starts/s; burst: None (= rate_per_s,
  one second's worth) or 1..10,000,000, and only with a rate;
- max_schedules, max_executions_per_day: None (no quota) or >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from cronwheel import http_target
from cronwheel.cluster.commands.lanes import queue_name
from cronwheel.cluster.commands.values import text
from cronwheel.errors import InvalidArgument
from cronwheel.storage.tenants import TenantFields

DEFAULT_MAX_CONCURRENCY = 1000
DEFAULT_WEIGHT = 1
MAX_CONCURRENCY = 1_000_000
MAX_WEIGHT = 1000
RATE_RANGE = (0.001, 1_000_000.0)
BURST_RANGE = (1.0, 10_000_000.0)
# The fields UpdateTenant may name in its update_mask (the settable columns but the id).
SETTABLE = ("max_concurrency", "rate_per_s", "burst", "weight", "max_schedules", "max_executions_per_day",
            "egress_rules")
MAX_EGRESS_RULES = 100
PREFIX = "tenant"


def _int(name: str, value: int, lo: int, hi: int, prefix: str = PREFIX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidArgument(f"{prefix}.{name}", f"must be {lo}..{hi}, got {value!r}")
    return value


def _real(name: str, value: float | None, lo: float, hi: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise InvalidArgument(f"{PREFIX}.{name}", f"must be {lo:g}..{hi:g} (or unset: no limit), got {value!r}")
    return float(value)


def _quota(name: str, value: int | None) -> int | None:
    return None if value is None else _int(name, value, 1, 2**31 - 1)


def checked(f: TenantFields) -> TenantFields:
    """`f` validated as a whole (burst needs a rate), or InvalidArgument naming the field."""
    rate = _real("rate_per_s", f.rate_per_s, *RATE_RANGE)
    burst = _real("burst", f.burst, *BURST_RANGE)
    if burst is not None and rate is None:
        raise InvalidArgument(f"{PREFIX}.burst", "needs rate_per_s (a burst of no rate limit means nothing)")
    return TenantFields(
        id=text(f"{PREFIX}.id", f.id),
        max_concurrency=_int("max_concurrency", f.max_concurrency, 1, MAX_CONCURRENCY),
        rate_per_s=rate, burst=burst,
        weight=_int("weight", f.weight, 1, MAX_WEIGHT),
        max_schedules=_quota("max_schedules", f.max_schedules),
        max_executions_per_day=_quota("max_executions_per_day", f.max_executions_per_day),
        egress_rules=_rules(f.egress_rules))


def _rules(rules: tuple[str, ...] | list[str] | None) -> tuple[str, ...] | None:
    """A tenant's egress rules for HTTP targets (http_target.egress_rule each); none: None."""
    if not rules:
        return None
    if len(rules) > MAX_EGRESS_RULES:
        raise InvalidArgument(f"{PREFIX}.egress_rules", f"at most {MAX_EGRESS_RULES} rules, got {len(rules)}")
    return tuple(dict.fromkeys(http_target.egress_rule(r, f"{PREFIX}.egress_rules[{i}]") for i, r in enumerate(rules)))


def new_tenant(tenant_id: str, max_concurrency: int = 0, rate_per_s: float | None = None,
               burst: float | None = None, weight: int = 0, max_schedules: int | None = None,
               max_executions_per_day: int | None = None,
               egress_rules: tuple[str, ...] | list[str] | None = None) -> TenantFields:
    """A tenant to create: 0 for max_concurrency or weight means the default."""
    return checked(TenantFields(
        id=tenant_id, max_concurrency=max_concurrency or DEFAULT_MAX_CONCURRENCY, rate_per_s=rate_per_s,
        burst=burst, weight=weight or DEFAULT_WEIGHT, max_schedules=max_schedules,
        max_executions_per_day=max_executions_per_day, egress_rules=tuple(egress_rules or ()) or None))


def mask(paths: list[str]) -> list[str]:
    """The update_mask's paths, checked: at least one, each settable, none twice."""
    if not paths:
        raise InvalidArgument("update_mask", f"required: the fields to change, among {', '.join(SETTABLE)}")
    out: list[str] = []
    for p in paths:
        name = p.removeprefix(f"{PREFIX}.")
        if name not in SETTABLE:
            raise InvalidArgument("update_mask", f"unknown or read-only field {p!r}; settable: {', '.join(SETTABLE)}")
        if name in out:
            raise InvalidArgument("update_mask", f"{p!r} is named twice")
        out.append(name)
    return out


def merged(current: TenantFields, changes: Mapping[str, Any]) -> TenantFields:
    """The tenant after `changes` (a subset of SETTABLE), validated as a whole."""
    return checked(replace(current, **dict(changes)))


def token_expiry(expires_at: datetime | None, now: datetime) -> datetime | None:
    if expires_at is not None and expires_at <= now:
        raise InvalidArgument("expires_at", f"must be in the future (now is {now.isoformat()})")
    return expires_at


def tenant_queue(queue: str, max_concurrency: int, weight: int) -> tuple[str, int | None, int]:
    """A queue's limits for a tenant (SetTenantQueue, the same ranges as the tenant's own):
    (queue, max_concurrency or None: no limit but the tenant's, weight). 0 means unset for both,
    as on CreateTenant. InvalidArgument names `queue.<field>`."""
    if not queue:
        raise InvalidArgument("queue.name", "is required")
    limit = None if max_concurrency == 0 else _int("max_concurrency", max_concurrency, 1, MAX_CONCURRENCY, "queue")
    return (queue_name("queue.name", queue), limit,
            DEFAULT_WEIGHT if weight == 0 else _int("weight", weight, 1, MAX_WEIGHT, "queue"))
