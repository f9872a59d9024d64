"""The console's forms: what a person types, as Client keyword arguments, and the API's
INVALID_ARGUMENT field back to the form field it came from.

The console checks only what it must to build a call (a number is a number, the payload is
JSON); every rule about the values themselves (a cron expression, a time zone, a name's length)
is the server's, and its message is shown next to the field the person typed (`field_of`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cronwheel.client import MisfirePolicy, OverlapPolicy, Priority

# API field path (less "schedule.") -> form field
_API_TO_FORM = {
    "payload_json": "payload", "payload": "payload", "timeout": "attempt_timeout_s",
    "attempt_timeout": "attempt_timeout_s",
    "jitter": "jitter_s", "alert_if_no_success_within": "alert_s", "range": "start", "range.start": "start",
    "range.start_time": "start", "range.end": "end", "range.end_time": "end", "after": "start", "run_at": "run_at",
    "additional_attempts": "additional_attempts",
}

SCHEDULE_FIELDS = ("name", "cron", "timezone", "job_type", "misfire_policy", "overlap_policy", "priority",
                   "payload", "max_catch_up", "jitter_s", "attempt_timeout_s", "alert_s")
MISFIRE = [m.value for m in MisfirePolicy]
OVERLAP = [m.value for m in OverlapPolicy]
PRIORITY = [m.value for m in Priority]


class FormError(Exception):
    """Bad input the console itself found (before any call): `field` is the form field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def field_of(api_field: str, known: tuple[str, ...] = SCHEDULE_FIELDS) -> str:
    """The form field an API error's field path names ("schedule.cron" -> "cron"); "" when none
    matches (the message is then shown at the top of the form)."""
    path = api_field.removeprefix("schedule.")
    if path in known:
        return path
    mapped = _API_TO_FORM.get(path) or _API_TO_FORM.get(path.split(".")[0]) or path.split(".")[0]
    return mapped if mapped in known or mapped in _API_TO_FORM.values() else ""


@dataclass
class Errors:
    """Messages by form field ("" : the form as a whole)."""

    by_field: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, message: str) -> None:
        self.by_field[name] = message

    def __bool__(self) -> bool:
        return bool(self.by_field)


def _seconds(form: dict[str, str], name: str) -> timedelta | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        raise FormError(name, f"a number of seconds, got {raw[:40]!r}") from None
    return timedelta(seconds=v)


def _int(form: dict[str, str], name: str) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise FormError(name, f"a whole number, got {raw[:40]!r}") from None


def payload_of(form: dict[str, str]) -> Any:
    raw = form.get("payload", "").strip()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise FormError("payload", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def schedule_values(form: dict[str, str], *, creating: bool) -> dict[str, Any]:
    """create_schedule (creating) or update_schedule keyword arguments from the schedule form."""
    values: dict[str, Any] = {
        "name": form.get("name", ""), "cron": form.get("cron", ""), "timezone": form.get("timezone", ""),
        "job_type": form.get("job_type", ""), "misfire_policy": form.get("misfire_policy") or "skip",
        "overlap_policy": form.get("overlap_policy") or None, "priority": form.get("priority") or None,
        "payload": payload_of(form), "max_catch_up": _int(form, "max_catch_up"), "jitter": _seconds(form, "jitter_s"),
        "attempt_timeout": _seconds(form, "attempt_timeout_s"),
        "alert_if_no_success_within": _seconds(form, "alert_s"),
    }
    if creating:
        values["paused"] = form.get("paused") == "on"
        if form.get("tenant", "").strip():
            values["tenant"] = form["tenant"].strip()
    return values


def local_time(raw: str, name: str) -> datetime | None:
    """An <input type=datetime-local> value (taken as UTC, as the page says) or an ISO time."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        dt = datetime.fromisoformat(raw)
    except ValueError:
        raise FormError(name, f"a time like 2026-03-29T01:30, got {raw[:40]!r}") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
