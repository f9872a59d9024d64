"""The API's storage port, shared parts: the one row decoder, the audit and alert log, and the
facts `explain` reads. `storage/schedules.py` and `storage/executions.py` hold the commands'
queries on those tables.

Row decoding. Every query of the API ports returns rows through `rows()` / `row()`: a dict per
row, JSON columns (payload, checkpoint, result, data) as their JSON *text* exactly as PostgreSQL
renders them, so large and precise numbers survive the round trip to the API. Values are plain
Python (uuid.UUID, aware datetime, float, int, str, bool, None).

Transactions. A command that runs several statements opens `store.transaction()` and hands the
connection (`Conn`) to each port method; single reads borrow their own connection. Errors
leave through `storage.errors.map_error` (the borrow does it), never as psycopg exceptions.

Time. Queries that stamp a time take it from the caller (`now`), so a column never mixes
database time and node time, and tests can pin it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

from cronwheel.storage.db import Database
from cronwheel.storage.queries import q

Conn: TypeAlias = "AsyncConnection[Any]"
Row: TypeAlias = dict[str, Any]


def json_text(doc: str) -> Jsonb:
    """Hand checked JSON text to PostgreSQL as is (it parses, dedupes keys, keeps numbers)."""
    return Jsonb(doc, dumps=lambda s: str(s))


def decoding_cursor(conn: Conn) -> Any:
    """A cursor with the one row decoding of the API ports: dict rows, JSON as text."""
    cur = conn.cursor(row_factory=dict_row)
    cur.adapters.register_loader("jsonb", TextLoader)
    cur.adapters.register_loader("json", TextLoader)
    return cur


async def rows(conn: Conn, name: str, params: Mapping[str, Any]) -> list[Row]:
    """The one row decoder of the API ports: run query `name`, dict rows, JSON as text."""
    cur = decoding_cursor(conn)
    async with cur:
        await cur.execute(q(name), params)
        return list(await cur.fetchall()) if cur.description is not None else []


async def row(conn: Conn, name: str, params: Mapping[str, Any]) -> Row | None:
    got = await rows(conn, name, params)
    return got[0] if got else None


async def notify_due(conn: Conn, partition: int, kind: str, ident: uuid.UUID) -> None:
    """Tell the partition's owner (at commit) that a due entry changed: kind "s" schedule, "o"
    one-off execution."""
    await conn.execute(q("notify_due"), {"payload": f"{partition}:{kind}:{ident}"})


async def notify_queued(conn: Conn, payload: str) -> None:
    """Wake dispatchers (at commit): work of this priority (or "buffered") was queued."""
    await conn.execute(q("notify_queued"), {"payload": payload})


async def release_buffered(conn: Conn, schedule_id: uuid.UUID, now: datetime) -> str | None:
    """Overlap buffer_*: queue the schedule's oldest buffered run (the run ahead of it ended),
    waking the dispatchers at commit if there was one (`release_buffered_many` for this one
    schedule: the one release statement). The released run's job type (the state
    counters count it `queued` once committed), or None when none was buffered."""
    await conn.execute(q("lock_buffers"), {"schedule_ids": [schedule_id]})  # before the release's snapshot
    cur = await conn.execute(q("release_buffered_many"), {"schedule_ids": [schedule_id], "now": now})
    got = await cur.fetchone()
    return None if got is None else str(got[0])


async def replace_active(conn: Conn, partition: int, epoch: int, schedule_ids: Sequence[uuid.UUID],
                         now: datetime | None) -> list[str]:
    """Inside a transaction fenced at `epoch`: overlap `replace` stops the schedules' active runs
    (queued and retry_scheduled ones cancelled, `finished_at` = `now`; running ones asked to stop).
    The job type of each run it cancelled (the state counters count them once committed)."""
    cur = await conn.execute(q("replace_active"), {"partition": partition, "epoch": epoch,
                                                   "ids": list(schedule_ids), "now": now})
    return [str(t) for state, t in await cur.fetchall() if state == "cancelled"]


@dataclass(frozen=True, slots=True)
class Event:
    """One audit or alert event to append (`at`: None for the database's time)."""

    kind: str
    tenant: str | None = None
    schedule_id: uuid.UUID | None = None
    execution_id: uuid.UUID | None = None
    partition: int | None = None
    actor: str | None = None
    alert: bool = False
    data: Mapping[str, Any] | None = None
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EventFilter:
    tenant: str | None
    schedule_id: uuid.UUID | None
    execution_id: uuid.UUID | None
    kind: str | None
    alerts_only: bool
    after_id: int
    limit: int


class EventsPort:
    """The events table (audit and alert log). Task-safe (stateless over the pool)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def insert(self, event: Event, conn: Conn | None = None) -> None:
        params = {"tenant": event.tenant, "kind": event.kind, "schedule_id": event.schedule_id,
                  "execution_id": event.execution_id, "partition": event.partition, "actor": event.actor,
                  "alert": event.alert, "data": Jsonb(dict(event.data or {})), "at": event.at}
        # The event is its webhooks' outbox (storage/webhooks.py): appending it is all, here.
        if conn is not None:
            await conn.execute(q("insert_event"), params)
            return
        async with self.db.connection() as c:
            await c.execute(q("insert_event"), params)

    async def list(self, f: EventFilter) -> list[Row]:
        """A page by ascending id after `after_id` (data as JSON text)."""
        async with self.db.connection() as conn:
            return await rows(conn, "api_list_events", {
                "tenant": f.tenant, "schedule_id": f.schedule_id, "execution_id": f.execution_id, "kind": f.kind,
                "alerts_only": f.alerts_only, "after_id": f.after_id, "limit": f.limit})


class ExplainPort:
    """What `explain` reads: a schedule (live or deleted), its events, its partition's ownership
    history, its executions in a window. Events come with `data` parsed (a dict)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def schedule(self, schedule_id: uuid.UUID, tenant: str | None) -> Row | None:
        async with self.db.connection() as conn:
            return await row(conn, "get_schedule_any", {"id": schedule_id, "tenant": tenant})

    async def events(self, schedule_id: uuid.UUID, start: datetime, end: datetime) -> list[Row]:
        """The events explaining [start, end] needs (`explain_events`), oldest first."""
        async with self.db.connection() as conn:
            got = await rows(conn, "explain_events", {"schedule_id": schedule_id, "start": start, "end": end})
        return [{**r, "data": json.loads(r["data"]) if r["data"] else {}} for r in got]

    async def ownership(self, partition: int, end: datetime) -> list[Row]:
        async with self.db.connection() as conn:
            return await rows(conn, "explain_ownership", {"partition": partition, "end": end})

    async def executions(self, schedule_id: uuid.UUID, start: datetime, end: datetime,
                         also_at: Sequence[datetime] = ()) -> list[Row]:
        """Executions whose tick lies in [start, end], and those of the ticks `also_at`."""
        async with self.db.connection() as conn:
            return await rows(conn, "explain_executions", {"schedule_id": schedule_id, "start": start, "end": end,
                                                           "also_at": list(also_at)})
