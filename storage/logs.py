"""LogsPort: execution logs (logs.sql, table `execution_logs`, migration 0026) and the scaling
signals (scaling.sql) the node's metrics read.

Appends are one statement, their own transaction: a primary-key read of each run's fence (token,
owner, running, tenant) and an insert into `execution_logs`; the executions row is never
written or locked, so a log append costs no hot path a row lock. Reads page by (attempt, seq).

Concurrency: task-safe (it holds only the Database).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from cronwheel.storage.db import Database
from cronwheel.storage.queries import q


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of an attempt's log. `seq` is its number in the attempt (the worker's)."""

    attempt: int
    seq: int
    at: datetime
    level: str
    logger: str
    message: str


@dataclass(frozen=True, slots=True)
class LogAppend:
    """A worker's lines for one run, checked against the run's token as a heartbeat is."""

    id: uuid.UUID
    token: int
    lines: Sequence[tuple[int, datetime, str, str, str]]  # (seq, at, level, logger, message)


@dataclass(frozen=True, slots=True)
class LogPageParams:
    id: uuid.UUID
    attempt: int | None  # None: every attempt
    after_attempt: int  # the cursor: lines after (after_attempt, after_seq)
    after_seq: int
    limit: int


@dataclass(frozen=True, slots=True)
class ScalingSignal:
    """What waits and what runs, per queue and priority (scaling.sql)."""

    queue: str
    priority: str
    ready: int  # queued, run_at come: a worker could take it now
    oldest_ready_at: datetime | None
    running: int


class LogsPort:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def append(self, worker: str, runs: Sequence[LogAppend], tenant: str | None) -> set[uuid.UUID]:
        """Store the lines of each run whose fence holds; answers those runs (the others' lines
        were not stored: the caller explains why, one by one)."""
        line_ids: list[uuid.UUID] = []
        seqs: list[int] = []
        ats: list[datetime] = []
        levels: list[str] = []
        loggers: list[str] = []
        messages: list[str] = []
        for r in runs:
            for seq, at, level, logger, message in r.lines:
                line_ids.append(r.id)
                seqs.append(seq)
                ats.append(at)
                levels.append(level)
                loggers.append(logger)
                messages.append(message)
        async with self.db.connection() as conn:
            cur = await conn.execute(q("append_logs"), {
                "ids": [r.id for r in runs], "tokens": [r.token for r in runs], "worker": worker,
                "tenant": tenant, "line_ids": line_ids, "seqs": seqs, "ats": ats, "levels": levels,
                "loggers": loggers, "messages": messages})
            return {r[0] for r in await cur.fetchall()}

    async def page(self, p: LogPageParams) -> list[LogLine]:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("execution_logs_page"), {
                "id": p.id, "attempt": p.attempt, "after_attempt": p.after_attempt, "after_seq": p.after_seq,
                "limit": p.limit})
            return [LogLine(int(r[0]), int(r[1]), r[2], r[3], r[4], r[5]) for r in await cur.fetchall()]

    async def scaling_signals(self, now: datetime) -> list[ScalingSignal]:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("scaling_signals"), {"now": now})
            return [ScalingSignal(r[0], r[1], int(r[2]), r[3], int(r[4])) for r in await cur.fetchall()]
