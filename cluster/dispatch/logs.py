"""Execution logs on the node: AppendLogs (workers) and the API's reads (issue 53).

A worker's lines land in `execution_logs` (storage/logs.py), never in the executions row: the
append reads each run's fence (token, lease owner, running, tenant: the heartbeat's check) by
primary key and inserts, one statement, no row lock on executions. A run whose fence fails is
explained as a heartbeat's would be (NotFound, StaleFencingToken, FailedPrecondition), per item.

Bounds. The node bounds each call (cronwheel.limits: items, lines, bytes of text, each
line's fields) and refuses a call past them whole (InvalidArgument naming the field); the SDK
keeps each attempt within ATTEMPT_LOG_BYTES (head and tail, a truncation mark between).

Reading is the API's: cluster/commands/logs.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.errors import InvalidArgument
from cronwheel.limits import (
    MAX_LOG_CALL_BYTES,
    MAX_LOG_ITEMS,
    MAX_LOG_LEVEL_CHARS,
    MAX_LOG_LINE_BYTES,
    MAX_LOG_LINES,
    MAX_LOG_LOGGER_CHARS,
)
from cronwheel.storage.dispatch import TokenCall
from cronwheel.storage.logs import LogAppend

Line = tuple[int, datetime | None, str, str, str]  # (seq, at, level, logger, message) as sent


@dataclass(frozen=True, slots=True)
class LogItem:
    """One AppendLogs item as sent: the run and its lines."""

    execution_id: uuid.UUID
    token: int
    lines: Sequence[Line]


def checked(worker: str, items: Sequence[LogItem]) -> list[LogAppend]:
    """The call's items, every bound checked (InvalidArgument naming the first field past one)."""
    if not worker.strip():
        raise InvalidArgument("worker_id", "is required")
    if not 1 <= len(items) <= MAX_LOG_ITEMS:
        raise InvalidArgument("items", f"must hold 1..{MAX_LOG_ITEMS} runs, got {len(items)}")
    total_lines = total_bytes = 0
    out: list[LogAppend] = []
    for i, item in enumerate(items):
        lines: list[tuple[int, datetime, str, str, str]] = []
        for k, (seq, at, level, logger, message) in enumerate(item.lines):
            field = f"items[{i}].lines[{k}]"
            if seq < 1:
                raise InvalidArgument(f"{field}.seq", f"must be >= 1, got {seq}")
            if at is None:
                raise InvalidArgument(f"{field}.time", "is required")
            if not 1 <= len(level) <= MAX_LOG_LEVEL_CHARS:
                raise InvalidArgument(f"{field}.level", f"must be 1..{MAX_LOG_LEVEL_CHARS} characters")
            if len(logger) > MAX_LOG_LOGGER_CHARS:
                raise InvalidArgument(f"{field}.logger", f"must be at most {MAX_LOG_LOGGER_CHARS} characters")
            size = len(message.encode())
            if size > MAX_LOG_LINE_BYTES:
                raise InvalidArgument(f"{field}.message", f"must be at most {MAX_LOG_LINE_BYTES} bytes, got {size}")
            if "\x00" in message:
                raise InvalidArgument(f"{field}.message", "must not contain NUL characters")
            total_bytes += size
            lines.append((seq, at, level, logger, message))
        total_lines += len(lines)
        out.append(LogAppend(item.execution_id, item.token, lines))
    if total_lines > MAX_LOG_LINES:
        raise InvalidArgument("items", f"must hold at most {MAX_LOG_LINES} lines in all, got {total_lines}")
    if total_bytes > MAX_LOG_CALL_BYTES:
        raise InvalidArgument("items", f"must hold at most {MAX_LOG_CALL_BYTES} bytes of text, got {total_bytes}")
    return out


async def append_logs(d: Dispatcher, worker: str, items: Sequence[LogItem],
                      tenant: str | None) -> list[Exception | None]:
    """Store each item's lines if its run's fence holds; per item, None or why not."""
    runs = checked(worker, items)
    accepted = await d.store.logs.append(worker, runs, tenant)
    out: list[Exception | None] = []
    for r in runs:
        out.append(None if r.id in accepted else await d.refusal(TokenCall(r.id, r.token, worker, tenant)))
    return out
