"""Reception of PostgreSQL notifications (LISTEN), the storage side of `cluster/notifications.py`.

Channels (the senders are in the SQL: `pg_notify(...)` in the API's and the firing path's queries):
    cronwheel_due      '<partition>:<s|o>:<id>': a schedule or one-off job changed (sent in the
                       changing transaction, so it arrives only once the change is visible);
                       'n:<partition>,<id>,<run_at unix s>;...': new scheduled one-off jobs of a
                       submit group, with their run_at, so the owner needs no lookup per job
                       (`oneoff_batch_payloads` builds them, each under NOTIFY's 8000 bytes)
    cronwheel_queued   work was queued somewhere (wakes waiting workers)

`Listener(dsn)` is one dedicated autocommit connection: `async with Listener(dsn) as notes:` LISTENs
to both channels, then `async for note in notes` yields `Notification`s until the connection
fails. Every psycopg error leaves as a cronwheel error (`Unavailable` for a lost connection), so
the caller needs no driver import. Not task-safe: one task owns a listener.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

import psycopg

from cronwheel.storage.errors import map_error
from cronwheel.storage.queries import q

DUE_CHANNEL = "cronwheel_due"
QUEUED_CHANNEL = "cronwheel_queued"
ONEOFF_BATCH_PREFIX = "n:"
# A cronwheel_queued payload for runs queued ahead of their run_at (one-off jobs, FiringConfig.
# queue_ahead_s): 'at:<Unix seconds>', the soonest of them; the nodes wake their waiting lease
# calls then, not now. Any other payload (a priority, 'fired') means claimable now.
QUEUED_AT_PREFIX = "at:"
_MAX_PAYLOAD = 7800  # PostgreSQL refuses payloads of 8000 bytes or more


def oneoff_batch_payloads(due: Sequence[tuple[int, uuid.UUID, datetime]]) -> list[str]:
    """'n:<partition>,<id>,<run_at>;...' payloads listing new scheduled one-off jobs."""
    out: list[str] = []
    cur: list[str] = []
    size = len(ONEOFF_BATCH_PREFIX)
    for p, ident, run_at in due:
        entry = f"{p},{ident},{run_at.timestamp():.6f}"
        if cur and size + len(entry) + 1 > _MAX_PAYLOAD:
            out.append(ONEOFF_BATCH_PREFIX + ";".join(cur))
            cur, size = [], len(ONEOFF_BATCH_PREFIX)
        cur.append(entry)
        size += len(entry) + 1
    if cur:
        out.append(ONEOFF_BATCH_PREFIX + ";".join(cur))
    return out


def queued_at_payload(at: float) -> str:
    """The cronwheel_queued payload of runs claimable from `at` (Unix seconds)."""
    return f"{QUEUED_AT_PREFIX}{at:.6f}"


def parse_queued_at(payload: str) -> float | None:
    """When the runs a cronwheel_queued payload announces are claimable: its 'at:' instant, or
    None (now) for any other payload, a malformed one included (a wake too early costs a claim)."""
    if not payload.startswith(QUEUED_AT_PREFIX):
        return None
    try:
        return float(payload[len(QUEUED_AT_PREFIX):])
    except ValueError:
        return None


def parse_oneoff_batch(payload: str) -> list[tuple[int, uuid.UUID, float]] | None:
    """The entries of an 'n:' payload (partition, id, run_at unix s); None if malformed."""
    if not payload.startswith(ONEOFF_BATCH_PREFIX):
        return None
    out: list[tuple[int, uuid.UUID, float]] = []
    try:
        for entry in payload[len(ONEOFF_BATCH_PREFIX):].split(";"):
            p, ident, ts = entry.split(",")
            out.append((int(p), uuid.UUID(ident), float(ts)))
    except ValueError:
        return None
    return out


@dataclass(frozen=True, slots=True)
class Notification:
    channel: str
    payload: str


class Listener:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def __aenter__(self) -> Self:
        try:
            self._conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            await self._conn.execute(q("listen_due"))
            await self._conn.execute(q("listen_queued"))
        except psycopg.Error as exc:
            await self.__aexit__()
            raise map_error(exc) from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:  # closing a connection that is already gone
                pass

    async def __aiter__(self) -> AsyncIterator[Notification]:
        assert self._conn is not None, "use inside `async with Listener(dsn)`"
        try:
            async for n in self._conn.notifies():
                yield Notification(n.channel, n.payload)
        except psycopg.Error as exc:
            raise map_error(exc) from exc
