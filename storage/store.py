"""PgStore: the one PostgreSQL implementation of cronwheel's storage port.

Concurrency contract: a PgStore is shared by every task of a node; it holds an async connection
pool and no other mutable state. Each method borrows a connection for one transaction.

Fencing. Writes made on behalf of a partition owner run inside `fenced(partition, epoch)`: the
transaction's first statement share-locks the partition row and checks it still carries the
caller's epoch (else `StaleEpoch`, nothing written). `record_epoch()` (the acquisition update)
conflicts with that lock, so a new owner's epoch cannot land in the middle of an old owner's
batch, and once it has landed every later fenced transaction of the old owner fails its check.
Each fenced statement also names the epoch in its own WHERE clause (defence in depth, and a test
checks every fenced query does). This, not the etcd lease, is what stops a paused node from
firing a tick twice; `UNIQUE (schedule_id, scheduled_for)` is the second wall.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from cronwheel.storage.db import Database, Row, StoreConfig, stale_epoch
from cronwheel.storage.ids import new_execution_id
from cronwheel.storage.partitions import PartitionsPort
from cronwheel.storage.queries import q


@dataclass(frozen=True, slots=True)
class Tick:
    """One cron tick to fire: which schedule, which instant, when to run, in which state."""

    schedule_id: uuid.UUID
    scheduled_for: datetime
    run_at: datetime
    state: str = "queued"  # or "skipped" (overlap / misfire records)
    state_reason: str | None = None
    trigger: str = "cron"


@dataclass(frozen=True, slots=True)
class ScheduleAdvance:
    schedule_id: uuid.UUID
    next_run_at: datetime | None
    last_scheduled_for: datetime | None
    version: int = 1


@dataclass(frozen=True, slots=True)
class PartitionEvent:
    kind: str
    schedule_id: uuid.UUID | None
    alert: bool
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FireBatchParams:
    partition: int
    epoch: int
    ticks: Sequence[Tick] = ()
    advances: Sequence[ScheduleAdvance] = ()
    oneoff_ids: Sequence[uuid.UUID] = ()
    replace_schedule_ids: Sequence[uuid.UUID] = ()  # overlap `replace`: stop their active runs
    plain: PlainTicks | None = None
    events: Sequence[PartitionEvent] = ()

    @property
    def only_plain(self) -> bool:
        """Nothing but plain ticks: `fire_plain` can write it as one statement."""
        return (self.plain is not None and not self.ticks and not self.advances and not self.oneoff_ids
                and not self.replace_schedule_ids and not self.events)


@dataclass(frozen=True, slots=True)
class Fired:
    """An execution that a fire batch made runnable (or recorded as skipped)."""

    id: uuid.UUID
    schedule_id: uuid.UUID | None
    scheduled_for: datetime
    run_at: datetime
    state: str
    priority: str
    type: str
    tenant: str


@dataclass(frozen=True, slots=True)
class PlainTicks:
    """Cron ticks with nothing special about them (state queued, no overlap policy to apply):
    parallel columns, Unix seconds. The fast path of the firing hot loop."""

    schedule_ids: list[uuid.UUID]
    ticks: list[float]
    run_ats: list[float]
    nexts: list[float]
    versions: list[int]


@dataclass(frozen=True, slots=True)
class FireBatchResult:
    fired: tuple[Fired, ...]
    duplicates: int  # ticks that already had an execution (someone fired them before)
    advanced: int
    plain_inserted: int = 0  # plain ticks inserted (they are not listed in `fired`)
    plain_stale: int = 0  # plain ticks not fired: their schedule changed, was paused or deleted


def _array_literal(items: Iterable[str]) -> str:
    """A PostgreSQL array literal of already-formatted scalars (numbers, UUIDs: no quoting)."""
    return "{" + ",".join(items) + "}"


async def _fire_ticks(conn: AsyncConnection[Any], partition: int, epoch: int,
                      plain: PlainTicks) -> tuple[int, int, bool]:
    """`fire_ticks_fenced`: (schedules advanced, executions inserted, fence held). Arrays go as
    array literals, one string each: psycopg's list dumper works element by element in Python,
    which held the event loop for 14% of a 300k burst."""
    cur = await conn.execute(q("fire_ticks_fenced"), {
        "partition": partition, "epoch": epoch, "schedule_ids": _array_literal(map(str, plain.schedule_ids)),
        "ticks": _array_literal(map(repr, plain.ticks)), "run_ats": _array_literal(map(repr, plain.run_ats)),
        "nexts": _array_literal(map(repr, plain.nexts)), "versions": _array_literal(map(str, plain.versions)),
    })
    row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), bool(row[2])


class PgStore(Database):
    """PostgreSQL via psycopg 3 and psycopg_pool. See storage/db.py for fencing."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.partitions = PartitionsPort(self)

    # ------------------------------------------------------------------ firing

    async def fire_batch(self, p: FireBatchParams) -> FireBatchResult:
        """One fenced transaction: `write_fire` alone."""
        async with self.fenced(p.partition, p.epoch) as conn:
            return await self.write_fire(conn, p)

    async def active_counts(
        self, conn: AsyncConnection[Any], partition: int, epoch: int, schedule_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, tuple[int, int]]:
        """Inside a fenced transaction: schedule -> (runs in flight, runs buffered)."""
        if not schedule_ids:
            return {}
        cur = await conn.execute(
            q("active_counts"), {"partition": partition, "epoch": epoch, "ids": list(schedule_ids)}
        )
        return {r[0]: (int(r[1]), int(r[2])) for r in await cur.fetchall()}

    async def write_fire(self, conn: AsyncConnection[Any], p: FireBatchParams) -> FireBatchResult:
        """Inside `fenced(p.partition, p.epoch)`: stop replaced runs, insert tick executions (a
        tick already fired is left alone), advance the cron schedules, queue due one-off jobs,
        append events. It sends no NOTIFY: a notifying transaction takes PostgreSQL's
        cluster-wide notify lock at commit, which serialised the commits of concurrent fire
        batches; the caller wakes other nodes' workers after commit (`notify_queued`)."""
        fired: list[Fired] = []
        dupes = 0
        advanced = 0
        fence = {"partition": p.partition, "epoch": p.epoch}
        if p.replace_schedule_ids:
            await conn.execute(q("replace_active"), {**fence, "ids": list(p.replace_schedule_ids)})
        if p.ticks:
            cur = await conn.execute(
                q("fire_executions"),
                {
                    **fence,
                    "ids": [new_execution_id() for _ in p.ticks],
                    "schedule_ids": [t.schedule_id for t in p.ticks],
                    "scheduled_fors": [t.scheduled_for for t in p.ticks],
                    "run_ats": [t.run_at for t in p.ticks],
                    "states": [t.state for t in p.ticks],
                    "state_reasons": [t.state_reason for t in p.ticks],
                    "triggers": [t.trigger for t in p.ticks],
                },
            )
            rows = await cur.fetchall()
            fired.extend(Fired(*r) for r in rows)
            dupes = len(p.ticks) - len(rows)
        if p.advances:
            cur = await conn.execute(
                q("advance_schedules"),
                {
                    **fence,
                    "ids": [a.schedule_id for a in p.advances],
                    "next_run_ats": [a.next_run_at for a in p.advances],
                    "last_scheduled_fors": [a.last_scheduled_for for a in p.advances],
                    "versions": [a.version for a in p.advances],
                },
            )
            advanced = cur.rowcount
        if p.oneoff_ids:
            cur = await conn.execute(q("queue_oneoffs"), {**fence, "ids": list(p.oneoff_ids)})
            fired.extend(Fired(*r) for r in await cur.fetchall())
        plain_inserted = plain_stale = 0
        if p.plain is not None and p.plain.schedule_ids:
            adv, plain_inserted, _ = await _fire_ticks(conn, p.partition, p.epoch, p.plain)  # fence already held
            advanced += adv
            dupes += adv - plain_inserted
            plain_stale = len(p.plain.schedule_ids) - adv
        for ev in p.events:
            await conn.execute(
                q("insert_partition_event"),
                {**fence, "tenant": None, "kind": ev.kind, "schedule_id": ev.schedule_id,
                 "execution_id": None, "actor": "scheduler", "alert": ev.alert, "data": Jsonb(ev.data)},
            )
        return FireBatchResult(tuple(fired), dupes, advanced, plain_inserted, plain_stale)

    async def fire_plain(self, partition: int, epoch: int, plain: PlainTicks) -> FireBatchResult:
        """Plain ticks only (the hot path): the fenced transaction is ONE statement
        (`fire_ticks_fenced`), same effect as `write_fire` inside `fenced()`. Raises StaleEpoch
        (and writes nothing) when `epoch` is no longer the partition's."""
        async with self.connection() as conn:
            adv, inserted, fenced = await _fire_ticks(conn, partition, epoch, plain)
            if not fenced:
                raise await stale_epoch(conn, partition, epoch)
        return FireBatchResult((), adv - inserted, adv, inserted, len(plain.schedule_ids) - adv)

    async def notify_queued(self, payload: str) -> None:
        """Wake every node's waiting workers (outside any fire transaction)."""
        async with self.connection() as conn:
            await conn.execute(q("notify_queued"), {"payload": payload})

    # ------------------------------------------------------------------ generic helpers

    async def fetch_all(self, name: str, params: dict[str, Any]) -> list[Row]:
        async with self.connection() as conn:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(q(name), params)
                return list(await cur.fetchall())

    async def stream(self, name: str, params: dict[str, Any], chunk: int = 5000) -> AsyncIterator[list[Row]]:
        """Rows of a query in chunks, through a server-side cursor, so a caller can yield to its
        event loop between chunks (a node preloading a million schedules must keep renewing its
        lease meanwhile)."""
        async with self.transaction() as conn:
            async with conn.cursor(name=f"cw_stream_{uuid.uuid4().hex[:12]}", row_factory=dict_row) as cur:
                await cur.execute(q(name), params)
                while True:
                    rows = await cur.fetchmany(chunk)
                    if not rows:
                        return
                    yield rows

    async def fetch_one(self, name: str, params: dict[str, Any]) -> Row | None:
        async with self.connection() as conn:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(q(name), params)
                return await cur.fetchone()

    async def insert_event(
        self,
        kind: str,
        *,
        tenant: str | None = None,
        schedule_id: uuid.UUID | None = None,
        execution_id: uuid.UUID | None = None,
        partition: int | None = None,
        actor: str | None = None,
        alert: bool = False,
        data: dict[str, Any] | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> None:
        params = {
            "tenant": tenant, "kind": kind, "schedule_id": schedule_id,
            "execution_id": execution_id, "partition": partition, "actor": actor,
            "alert": alert, "data": Jsonb(data or {}),
        }
        if conn is not None:
            await conn.execute(q("insert_event"), params)
            return
        async with self.connection() as c:
            await c.execute(q("insert_event"), params)
