"""Values and checks shared by the schedule and execution commands (`schedules`, `runs`):
limits, the retry policy, name-like and free-text strings, JSON documents, durations, the
partition hash. Limits and enums defined lower down are imported, never restated: the jitter
limit and the policy enums come from `cronwheel.cron` (the contract's 0 .. 1 h), priorities from
`cron.Priority`.

Every check raises `InvalidArgument(field, ...)` naming the field in the API's terms. JSON
documents are checked here for everything PostgreSQL's jsonb would refuse (NUL, unpaired
surrogates, out-of-range numbers, absurd nesting), so that bad input is INVALID_ARGUMENT and
never a database error.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from cronwheel.cron import OverlapPolicy, Priority
from cronwheel.errors import InvalidArgument, NotFound, ResourceExhausted
from cronwheel.limits import MAX_NAME, MAX_PAYLOAD_BYTES

MAX_REASON = 1000
MAX_JSON_DEPTH = 100
MAX_RUN_AT_AHEAD = timedelta(days=3653)
# A one-off job due within this of its submission is stored `queued` at once and claimed from its
# run_at (the dispatchers wake then: the submit's `at:` notification, `claim_wait`), so a short
# delay (a retry-after, a debounce: seconds) costs no fire, which is an update of the row by its
# partition's owner. Further out it is `scheduled` until its owner queues it
# FiringConfig.queue_ahead_s before its run_at. docs/semantics.md, "One-off jobs".
QUEUED_AT_SUBMIT_WITHIN = timedelta(seconds=10)
PRIORITIES = tuple(p.value for p in Priority)
# One search instead of a Python test per character (the submit path checks every name and payload).
_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")  # control characters and lone surrogates
_SURROGATE = re.compile("[\ud800-\udfff]")
OVERLAP_POLICIES = tuple(p.value for p in OverlapPolicy)


class QuotaExceeded(ResourceExhausted):
    """A tenant quota is used up. The message starts with the quota's name (the tenants column
    and the TenantService field: "max_schedules: ...", "max_executions_per_day: ...")."""

    def __init__(self, quota: str, detail: str) -> None:
        self.quota = quota
        super().__init__(f"{quota}: {detail}")


class JsonText(str):
    """A JSON document as text, checked by `parse_json` (PostgreSQL stores it as given)."""


class _CheckedJson(JsonText):
    """JsonText that `parse_json` returned: checked already, so `payload_json` does not parse it
    twice (a JsonText made anywhere else is checked when used)."""


def visible(row: dict[str, Any] | None, tenant: str | None, kind: str, ident: object) -> dict[str, Any]:
    """The tenancy rule, once: `row` as `tenant` may see it (None: an admin sees every tenant's);
    another tenant's object is reported exactly like a missing one."""
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise NotFound(kind, ident)
    return row


def partition_of(ident: uuid.UUID, partitions: int) -> int:
    """hash(id) % P with a stable hash (the same on every node and release)."""
    return int.from_bytes(hashlib.blake2b(ident.bytes, digest_size=8).digest(), "big") % partitions


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_s: float = 30.0
    multiplier: float = 4.0
    max_s: float = 6 * 3600.0
    max_attempts: int = 5

    def validate(self, prefix: str = "retry_policy") -> RetryPolicy:
        if not 0 <= self.initial_s <= 86400:
            raise InvalidArgument(f"{prefix}.initial_backoff", f"must be 0..86400 s, got {self.initial_s}")
        if not 1 <= self.multiplier <= 100:
            raise InvalidArgument(f"{prefix}.backoff_multiplier", f"must be 1..100, got {self.multiplier}")
        if not self.initial_s <= self.max_s <= 7 * 86400:
            raise InvalidArgument(f"{prefix}.max_backoff",
                                  f"must be initial_backoff ({self.initial_s} s)..604800 s, got {self.max_s}")
        if isinstance(self.max_attempts, bool) or not 1 <= self.max_attempts <= 1000:
            raise InvalidArgument(f"{prefix}.max_attempts", f"must be 1..1000, got {self.max_attempts}")
        return self


def text(fieldname: str, value: object, required: bool = True, limit: int = MAX_NAME) -> str:
    """A name-like string: stripped, 1..limit code points, no control characters."""
    if not isinstance(value, str):
        raise InvalidArgument(fieldname, "must be a string")
    v = value.strip()
    if required and not v:
        raise InvalidArgument(fieldname, "is required")
    if len(v) > limit:
        raise InvalidArgument(fieldname, f"must be at most {limit} characters, got {len(v)}")
    if _CONTROL.search(v):
        raise InvalidArgument(fieldname, "must not contain control characters")
    return v


MAX_CONCURRENCY_LIMIT = 100_000


def concurrency_key(key: str | None, limit: int | None) -> tuple[str | None, int | None]:
    """A job's concurrency key (a name, scoped to its tenant) and limit (1..MAX_CONCURRENCY_LIMIT),
    given together or not at all; (None, None) when neither is given."""
    k = text("concurrency_key", key, required=False) if key else ""
    if not k and not limit:
        return None, None
    if not k:
        raise InvalidArgument("concurrency_key", "is required with concurrency_limit")
    if not limit:
        raise InvalidArgument("concurrency_limit", "is required with concurrency_key: the most runs with the key "
                                                   "at once, >= 1")
    if not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        raise InvalidArgument("concurrency_limit", f"must be 1..{MAX_CONCURRENCY_LIMIT}, got {limit}")
    return k, limit


def reason_text(value: str, fieldname: str = "reason") -> str:
    """Free text (reasons): <= 1000 code points; newlines and tabs allowed, NUL never."""
    if not isinstance(value, str):
        raise InvalidArgument(fieldname, "must be a string")
    if len(value) > MAX_REASON:
        raise InvalidArgument(fieldname, f"must be at most {MAX_REASON} characters, got {len(value)}")
    if any((ord(c) < 32 and c not in "\n\t") or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise InvalidArgument(fieldname, "must not contain control characters other than newline and tab")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# What json.loads(raw, parse_float=Decimal, parse_constant=_reject_constant) builds on every call,
# built once (the decoder is stateless). A submit of 1,000 jobs made 1,000 of them.
_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_reject_constant)


def _check_json_value(fieldname: str, doc: Any) -> None:
    """What JSON allows but PostgreSQL's jsonb refuses: NUL, lone surrogates, huge exponents,
    absurd nesting. Iterative, so depth cannot blow the stack."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgument(fieldname, f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(v, dict):
            stack.extend((k, depth) for k in v)
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str):
            if "\x00" in v or _SURROGATE.search(v):
                raise InvalidArgument(fieldname, "strings must not contain NUL or unpaired surrogates")
        elif isinstance(v, Decimal):
            exp = v.as_tuple().exponent
            if not v.is_finite() or not isinstance(exp, int) or exp < -16383 or v.adjusted() >= 131072:
                raise InvalidArgument(fieldname, "a number is out of range")


_EXPONENT = re.compile("[0-9][eE]")


def plain_json(raw: str) -> bool:
    """Whether JSON text, once decoded, cannot hold anything `_check_json_value` refuses, told from
    the text alone at C speed (the walk cost a submit of 1,000 small payloads a millisecond): no
    backslash (NUL and lone surrogates reach a decoded string only through escapes; raw control
    characters fail the decoder, raw surrogates the caller's own check), fewer brackets than
    MAX_JSON_DEPTH (so no deeper nesting), no digit before an exponent marker, and too short for a
    decimal with 16,000 digits (so no exponent out of jsonb's range). False sends the document
    through the walk: a false negative only costs time."""
    return (len(raw) < 16_000 and "\\" not in raw and raw.count("[") + raw.count("{") < MAX_JSON_DEPTH
            and _EXPONENT.search(raw) is None)


def parse_json(fieldname: str, raw: str, empty: str = "{}") -> JsonText:
    """Check one JSON document (<= 256 KiB of UTF-8) and return it as JsonText ('' -> `empty`)."""
    if not isinstance(raw, str):
        raise InvalidArgument(fieldname, "must be a JSON string")
    if raw.strip() == "":
        return _CheckedJson(empty)
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidArgument(fieldname, f"must be at most {MAX_PAYLOAD_BYTES} bytes, got {size}")
    try:
        if raw.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        doc = _DECODER.decode(raw)
    except RecursionError:
        raise InvalidArgument(fieldname, f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and ints beyond Python's digit limit
        raise InvalidArgument(fieldname, f"invalid JSON: {exc}") from None
    if not plain_json(raw):
        _check_json_value(fieldname, doc)
    if _SURROGATE.search(raw):
        raise InvalidArgument(fieldname, "must be valid UTF-8")
    return _CheckedJson(raw)


def payload_json(fieldname: str, payload: Any) -> JsonText:
    """A payload given as JsonText or as a Python value, checked, as JSON text."""
    if isinstance(payload, _CheckedJson):
        return payload
    if isinstance(payload, JsonText):
        return parse_json(fieldname, payload)
    try:
        raw = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(fieldname, f"must be JSON: {exc}") from None
    return parse_json(fieldname, raw)


def priority(value: str, fieldname: str = "priority") -> str:
    if value not in PRIORITIES:
        raise InvalidArgument(fieldname, f"must be one of {', '.join(PRIORITIES)}, got {value!r}")
    return value


def duration(fieldname: str, value: float | None, lo: float, hi: float) -> float | None:
    """An optional duration in seconds within [lo, hi]."""
    if value is None:
        return None
    if not lo <= value <= hi:
        raise InvalidArgument(fieldname, f"must be in {lo:g}..{hi:g} seconds, got {value}")
    return float(value)


def timeout(fieldname: str, value: float | None) -> float | None:
    return duration(fieldname, value, 1.0, 7 * 86400.0)
