"""Unique jobs (SubmitJob's `unique` options): which submissions are the same job, and in which
states an execution keeps a second one out. Pure: no I/O, no clock (run_at is given).

Two submissions are the same unique job when their unique keys are equal. The key is the sha256
of a canonical JSON array of: the tenant, the job type, the compared args, the period and the
start of the period bucket. The compared args are: nothing (unique by type alone), the whole
payload (`by_args`), or the payload's top-level `args_keys` (a key the payload lacks is left out,
which is not the same as null). Args compare as JSON values, not as text: object keys in any order,
numbers by value (1, 1.0 and 1e0 are one number), strings exactly; the value is what counts, not how
it was chosen (by_args on {"c": 1} and args_keys ["c"] on {"c": 1, "x": 2} are the same job). The period bucket is
floor(run_at / period) on the Unix epoch (UTC), so a period of 1 h runs from one whole UTC hour to
the next, whatever the time zone; no period means one bucket for ever.

The key is held only while the execution is in one of its unique `states` (a bitmask stored with
the row; the database's partial unique index `executions_unique` is what makes this exact across
nodes). The states must include every non-terminal state (REQUIRED_STATES): an execution moves
between them by itself (a lease that lapses returns a running execution to queued, a retry timer
queues it), and a move from a state that does not hold the key into one that does could meet
another holder in the middle of the firing, dispatch or reaper path, which has no one to answer.
For the same reason a set with `cancelled` must also hold `failed` (CancelExecution takes a failed
execution to cancelled). Terminal states are the choice: add `succeeded` to mean "at most one per
period, even once it ran". The only move into the states that can meet a holder is a user's
RetryExecution of an execution whose key another one holds now: it is refused (ALREADY_EXISTS).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from cronwheel.cluster.commands.values import MAX_RUN_AT_AHEAD
from cronwheel.errors import InvalidArgument
from cronwheel.limits import MAX_NAME
from cronwheel.storage.executions import UNIQUE_STATE_BITS, unique_states_mask
from cronwheel.times import to_micros

REQUIRED_STATES = ("scheduled", "queued", "running", "retry_scheduled")
DEFAULT_STATES = REQUIRED_STATES  # "no second one while one is waiting, queued, running or retrying"
MAX_ARGS_KEYS = 100
MAX_PERIOD = MAX_RUN_AT_AHEAD
_VERSION = "cronwheel.unique.v1"  # in every key: a change of the key's recipe changes this


@dataclass(frozen=True, slots=True)
class UniqueSpec:
    """The `unique` options of a job as the API received them (states: domain words)."""

    by_args: bool = False
    args_keys: tuple[Any, ...] = ()  # top-level payload keys; not empty: compare only these
    period_s: float = 0.0  # 0: for ever
    states: tuple[str, ...] = ()  # empty: DEFAULT_STATES


@dataclass(frozen=True, slots=True)
class UniqueRule:
    """Validated options: what is compared (`args_keys` None: the whole payload when `by_args`),
    the period in whole seconds (0: for ever) and the states' bitmask."""

    by_args: bool
    args_keys: tuple[str, ...] | None
    period_s: int
    mask: int


def validate(spec: UniqueSpec) -> UniqueRule:
    """The rule of a job's `unique` options; InvalidArgument naming the field under "unique".
    The jobs of a batch mostly share their options: a valid spec's rule is remembered."""
    try:
        return _validated(spec)
    except TypeError:  # an unhashable args key: refused by _validate
        return _validate(spec)


@functools.lru_cache(maxsize=1024)
def _validated(spec: UniqueSpec) -> UniqueRule:
    return _validate(spec)


def _validate(spec: UniqueSpec) -> UniqueRule:
    keys: tuple[str, ...] | None = None
    if spec.args_keys:
        if len(spec.args_keys) > MAX_ARGS_KEYS:
            raise InvalidArgument("unique.args_keys", f"at most {MAX_ARGS_KEYS} keys, got {len(spec.args_keys)}")
        for i, k in enumerate(spec.args_keys):
            if not isinstance(k, str):
                raise InvalidArgument(f"unique.args_keys[{i}]",
                                      f"must be a string (a top-level payload key), got {k!r}")
            if not 1 <= len(k) <= MAX_NAME:
                raise InvalidArgument(f"unique.args_keys[{i}]", f"must be 1..{MAX_NAME} characters, got {len(k)}")
        keys = tuple(sorted(set(spec.args_keys)))
    period = spec.period_s
    if not isinstance(period, int | float) or isinstance(period, bool) or period != period:
        raise InvalidArgument("unique.period", f"must be a number of seconds, got {period!r}")
    if period < 0:
        raise InvalidArgument("unique.period", f"must not be negative, got {period} s")
    if period > MAX_PERIOD.total_seconds():
        raise InvalidArgument("unique.period", f"must be at most 10 years, got {period} s")
    if period != int(period):
        raise InvalidArgument("unique.period", f"must be whole seconds, got {period} s")
    states = spec.states or DEFAULT_STATES
    for j, s in enumerate(states):
        if s not in UNIQUE_STATE_BITS:
            raise InvalidArgument(f"unique.states[{j}]", f"unknown state {s!r}; one of {', '.join(UNIQUE_STATE_BITS)}")
    missing = [s for s in REQUIRED_STATES if s not in states]
    if missing:
        raise InvalidArgument("unique.states", f"must include {', '.join(REQUIRED_STATES)} (an execution moves "
                                               f"between them by itself); missing {', '.join(missing)}")
    if "cancelled" in states and "failed" not in states:
        raise InvalidArgument("unique.states", "with cancelled, must include failed too (a failed execution can be "
                                               "cancelled)")
    return UniqueRule(by_args=spec.by_args or keys is not None, args_keys=keys, period_s=int(period),
                      mask=unique_states_mask(states))


def unique_key(rule: UniqueRule, tenant: str, job_type: str, payload: str, run_at: datetime) -> bytes:
    """The job's unique key (32 bytes). `payload` is the checked JSON text; InvalidArgument
    ("unique.args_keys") when keys are picked from a payload that is not an object."""
    args: str = "null"
    if rule.by_args:
        # A payload with no number written with a fraction or an exponent (no digit followed by
        # ".", "e" or "E", even inside a string) takes the C encoder, which writes exactly what
        # `canonical` would; any other, `canonical` over exact Decimals.
        fractions = _FRACTION.search(payload) is not None
        value = _DECIMALS.decode(payload) if fractions else json.loads(payload)
        if rule.args_keys is not None:
            if not isinstance(value, dict):
                raise InvalidArgument("unique.args_keys", "picks keys of the payload, which must then be a JSON object")
            value = {k: value[k] for k in rule.args_keys if k in value}
        args = canonical(value) if fractions else _CANONICAL.encode(value)
    bucket = "null"
    if rule.period_s:
        period_us = rule.period_s * 1_000_000
        bucket = str(to_micros(run_at) // period_us * period_us)
    doc = f"{_prefix(tenant, job_type)}{args},{rule.period_s},{bucket}]"
    return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).digest()


_FRACTION = re.compile(r"\d[.eE]")
_DECIMALS = json.JSONDecoder(parse_float=Decimal)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def _prefix(tenant: str, job_type: str) -> str:
    return f"[{json.dumps(_VERSION)},{json.dumps(tenant)},{json.dumps(job_type)},"


def canonical(value: Any) -> str:
    """A JSON value (ints as int, other numbers as Decimal) as canonical text, exactly as
    json.dumps(sort_keys=True, separators=(",", ":")) writes a value without Decimals: object keys
    sorted, no spaces; a whole number as its digits (1, 1.0, 1e0, -0.0 -> "1", "1", "1", "0"),
    any other as its normalised Decimal (1.50 -> "1.5"); strings as json.dumps writes them."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{canonical(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(int(value)) if value == value.to_integral_value() else str(value.normalize())
    return json.dumps(value)
