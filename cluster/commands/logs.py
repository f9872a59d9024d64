"""Reading execution logs (GetExecutionLogs, issue 53): a page after a cursor (attempt, seq).

The execution's state is read first, then the lines: once that state is final, every line of it
is stored (the SDK ships a run's last lines before reporting it), so a follower that sees
`final` and no `more` is done. A page is cut at its size or at ANSWER_ROWS_BYTES of text (past its
first line), so an answer stays under the node's 4 MiB send limit. Another tenant's execution is
NotFound.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from cronwheel.cluster.commands.runs import get_execution
from cronwheel.cluster.dispatch.policy import TERMINAL_STATES
from cronwheel.errors import InvalidArgument
from cronwheel.limits import ANSWER_ROWS_BYTES, DEFAULT_LOG_PAGE, MAX_LOG_PAGE
from cronwheel.storage import PgStore
from cronwheel.storage.logs import LogLine, LogPageParams

FINAL_STATES = TERMINAL_STATES | {"skipped"}  # a skipped record never ran: final too


@dataclass(frozen=True, slots=True)
class LogPage:
    lines: list[LogLine]
    state: str
    final: bool
    more: bool  # lines after these are stored already


async def read_logs(store: PgStore, execution_id: uuid.UUID, tenant: str | None, *, attempt: int,
                    after_attempt: int, after_seq: int, page_size: int) -> LogPage:
    """A page of an execution's lines after (after_attempt, after_seq); attempt 0: every one."""
    if attempt < 0:
        raise InvalidArgument("attempt", f"must be >= 0 (0: every attempt), got {attempt}")
    if after_attempt < 0 or after_seq < 0:
        raise InvalidArgument("after_attempt" if after_attempt < 0 else "after_seq", "must be >= 0")
    if not 0 <= page_size <= MAX_LOG_PAGE:
        raise InvalidArgument("page_size", f"must be 0..{MAX_LOG_PAGE}, got {page_size}")
    row = await get_execution(store, execution_id, tenant)  # NotFound for another tenant's: first
    size = page_size or DEFAULT_LOG_PAGE
    got = await store.logs.page(LogPageParams(execution_id, attempt or None, after_attempt, after_seq, size + 1))
    kept, total = 0, 0
    for ln in got[:size]:
        total += len(ln.message.encode())
        if kept and total > ANSWER_ROWS_BYTES:
            break
        kept += 1
    return LogPage(got[:kept], row["state"], row["state"] in FINAL_STATES, kept < len(got))
