"""The firing path's storage port: one typed method per fire query (River's driver shape).

What the firer reads: the due index of a partition (`due_schedules`, `due_oneoffs`, streamed in
chunks), one schedule or job after a change (`schedule_for_fire`, `oneoff_for_fire`). What it
writes: one fenced batch (`fire`: mixed ticks, misfire records, one-offs, events), or the
one-statement hot path (`fire_plain_many`: the plain ticks and due one-off jobs of many
partitions at once, each fenced by its own partition's epoch; `fire_plain`: one partition). Rows come back as
NamedTuples (built straight from the driver's tuples: a million-row preload must not pay for a
dict and a dataclass per row).

The fire guard. Every statement that records a cron tick or moves a schedule's cursor
(`fire_ticks_fenced`, `fire_executions`, `advance_schedules`) applies the same guard to the row
it joins: the schedule is still at the version the decision was made from, is not paused or
deleted, and its cursor `schedule_due.next_run_at` still equals the tick the decision started
from (`Tick.cursor`, `ScheduleAdvance.cursor`). So a pause, delete or edit that committed first
is refused for every overlap policy and every misfire record, and the cursor is a
compare-and-set: no code path moves a schedule past a tick it did not record (Temporal's
`LastProcessedTime` rule). The statements that record ticks (`fire_ticks_fenced`,
`fire_executions`) take the guard on the schedule row locked `FOR KEY SHARE`, and insert that
version's payload: the API's `lock_schedule` (FOR UPDATE) of a pause, edit or delete waits for the
fire to commit and then sees (and takes back, `api_unfire_ahead`) the tick queued ahead, or the
fire waits for the change and sees it (issue 47, item 3). The guard is one SQL function,
`cronwheel_fire_guard` (migration 0027), that the three statements call.

Concurrency contract: a FiringPort holds no state beyond its `Database`; task-safe.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from cronwheel.errors import StaleEpoch
from cronwheel.storage.api import replace_active
from cronwheel.storage.db import Database, stale_epoch
from cronwheel.storage.ids import new_execution_id
from cronwheel.storage.queries import q
from cronwheel.times import from_micros


class DueSchedule(NamedTuple):
    """A schedule as the firing path loads it (`due_schedules`, `schedule_for_fire`)."""

    id: uuid.UUID
    cron: str
    timezone: str
    dst_gap: str
    dst_repeated: str | None
    next_run_at: datetime | None
    last_scheduled_for: datetime | None
    misfire_policy: str
    max_catch_up: int
    overlap_policy: str
    jitter_s: float | None
    version: int


class DueOneoff(NamedTuple):
    """A one-off job waiting in `scheduled` (`due_oneoffs`, `oneoff_for_fire`)."""

    id: uuid.UUID
    run_at: datetime


@dataclass(frozen=True, slots=True)
class Tick:
    """One cron tick to record: which schedule, which instant, when to run, in which state.

    `version` and `cursor` are the fire guard: the tick is written only while the schedule is at
    `version` and its `next_run_at` is `cursor` (None: the tick itself, the usual case; a misfire
    record names the first missed tick its decision started from)."""

    schedule_id: uuid.UUID
    scheduled_for: datetime
    run_at: datetime
    state: str = "queued"  # or "skipped" (overlap / misfire records), "scheduled" (buffered)
    state_reason: str | None = None
    trigger: str = "cron"
    version: int = 1
    cursor: datetime | None = None

    @property
    def expected_cursor(self) -> datetime:
        return self.scheduled_for if self.cursor is None else self.cursor


@dataclass(frozen=True, slots=True)
class ScheduleAdvance:
    """Move a schedule's cursor to `next_run_at`, only from `cursor` (None: from
    `last_scheduled_for`, the tick just fired) and only at `version` (the fire guard)."""

    schedule_id: uuid.UUID
    next_run_at: datetime | None
    last_scheduled_for: datetime | None
    version: int = 1
    cursor: datetime | None = None

    @property
    def expected_cursor(self) -> datetime | None:
        return self.last_scheduled_for if self.cursor is None else self.cursor


@dataclass(frozen=True, slots=True)
class PartitionEvent:
    kind: str
    schedule_id: uuid.UUID | None
    alert: bool
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlainTicks:
    """What the one-statement fast path (`fire_ticks_fenced`) writes for one partition: cron
    ticks with nothing special about them (state queued, no overlap policy to apply) as parallel
    columns, Unix seconds, each tick also its schedule's expected cursor (the compare-and-set);
    and the ids of due one-off jobs to queue (`oneoffs`: a job no longer `scheduled`, cancelled
    meanwhile, is left alone)."""

    schedule_ids: list[uuid.UUID]
    ticks: list[float]
    run_ats: list[float]
    nexts: list[float]
    versions: list[int]
    oneoffs: list[uuid.UUID] = dataclasses.field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FireBatchParams:
    partition: int
    epoch: int
    ticks: Sequence[Tick] = ()
    advances: Sequence[ScheduleAdvance] = ()
    replace_schedule_ids: Sequence[uuid.UUID] = ()  # overlap `replace`: stop their active runs
    plain: PlainTicks | None = None
    events: Sequence[PartitionEvent] = ()
    now: datetime | None = None  # the node's clock for decided times (queued_at); None: the database's

    @property
    def only_plain(self) -> bool:
        """Nothing but plain ticks and one-off jobs: `fire_plain` can write it as one statement."""
        return (self.plain is not None and not self.ticks and not self.advances
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
class FireBatchResult:
    fired: tuple[Fired, ...]  # general-path ticks and every one-off job queued
    duplicates: int  # ticks not inserted: already fired, or refused by the fire guard
    advanced: int
    plain_stale: int = 0  # plain ticks not fired: their schedule changed, was paused or deleted
    plain_entered: tuple[tuple[str, str, int], ...] = ()  # plain ticks inserted: (state, job type, count)
    replaced: tuple[str, ...] = ()  # the job type of each run an overlap `replace` cancelled

    @property
    def plain_inserted(self) -> int:
        """Plain ticks inserted (they are not listed in `fired`)."""
        return entered_count(self.plain_entered)


def entered_count(entered: Sequence[tuple[str, str, int]]) -> int:
    """Rows inserted, from the fire statement's (state, job type, count) answer."""
    return sum(n for _state, _type, n in entered)


# schedule id -> (runs in flight, runs buffered)
ActiveCounts = Mapping[uuid.UUID, tuple[int, int]]
# The overlap decision, made above storage inside the fire transaction: counts -> the batch to write.
OverlapDecider = Callable[[FireBatchParams, dict[uuid.UUID, tuple[int, int]]], FireBatchParams]


def _array_literal(items: Iterable[str]) -> str:
    """A PostgreSQL array literal of already-formatted scalars (numbers, UUIDs: no quoting)."""
    return "{" + ",".join(items) + "}"


def _tuple_of(cls: Any) -> Any:
    """A psycopg row factory that builds `cls` (a NamedTuple) from the row tuple, nothing more."""
    make = cls._make
    return lambda _cursor: make


class FiringPort:
    """The queries of the firing path. See the module docstring for the fire guard."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # ------------------------------------------------------------------ reads

    async def due_schedules(self, partition: int, horizon: datetime, after: datetime | None,
                            chunk: int = 5000) -> AsyncIterator[list[DueSchedule]]:
        """Schedules of `partition` whose next tick is in (after, horizon], in chunks."""
        params = {"partition": partition, "horizon": horizon, "after": after}
        async for rows in self._stream("due_schedules", params, DueSchedule, chunk):
            yield rows

    async def due_oneoffs(self, partition: int, horizon: datetime, after: datetime | None,
                          chunk: int = 5000) -> AsyncIterator[list[DueOneoff]]:
        """One-off jobs of `partition` due in (after, horizon], in chunks."""
        params = {"partition": partition, "horizon": horizon, "after": after}
        async for rows in self._stream("due_oneoffs", params, DueOneoff, chunk):
            yield rows

    async def extend_due_partitions(self, windows: list[tuple[int, datetime]], horizon: datetime) -> set[int]:
        """Which partitions have anything due in (their after, horizon]: a superset of what
        `due_schedules` and `due_oneoffs` would return for them (one read for all)."""
        if not windows:
            return set()
        async with self.db.connection() as conn:
            cur = await conn.execute(q("extend_due_partitions"), {
                "partitions": [p for p, _ in windows], "afters": [a for _, a in windows], "horizon": horizon})
            return {int(r[0]) for r in await cur.fetchall()}

    async def schedule_for_fire(self, schedule_id: uuid.UUID) -> DueSchedule | None:
        """A live, unpaused schedule as the firer loads it, or None."""
        async with self.db.connection() as conn:
            async with conn.cursor(row_factory=_tuple_of(DueSchedule)) as cur:
                await cur.execute(q("schedule_for_fire"), {"id": schedule_id})
                row: DueSchedule | None = await cur.fetchone()
                return row

    async def oneoff_for_fire(self, execution_id: uuid.UUID) -> DueOneoff | None:
        """A one-off job still waiting in `scheduled`, or None."""
        async with self.db.connection() as conn:
            async with conn.cursor(row_factory=_tuple_of(DueOneoff)) as cur:
                await cur.execute(q("oneoff_for_fire"), {"id": execution_id})
                row: DueOneoff | None = await cur.fetchone()
                return row

    async def _stream(self, name: str, params: dict[str, Any], cls: Any, chunk: int) -> AsyncIterator[list[Any]]:
        """Rows through a server-side cursor, in chunks, so the caller can yield to its event loop
        between them (a node preloading a million schedules must keep renewing its lease)."""
        async with self.db.transaction() as conn:
            async with conn.cursor(name=f"cw_stream_{uuid.uuid4().hex[:12]}", row_factory=_tuple_of(cls)) as cur:
                await cur.execute(q(name), params)
                while True:
                    rows = await cur.fetchmany(chunk)
                    if not rows:
                        return
                    yield rows

    # ------------------------------------------------------------------ writes

    async def fire(self, p: FireBatchParams, policed: Sequence[uuid.UUID] = (),
                   decide: OverlapDecider | None = None, lock: Sequence[uuid.UUID] = ()) -> FireBatchResult:
        """One fenced transaction (StaleEpoch, nothing written, when `p.epoch` is not the
        partition's). With `decide`: first read the active runs of the `policed` schedules under
        the fence and let `decide` turn them into the batch to write (overlap policies). `lock`:
        the buffer_* schedules among them, whose count is serialised with the release of their
        buffered runs (`lock_buffers`; not replace's, whose cancels touch runs a completion holds)."""
        async with self.db.fenced(p.partition, p.epoch) as conn:
            if decide is not None and lock:
                await conn.execute(q("lock_buffers"), {"schedule_ids": list(lock)})
            if decide is not None and policed:
                counts = await self.active_counts(conn, p.partition, p.epoch, policed)
                p = decide(p, counts)
            return await self.write_fire(conn, p)

    async def fire_plain(self, partition: int, epoch: int, plain: PlainTicks,
                         now: datetime | None = None) -> FireBatchResult:
        """Plain ticks of one partition: `fire_plain_many` for one. Raises StaleEpoch (and
        writes nothing) when `epoch` is no longer the partition's."""
        res = (await self.fire_plain_many([(partition, epoch, plain)], now))[partition]
        if isinstance(res, StaleEpoch):
            raise res
        return res

    async def fire_plain_many(self, batches: Sequence[tuple[int, int, PlainTicks]] | StagedFire,
                              now: datetime | None = None) -> dict[int, FireBatchResult | StaleEpoch]:
        """Plain ticks and due one-off jobs of many partitions, `(partition, epoch, ticks)` each
        (partitions distinct), the hot path: ONE statement and so one transaction and one commit for all of
        them (`fire_ticks_fenced`), same effect per partition as `write_fire` inside its own
        `fenced()`. Each tick is fenced by its own partition's epoch: a partition whose epoch is
        stale answers StaleEpoch and writes nothing, the others are written and committed.
        `batches` may come staged (`stage_fire`): the statement's parameters built beforehand."""
        staged = batches if isinstance(batches, StagedFire) else stage_fire(batches)
        async with self.db.connection() as conn:
            fenced = await _fire_ticks(conn, staged, now)
            out: dict[int, FireBatchResult | StaleEpoch] = {}
            for partition, epoch, plain in staged.batches:
                got = fenced.get(partition)
                if got is None:
                    out[partition] = await stale_epoch(conn, partition, epoch)
                    continue
                adv, entered, queued = got
                inserted = entered_count(entered)
                out[partition] = FireBatchResult(queued, adv - inserted, adv, len(plain.schedule_ids) - adv, entered)
        return out

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

    async def replace_active(self, conn: AsyncConnection[Any], partition: int, epoch: int,
                             schedule_ids: Sequence[uuid.UUID], now: datetime | None = None) -> list[str]:
        """Inside a fenced transaction: overlap `replace` stops the schedules' active runs
        (`finished_at` of the cancelled ones is `now`, the firer's clock); the job type of each
        run it cancelled (storage/api.py `replace_active`)."""
        return await replace_active(conn, partition, epoch, schedule_ids, now)

    async def write_fire(self, conn: AsyncConnection[Any], p: FireBatchParams) -> FireBatchResult:
        """Inside `fenced(p.partition, p.epoch)`: stop replaced runs, insert tick executions (a
        tick already fired, or refused by the fire guard, is left alone), advance the cron
        schedules (compare-and-set on the cursor), queue due one-off jobs, append events. It sends
        no NOTIFY: a notifying transaction takes PostgreSQL's cluster-wide notify lock at commit,
        which serialised the commits of concurrent fire batches; the caller wakes other nodes'
        workers after commit (`notify_queued`)."""
        fired: list[Fired] = []
        dupes = 0
        advanced = 0
        fence = {"partition": p.partition, "epoch": p.epoch}
        replacing = set(p.replace_schedule_ids)
        ticks = p.ticks
        if replacing:
            # Overlap `replace` stops the active runs only for a tick the fire guard accepts (a
            # paused schedule's running work is left alone): the replacing tick is inserted as
            # `scheduled` first, which replace_active spares, then queued like a due one-off.
            ticks = [dataclasses.replace(t, state="scheduled", state_reason=None)
                     if t.schedule_id in replacing and t.state == "queued" else t for t in p.ticks]
        if ticks:
            cur = await conn.execute(
                q("fire_executions"),
                {
                    **fence,
                    "now": p.now,
                    "ids": [new_execution_id() for _ in ticks],
                    "schedule_ids": [t.schedule_id for t in ticks],
                    "scheduled_fors": [t.scheduled_for for t in ticks],
                    "run_ats": [t.run_at for t in ticks],
                    "states": [t.state for t in ticks],
                    "state_reasons": [t.state_reason for t in ticks],
                    "triggers": [t.trigger for t in ticks],
                    "versions": [t.version for t in ticks],
                    "cursors": [t.expected_cursor for t in ticks],
                },
            )
            rows = await cur.fetchall()
            fired.extend(Fired(*r) for r in rows)
            dupes = len(ticks) - len(rows)
        staged = [f for f in fired if f.schedule_id in replacing and f.state == "scheduled"]
        replaced: list[str] = []
        if staged:
            replaced = await self.replace_active(conn, p.partition, p.epoch, [f.schedule_id for f in staged], p.now)
            staged_ids = PlainTicks([], [], [], [], [], [f.id for f in staged])
            got = await _fire_ticks(conn, [(p.partition, p.epoch, staged_ids)], p.now)  # fence held: like a one-off
            queued = {f.id: f.state for f in got.get(p.partition, (0, (), ()))[2]}
            fired = [dataclasses.replace(f, state=queued[f.id]) if f.id in queued else f for f in fired]
        if p.advances:
            cur = await conn.execute(
                q("advance_schedules"),
                {
                    **fence,
                    "ids": [a.schedule_id for a in p.advances],
                    "next_run_ats": [a.next_run_at for a in p.advances],
                    "last_scheduled_fors": [a.last_scheduled_for for a in p.advances],
                    "versions": [a.version for a in p.advances],
                    "cursors": [a.expected_cursor for a in p.advances],
                },
            )
            advanced = cur.rowcount
        plain_stale = 0
        plain_entered: tuple[tuple[str, str, int], ...] = ()
        if p.plain is not None and (p.plain.schedule_ids or p.plain.oneoffs):
            fenced = await _fire_ticks(conn, [(p.partition, p.epoch, p.plain)], p.now)  # fence held
            adv, plain_entered, queued_oneoffs = fenced.get(p.partition, (0, (), ()))
            fired.extend(queued_oneoffs)
            plain_inserted = entered_count(plain_entered)
            advanced += adv
            dupes += adv - plain_inserted
            plain_stale = len(p.plain.schedule_ids) - adv
        for ev in p.events:
            await conn.execute(  # its webhook deliveries come later, from the outbox (storage/webhooks.py)
                q("insert_partition_event"),
                {**fence, "tenant": None, "kind": ev.kind, "schedule_id": ev.schedule_id,
                 "execution_id": None, "actor": "scheduler", "alert": ev.alert, "data": Jsonb(ev.data)},
            )
        return FireBatchResult(tuple(fired), dupes, advanced, plain_stale, plain_entered, tuple(replaced))

    async def set_tick_trace_contexts(self, ticks: Sequence[tuple[uuid.UUID, float, str]]) -> None:
        """Tracing only: store each fired tick's fire-span traceparent, `(schedule_id, tick as
        Unix seconds, traceparent)` each, in one statement after the fire committed."""
        async with self.db.connection() as conn:
            await conn.execute(q("set_tick_trace_contexts"), {
                "schedule_ids": [t[0] for t in ticks], "ticks": [t[1] for t in ticks],
                "trace_contexts": [t[2] for t in ticks]})

    async def notify_queued(self, payload: str) -> None:
        """Wake every node's waiting workers (outside any fire transaction)."""
        async with self.db.connection() as conn:
            await conn.execute(q("notify_queued"), {"payload": payload})


@dataclass(frozen=True, slots=True)
class StagedFire:
    """`fire_plain_many`'s batches, `(partition, epoch, ticks)` each, with every parameter of
    their statement but `now` already built (`stage_fire`): a herd prepared before its instant is
    sent at the instant with no Python work left between (cluster/firing)."""

    batches: tuple[tuple[int, int, PlainTicks], ...]
    params: Mapping[str, str]


def stage_fire(batches: Sequence[tuple[int, int, PlainTicks]]) -> StagedFire:
    """The parameters of `fire_ticks_fenced` for `(partition, epoch, ticks)` batches (partitions
    distinct, else ValueError). Arrays go as array literals, one string each: psycopg's list dumper
    works element by element in Python, which held the event loop for 14% of a 300k burst."""
    parts = [b[0] for b in batches]
    if len(set(parts)) != len(parts):
        raise ValueError(f"one batch per partition, got partitions {parts}")
    tick_parts: list[str] = []
    ids: list[str] = []
    ticks: list[str] = []
    run_ats: list[str] = []
    nexts: list[str] = []
    versions: list[str] = []
    oneoff_parts: list[str] = []
    oneoff_ids: list[str] = []
    for partition, _epoch, plain in batches:
        tick_parts.extend([str(partition)] * len(plain.schedule_ids))
        ids.extend(map(str, plain.schedule_ids))
        ticks.extend(map(repr, plain.ticks))
        run_ats.extend(map(repr, plain.run_ats))
        nexts.extend(map(repr, plain.nexts))
        versions.extend(map(str, plain.versions))
        oneoff_parts.extend([str(partition)] * len(plain.oneoffs))
        oneoff_ids.extend(map(str, plain.oneoffs))
    return StagedFire(tuple(batches), {
        "partitions": _array_literal(map(str, parts)), "epochs": _array_literal(str(b[1]) for b in batches),
        "tick_partitions": _array_literal(tick_parts), "schedule_ids": _array_literal(ids),
        "ticks": _array_literal(ticks), "run_ats": _array_literal(run_ats), "nexts": _array_literal(nexts),
        "versions": _array_literal(versions), "oneoff_partitions": _array_literal(oneoff_parts),
        "oneoff_ids": _array_literal(oneoff_ids),
    })


async def _fire_ticks(conn: AsyncConnection[Any], batches: Sequence[tuple[int, int, PlainTicks]] | StagedFire,
                      now: datetime | None
                      ) -> dict[int, tuple[int, tuple[tuple[str, str, int], ...], tuple[Fired, ...]]]:
    """`fire_ticks_fenced` for `(partition, epoch, ticks)` batches (or their `stage_fire`):
    fenced partition -> (schedules advanced, the tick executions inserted as (state, job type,
    count)..., the one-off jobs queued); a partition missing from the answer was stale (nothing of
    it written)."""
    staged = batches if isinstance(batches, StagedFire) else stage_fire(batches)
    cur = await conn.execute(q("fire_ticks_fenced"), {**staged.params, "now": now})
    return {int(r[0]): (int(r[1]), tuple((str(st), str(jt), int(n)) for st, jt, n in r[2]),
                        tuple(_queued(row) for row in r[3]))
            for r in await cur.fetchall()}


def _queued(row: list[Any]) -> Fired:
    """One one-off row of `fire_ticks_fenced`'s `queued` answer (JSON: times as Unix microseconds;
    schedule_id is NULL for a submitted job, set for overlap replace's staged tick)."""
    ident, sid, scheduled_for, run_at, state, priority, jtype, tenant = row
    return Fired(uuid.UUID(ident), None if sid is None else uuid.UUID(sid),
                 from_micros(scheduled_for), from_micros(run_at), state, priority, jtype, tenant)
