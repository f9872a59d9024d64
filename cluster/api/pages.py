"""Opaque page tokens of the List RPCs, and the DST notes of PreviewSchedule.

A page token is base64url(JSON {"k": list kind, "f": digest of the request's other fields,
"c": the cursor}). The cursor is the sort key of the last item returned (keyset pagination, so
pages stay consistent under inserts). A token is valid only for the same kind and the same
other fields (INVALID_ARGUMENT "page_token: ..." otherwise). Tokens are not secret: a forged
cursor moves the position only, filters and tenancy always come from the request and caller.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from datetime import datetime
from typing import Any

from cronwheel.cron import CronSchedule
from cronwheel.cron.expr import next_wall
from cronwheel.cron.zones import wall_offsets
from cronwheel.errors import InvalidArgument
from cronwheel.times import from_micros, to_micros

MAX_TOKEN = 1000


def _digest(filters: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(filters, sort_keys=True, default=str).encode()).hexdigest()[:16]


def encode(kind: str, filters: dict[str, Any], cursor: list[Any]) -> str:
    body = json.dumps({"k": kind, "f": _digest(filters), "c": cursor}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


def time_id_page(rows: list[dict[str, Any]], size: int, kind: str, filters: dict[str, Any],
                 time_key: str, more: bool = False) -> tuple[list[dict[str, Any]], str]:
    """The first `size` of `rows` (fetched with limit size + 1) and the token of the next page
    ("" when there is none), keyed on (rows[time_key], id). `more`: the rows were cut short
    (by bytes) and more follow them."""
    if len(rows) <= size and not more:
        return rows, ""
    n = min(size, len(rows))
    last = rows[n - 1]
    return rows[:n], encode(kind, filters, [to_micros(last[time_key]), str(last["id"])])


def decode(token: str, kind: str, filters: dict[str, Any]) -> list[Any] | None:
    """The cursor of a token (None for the first page)."""
    if not token:
        return None
    bad = InvalidArgument("page_token", "malformed; pass the next_page_token of the previous response")
    if len(token) > MAX_TOKEN:
        raise bad
    try:
        doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad from None
    if not isinstance(doc, dict) or not isinstance(doc.get("c"), list) or doc.get("k") != kind:
        raise bad
    if doc.get("f") != _digest(filters):
        raise InvalidArgument("page_token", "does not match the request's other fields")
    return list(doc["c"])


def time_id_cursor(cursor: list[Any] | None) -> tuple[datetime | None, uuid.UUID | None]:
    """A (timestamp in microseconds, uuid) cursor."""
    if cursor is None:
        return None, None
    try:
        us, ident = cursor
        if not isinstance(us, int) or isinstance(us, bool):
            raise ValueError
        return from_micros(us), uuid.UUID(ident)
    except (ValueError, TypeError, OverflowError, AttributeError):
        raise InvalidArgument("page_token", "malformed; pass the next_page_token of the previous response") from None


def text_id_page(rows: list[dict[str, Any]], size: int, kind: str, filters: dict[str, Any],
                 text_key: str) -> tuple[list[dict[str, Any]], str]:
    """As time_id_page, keyed on (rows[text_key], id)."""
    if len(rows) <= size:
        return rows, ""
    last = rows[size - 1]
    return rows[:size], encode(kind, filters, [str(last[text_key]), str(last["id"])])


def text_id_cursor(cursor: list[Any] | None) -> tuple[str | None, uuid.UUID | None]:
    """A (text, uuid) cursor."""
    if cursor is None:
        return None, None
    try:
        value, ident = cursor
        if not isinstance(value, str):
            raise ValueError
        return value, uuid.UUID(ident)
    except (ValueError, TypeError, AttributeError):
        raise InvalidArgument("page_token", "malformed; pass the next_page_token of the previous response") from None


def one_key_page(rows: list[dict[str, Any]], size: int, kind: str, filters: dict[str, Any],
                 key: str = "id") -> tuple[list[dict[str, Any]], str]:
    """As time_id_page, keyed on rows[key] alone (a unique key: an id)."""
    if len(rows) <= size:
        return rows, ""
    return rows[:size], encode(kind, filters, [str(rows[size - 1][key])])


def one_cursor(cursor: list[Any] | None, of: type) -> Any:
    """The single value of a one_key_page cursor as `of` (str, uuid.UUID); None on the first page."""
    if cursor is None:
        return None
    try:
        (value,) = cursor
        if not isinstance(value, str):
            raise ValueError
        return of(value)
    except (ValueError, TypeError, AttributeError):
        raise InvalidArgument("page_token", "malformed; pass the next_page_token of the previous response") from None


def id_cursor(cursor: list[Any] | None) -> int:
    if cursor is None:
        return 0
    if len(cursor) != 1 or not isinstance(cursor[0], int) or isinstance(cursor[0], bool):
        raise InvalidArgument("page_token", "malformed; pass the next_page_token of the previous response")
    return int(cursor[0])


def dst_note(cron: CronSchedule, tick: datetime) -> str:
    """A DST adjustment applied to a tick, in words; '' when none."""
    local = tick.astimezone(cron.zone)
    f = (local.year, local.month, local.day, local.hour, local.minute, local.second)
    day = local.date().isoformat()
    try:
        matches = next_wall(cron.spec, *f) == f
    except OverflowError:
        matches = True
    if not matches:
        return (f"the matching local time before {local:%H:%M:%S} does not exist on {day} in {cron.timezone} "
                f"(clocks jump forward): shifted to {local:%H:%M:%S}")
    off0, off1 = wall_offsets(cron.zone, *f)
    if off0 > off1:
        which = "second" if local.fold else "first"
        return f"{local:%H:%M:%S} occurs twice on {day} in {cron.timezone} (clocks go back): {which} occurrence"
    return ""
