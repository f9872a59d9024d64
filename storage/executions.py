"""The API's queries on executions (api.sql, executions.sql): one typed method per query.

Rows are decoded by `storage.api.rows` (dicts, JSON as text). Writes take `now` from the caller.
The overlap reads and writes of a manual trigger are the firing path's own statements
(`active_counts`, `replace_active`, fenced), run under the partition's current epoch
(`Database.at_current_epoch`), so a trigger and a fire decide overlap by the same rule.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString

from cronwheel.storage.api import (
    Conn,
    Row,
    decoding_cursor,
    json_text,
    notify_due,
    notify_queued,
    release_buffered,
    replace_active,
    row,
    rows,
)
from cronwheel.storage.db import Database
from cronwheel.storage.notifications import oneoff_batch_payloads, queued_at_payload
from cronwheel.storage.queries import q
from cronwheel.times import to_micros

# The columns of a brief insert's rows: decoding all 31 columns of 1,000 returned rows cost a
# SubmitJobs call more than its answer needs. The node builds them from its own jobs (`_brief_rows`):
# PostgreSQL returns only which jobs were inserted, and only when some were not (`_insert_query`).
BRIEF_COLUMNS: LiteralString = "id, tenant, idempotency_key, state, partition, run_at, priority"


# A state's bit in unique_states: the mirror of cronwheel_unique_holds (migration 0015, the one SQL
# definition); tests/integration/test_unique_jobs.py checks that the two agree.
UNIQUE_STATE_BITS: dict[str, int] = {
    "scheduled": 1, "queued": 2, "running": 4, "retry_scheduled": 8, "succeeded": 16, "failed": 32,
    "dead": 64, "cancelled": 128, "skipped": 256,
}

_KEY_CONFLICT: LiteralString = "ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
_KEY_ORDER: LiteralString = 'ORDER BY v.tenant COLLATE "C", v.idempotency_key COLLATE "C", v.ord'
_UNIQUE_READS: tuple[tuple[LiteralString, LiteralString], ...] = (
    ("decode(j->>17, 'hex')", "NULL::bytea"), ("(j->>18)::smallint", "NULL::smallint"))


def unique_states_mask(states: Sequence[str]) -> int:
    """The unique_states bitmask of a set of state names (KeyError on an unknown one)."""
    mask = 0
    for s in states:
        mask |= UNIQUE_STATE_BITS[s]
    return mask


# The brief statement's answer: no row when every job was inserted (the common case: nothing to
# send or parse), else one row, `inserted`, the ids of the jobs inserted (an empty array: none).
# `sent` is the number of jobs in the array (`_many`); a job left out by ON CONFLICT DO NOTHING (a
# taken key) or by the `unless_quota` guard makes the count short. The ids are gathered only then
# (an aggregate would gather them every time: measured 30 us more per 1,000 rows, for nothing).
_BRIEF_HEAD: LiteralString = "INSERT INTO executions ("
_BRIEF_TAIL: LiteralString = "RETURNING *"
_BRIEF_ANSWER: LiteralString = ("RETURNING id)\nSELECT ARRAY(SELECT id FROM ins) AS inserted "
                                "WHERE (SELECT count(*) FROM ins) < %(sent)s::bigint")
# The `unless_quota` guard's test, as insert_submitted_many spells it. The fast path reads it back
# in the SAME statement (`_insert_query(guarded=True)`: column `quota`): a quota read in a statement
# of its own took another snapshot than the guard, so a quota set or cleared between the two made
# the node take the counted path after the guard had inserted everything (the same ids again: a
# duplicate-key error for stored jobs), or answer "taken" for jobs the guard had refused (issue 47
# item 7).
_QUOTA_FOUND: LiteralString = ("EXISTS (\n           SELECT 1 FROM tenants t WHERE t.id = ANY(%(tenants)s::text[]) "
                               "AND t.max_executions_per_day IS NOT NULL)")


def _insert_query(brief: bool, unique: bool = False, guarded: bool = False) -> LiteralString:
    """insert_submitted_many; when `brief`, wrapped as `WITH ins AS (<the insert> RETURNING id)`
    and answering only which jobs were inserted when some were not (_BRIEF_ANSWER; `_brief_rows`
    builds the rows). With `unique` (a job of the
    group carries a unique key) its conflict clause has no target, so a taken unique key inserts
    nothing too (PostgreSQL takes one arbiter index, or all of them), and its rows go in key
    order. A group without unique jobs keeps the single arbiter and reads no unique column (NULL
    constants instead): it pays nothing for the feature (bench/submit_unique.py --statement)."""
    out = q("insert_submitted_many")
    assert out.count(_BRIEF_HEAD) == 1 and out.endswith(_BRIEF_TAIL) and _QUOTA_FOUND in out, \
        "insert_submitted_many must be one INSERT INTO executions (...), guarded by _QUOTA_FOUND, ending RETURNING *"
    if brief:
        out = out.replace(_BRIEF_HEAD, "WITH ins AS (" + _BRIEF_HEAD).removesuffix(_BRIEF_TAIL) + _BRIEF_ANSWER
        if guarded:  # a quota stops the insert, so the count is short and the row is answered
            out = out.replace(" AS inserted ", " AS inserted, " + _QUOTA_FOUND + " AS quota ")
    elif guarded:  # every row inserted, or one row of NULLs: each with the guard's finding
        out = ("WITH ins AS (" + out + ")\nSELECT i.*, q.quota FROM (SELECT " + _QUOTA_FOUND
               + " AS quota) AS q LEFT JOIN ins AS i ON true")
    if not unique:  # constants instead of two JSON reads per row: what reading them cost a plain job
        for read, null in _UNIQUE_READS:
            assert read in out, f"insert_submitted_many must read {read}"
            out = out.replace(read, null)
    else:
        # Rows are inserted, and a taken key waited for, in unique-key order: two groups holding
        # the same keys take them in one order and never deadlock (in item order, a group holding
        # A then B and another holding B then A each wait for the other). Among jobs with one key
        # the earliest item still wins.
        bare = out.replace(_KEY_CONFLICT, "ON CONFLICT DO NOTHING").replace(_KEY_ORDER, "ORDER BY v.unique_key, "
                                                                           + _KEY_ORDER.removeprefix("ORDER BY "))
        assert _KEY_CONFLICT not in bare and "ORDER BY v.unique_key, v.tenant" in bare, \
            "insert_submitted_many must end with its key order and the idempotency key's conflict clause"
        out = bare
    return out


class _QuotaFound(Exception):  # noqa: N818 - a marker: roll back, the counted path follows
    pass


def announced(jobs: Iterable[tuple[int, uuid.UUID, datetime, str, str]], now: datetime
              ) -> tuple[list[tuple[int, uuid.UUID, datetime]], list[str]]:
    """What a submit announces at commit (`notify_submitted`), from its jobs' (partition, id,
    run_at, state, priority): its scheduled jobs (partition, id, run_at) for their owners, and
    the cronwheel_queued payloads: each priority queued due now, and `at:` the soonest run_at of
    those queued ahead of it (cluster/commands/values.py QUEUED_AT_SUBMIT_WITHIN), so waiting
    calls wake when it is due, not now."""
    due: list[tuple[int, uuid.UUID, datetime]] = []
    now_priorities: set[str] = set()
    soonest: datetime | None = None
    for partition, ident, run_at, state, priority in jobs:
        if state == "scheduled":
            due.append((partition, ident, run_at))
        elif state == "queued":
            if run_at <= now:
                now_priorities.add(priority)
            elif soonest is None or run_at < soonest:
                soonest = run_at
    payloads = sorted(now_priorities)
    if soonest is not None:
        payloads.append(queued_at_payload(soonest.timestamp()))
    return due, payloads


def _announced(jobs: Sequence[SubmittedJob], now: datetime) -> tuple[list[tuple[int, uuid.UUID, datetime]], list[str]]:
    return announced(((j.partition, j.id, j.run_at, j.state, j.priority) for j in jobs), now)


def _any_unique(jobs: Sequence[SubmittedJob]) -> bool:
    return any(j.unique_key is not None for j in jobs)


def _brief_rows(jobs: Sequence[SubmittedJob], answer: Sequence[Row]) -> list[Row]:
    """The rows of a brief insert (BRIEF_COLUMNS, the types psycopg would decode) from the jobs
    sent and the statement's answer (_BRIEF_ANSWER): every job when it is empty, else those whose
    id it names. run_at is the job's own: the statement stores exactly its `to_micros`."""
    if answer:
        ids = set(answer[0]["inserted"])
        jobs = [j for j in jobs if j.id in ids]
    return [{"id": j.id, "tenant": j.tenant, "idempotency_key": j.idempotency_key, "state": j.state,
             "partition": j.partition, "run_at": j.run_at, "priority": j.priority} for j in jobs]


@dataclass(slots=True)
class SubmittedJob:
    """A one-off job from SubmitJob, validated (payload: JSON text)."""

    id: uuid.UUID
    tenant: str
    type: str
    payload: str
    partition: int
    run_at: datetime
    priority: str
    state: str  # queued or scheduled (waiting: it names upstreams)
    max_attempts: int
    retry_initial_s: float
    retry_multiplier: float
    retry_max_s: float
    timeout_s: float | None
    idempotency_key: str | None
    trace_context: str | None = None  # W3C traceparent of its fire span (tracing on only)
    unique_key: bytes | None = None  # unique jobs: sha256 (cluster/commands/unique.py)
    unique_states: int | None = None  # with unique_key: the UNIQUE_STATE_BITS it holds the key in
    concurrency_key: str | None = None  # with concurrency_limit (both or neither): the claim's key cap
    concurrency_limit: int | None = None
    # Dependencies (cluster/commands/dependencies.py): the upstreams named (ids or idempotency
    # keys, as given) and the policy; a job with upstreams is inserted `waiting`.
    depends_on: tuple[str, ...] = ()
    dependency_policy: str | None = None
    target: str | None = None  # an HTTP target's JSON (type 'http', issue 50)
    queue: str = "default"  # the queue a worker names to lease it (cluster/commands/lanes.py)
    required_capabilities: str = ""  # canonical set (lanes.capability_set); registered first


@dataclass(frozen=True, slots=True)
class ManualRun:
    """One execution of a schedule made by hand (TriggerSchedule)."""

    id: uuid.UUID
    schedule_id: uuid.UUID
    payload: str | None  # None: the schedule's
    scheduled_for: datetime
    state: str
    state_reason: str
    idempotency_key: str | None


@dataclass(frozen=True, slots=True)
class Backfill:
    schedule_id: uuid.UUID
    ids: Sequence[uuid.UUID]
    scheduled_fors: Sequence[datetime]
    run_ats: Sequence[datetime]
    now: datetime


@dataclass(frozen=True, slots=True)
class Retry:
    id: uuid.UUID
    state: str  # queued or retry_scheduled
    run_at: datetime
    additional_attempts: int
    reason: str
    now: datetime


@dataclass(frozen=True, slots=True)
class ExecutionFilter:
    tenant: str | None
    schedule_id: uuid.UUID | None
    states: Sequence[str] | None
    type: str | None
    scheduled_from: datetime | None
    scheduled_until: datetime | None
    before_scheduled_for: datetime | None
    before_id: uuid.UUID | None
    limit: int
    max_bytes: int | None = None  # the page's payloads, checkpoints, results and errors (`list`)


KNOWN_CAPABILITY_SETS = 10_000  # sets a port remembers as registered (ExecutionsPort.register_capability_sets)


class ExecutionsPort:
    """Executions as the API reads and writes them. Task-safe: stateless over the pool but for
    the capability sets it registered (only ever added to, on the event loop)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._known_sets: set[str] = set()

    async def get(self, execution_id: uuid.UUID) -> Row | None:
        """One execution of any tenant (the caller checks the tenant)."""
        async with self.db.connection() as conn:
            return await row(conn, "api_get_execution", {"id": execution_id})

    async def lock(self, conn: Conn, execution_id: uuid.UUID) -> Row | None:
        return await row(conn, "api_lock_execution", {"id": execution_id})

    async def by_idempotency_key(self, conn: Conn, tenant: str, key: str) -> Row | None:
        return await row(conn, "api_by_idempotency_key", {"tenant": tenant, "idempotency_key": key})

    async def register_capability_sets(self, sets: Sequence[str]) -> None:
        """Make the capability sets (canonical, non-empty) known to the claim, committed before
        the runs requiring them are written (`register_capability_sets`). A set this port
        registered is not sent again: a row of capability_sets is never deleted, and a submit
        requiring a known set (most of them) then costs no round trip more than one requiring
        none. Bounded: past KNOWN_CAPABILITY_SETS it starts over (a set is sent again, harmless)."""
        new = [s for s in sets if s not in self._known_sets]
        if not new:
            return
        async with self.db.connection() as conn:  # autocommit: committed when it returns
            await conn.execute(q("register_capability_sets"), {
                "sets": new, "items": ["{" + s + "}" for s in new]})
        if len(self._known_sets) + len(new) > KNOWN_CAPABILITY_SETS:
            self._known_sets.clear()
        self._known_sets.update(new)

    async def insert_submitted_many(self, conn: Conn, jobs: Sequence[SubmittedJob], now: datetime,
                                    brief: bool = False) -> list[Row]:
        """Insert every job in ONE statement (`insert_submitted_many`); the rows inserted, in no
        particular order. A job whose (tenant, idempotency key) is taken (by a committed row, or
        by an earlier job of `jobs`) is left out: read it back with `by_idempotency_keys`.
        `brief`: the rows hold only BRIEF_COLUMNS (what a SubmitJobs answer needs), built from
        `jobs` (`_brief_rows`): PostgreSQL returns nothing when every job was inserted, else
        the inserted ids."""
        if not jobs:
            return []
        cur = decoding_cursor(conn)
        async with cur:
            await cur.execute(_insert_query(brief, _any_unique(jobs)), {**self._many(jobs, now), "unless_quota": False})
            got = list(await cur.fetchall())
        return _brief_rows(jobs, got) if brief else got

    @staticmethod
    def _many(jobs: Sequence[SubmittedJob], now: datetime) -> dict[str, object]:
        """The parameters of `insert_submitted_many`: the jobs as one JSON array (see the query),
        and `sent`, their number (the brief statement's, `_insert_query`)."""
        items: list[list[object]] = []
        for j in jobs:
            item: list[object] = [str(j.id), j.tenant, j.type, j.payload, j.partition, to_micros(j.run_at), j.priority,
                                  j.state, j.max_attempts, j.retry_initial_s, j.retry_multiplier, j.retry_max_s,
                                  j.timeout_s, j.idempotency_key, j.trace_context, j.concurrency_key,
                                  j.concurrency_limit]
            if j.unique_key is not None or j.target is not None or j.queue != "default" or j.required_capabilities:
                item += [j.unique_key.hex() if j.unique_key is not None else None, j.unique_states]
            if j.target is not None or j.queue != "default" or j.required_capabilities:
                item.append(j.target)
            if j.queue != "default" or j.required_capabilities:
                item += [j.queue, j.required_capabilities]
            items.append(item)
        doc = json.dumps(items, ensure_ascii=False, allow_nan=False)
        return {"jobs": doc, "tenants": sorted({j.tenant for j in jobs}), "now": now, "sent": len(jobs)}

    async def insert_unless_quota(self, jobs: Sequence[SubmittedJob], now: datetime,
                                  brief: bool = False) -> list[Row] | None:
        """The fast path of a submit group: ONE round trip (`insert_submitted_many` guarded by
        `unless_quota`, answering whether the guard found a quota in its own snapshot, and the
        coalesced notifications, as one `pipelined_transaction`; psycopg's `transaction()` around
        them took four). None, and nothing inserted, when one of the jobs'
        tenants has a daily quota: the caller takes the counted path (`insert_submitted_many` under
        `lock_quotas`). Otherwise the rows inserted (a job whose key was taken is left out, as in
        `insert_submitted_many`). The notifications name every job of `jobs` as planned (queued
        priorities; scheduled jobs with their run_at): one that ends up not inserted (a taken key, the
        quota guard) makes a wake-up with nothing to do and an armed id the fire statement ignores (it
        queues only `scheduled` rows that exist). `brief`: as for `insert_submitted_many`."""
        if not jobs:
            return []
        async with self.db.connection() as conn:
            ins = decoding_cursor(conn)
            async with self.db.pipelined_transaction(conn):
                await ins.execute(_insert_query(brief, _any_unique(jobs), guarded=True),
                                  {**self._many(jobs, now), "unless_quota": True})
                await self.notify_submitted(conn, *_announced(jobs, now))
            got = list(await ins.fetchall())
        if any(r.pop("quota") for r in got):  # the guard's own finding: nothing was inserted
            return None
        if not brief:
            return [r for r in got if r["id"] is not None]
        return _brief_rows(jobs, got)

    async def insert_chunks_unless_quota(self, chunks: Iterator[Sequence[SubmittedJob]], now: datetime,
                                         brief: bool = False) -> list[Row] | None:
        """`insert_unless_quota` for jobs that come as a lazy iterator of chunks (SubmitJobs of
        more than SUBMIT_CHUNK jobs, cluster/commands/runs.py): each chunk's insert is sent as soon
        as the chunk is drawn, in pipeline mode, so drawing the next one (the caller validating
        it) runs while PostgreSQL writes the ones before it. Measured on 1,000 jobs with 10 ms of
        validation: 28.7 ms one insert after all of it, 19.2 ms in four chunks.

        One explicit transaction (`pipelined_transaction(explicit=True)`: BEGIN ... COMMIT inside
        the pipeline), so that an exception raised while drawing a chunk (a bad job) rolls back
        the chunks already sent: a pipeline's implicit transaction would be committed by the Sync
        that ends it. The daily quotas are read once, after the last chunk, for every tenant of
        the jobs; any quota rolls it all back and returns None (the caller takes the counted
        path), so no chunk is written by the fast path while another is refused (a guard per
        insert would read the tenants in a snapshot of its own). No chunk may hold a unique job:
        their rows must go in one key order across the whole group (`_insert_query`)."""
        inserts: list[tuple[Sequence[SubmittedJob], Any]] = []
        drawn: list[SubmittedJob] = []
        async with self.db.connection() as conn:
            try:
                async with self.db.pipelined_transaction(conn, explicit=True):
                    for chunk in chunks:
                        if not chunk:
                            continue
                        if _any_unique(chunk):
                            raise ValueError("insert_chunks_unless_quota: a chunk holds a unique job")
                        ins = decoding_cursor(conn)
                        await ins.execute(_insert_query(brief), {**self._many(chunk, now), "unless_quota": False})
                        inserts.append((chunk, ins))
                        drawn.extend(chunk)
                    await self.notify_submitted(conn, *_announced(drawn, now))
                    quota = await conn.execute(q("api_daily_quotas"), {"tenants": sorted({j.tenant for j in drawn})})
                    if await quota.fetchall():
                        raise _QuotaFound
            except _QuotaFound:
                return None
            out: list[Row] = []
            for chunk, ins in inserts:
                got = list(await ins.fetchall())
                out += _brief_rows(chunk, got) if brief else got
            return out

    async def by_idempotency_keys(self, conn: Conn, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Row]:
        """The executions that (tenant, idempotency key) pairs name, by pair (missing: none)."""
        if not keys:
            return {}
        got = await rows(conn, "api_by_idempotency_keys", {"tenants": [t for t, _ in keys],
                                                            "idempotency_keys": [k for _, k in keys]})
        return {(r["tenant"], r["idempotency_key"]): r for r in got}

    async def by_unique_keys(self, conn: Conn, keys: Sequence[bytes]) -> dict[bytes, Row]:
        """The executions that hold these unique keys now (in their unique states), by key."""
        if not keys:
            return {}
        got = await rows(conn, "api_by_unique_keys", {"unique_keys": list(keys)})
        return {bytes(r["unique_key"]): r for r in got}

    async def daily_quotas(self, conn: Conn, tenants: Sequence[str]) -> dict[str, int]:
        """max_executions_per_day of those of `tenants` that have one (no lock)."""
        got = await rows(conn, "api_daily_quotas", {"tenants": list(tenants)})
        return {r["tenant"]: int(r["max_executions_per_day"]) for r in got}

    async def lock_quotas(self, conn: Conn, tenants: Sequence[str]) -> None:
        """Serialise these tenants' quota checks until commit (advisory locks, not row locks):
        call before `used_today` in the same transaction."""
        if tenants:
            await rows(conn, "api_lock_quotas", {"tenants": list(tenants)})

    async def used_today(self, conn: Conn, tenants: Sequence[str], at: datetime) -> dict[str, int]:
        """Executions each tenant with a quota created on the UTC day of `at` (the daily quota's
        count: the day's counter, which retention does not lower)."""
        got = await rows(conn, "api_used_today", {"tenants": list(tenants), "at": at})
        return {r["tenant"]: int(r["used"]) for r in got}

    async def notify_submitted(self, conn: Conn, due: Sequence[tuple[int, uuid.UUID, datetime]],
                               queued: Sequence[str]) -> None:
        """At commit, coalesced: the partition owners learn of the scheduled one-offs `due`
        (partition, id, run_at) with their run_at (no lookup per job), and dispatchers wake once
        per cronwheel_queued payload (`announced`: a queued priority, or `at:` an instant). One
        statement per kind, whatever the number of jobs."""
        if due:
            await conn.execute(q("notify_due_many"), {"payloads": oneoff_batch_payloads(due)})
        if queued:
            await conn.execute(q("notify_queued_many"), {"payloads": list(queued)})  # `announced`: distinct

    async def insert_run(self, conn: Conn, run: ManualRun, now: datetime) -> Row | None:
        """None when the tick or the idempotency key is taken."""
        return await row(conn, "api_insert_run", {
            "id": run.id, "schedule_id": run.schedule_id,
            "payload": json_text(run.payload) if run.payload is not None else None,
            "scheduled_for": run.scheduled_for, "state": run.state, "state_reason": run.state_reason,
            "trigger": "manual", "idempotency_key": run.idempotency_key, "now": now})

    async def backfill(self, conn: Conn, b: Backfill) -> list[tuple[uuid.UUID, datetime]]:
        """(id, tick) of the executions created, in tick order; taken ticks are left alone."""
        got = await rows(conn, "api_backfill_executions", {
            "schedule_id": b.schedule_id, "now": b.now, "ids": list(b.ids),
            "scheduled_fors": list(b.scheduled_fors), "run_ats": list(b.run_ats)})
        return sorted(((r["id"], r["scheduled_for"]) for r in got), key=lambda r: r[1])

    async def cancel(self, conn: Conn, execution_id: uuid.UUID, reason: str, now: datetime) -> Row | None:
        """Cancel an unstarted execution, or ask a running one to stop; None if it is finished
        (or already asked to stop): the caller decides that under the row lock first."""
        return await row(conn, "api_cancel_executions", {"id": execution_id, "schedule_id": None, "now": now,
                                                          "reason": reason})

    async def cancel_pending_of_schedule(self, conn: Conn, schedule_id: uuid.UUID, reason: str,
                                         now: datetime) -> int:
        """Cancel a schedule's unfinished executions (running ones: cancel_requested); how many."""
        return len(await rows(conn, "api_cancel_executions",
                              {"id": None, "schedule_id": schedule_id, "reason": reason, "now": now}))

    async def retry(self, conn: Conn, r: Retry) -> Row | None:
        return await row(conn, "api_retry_execution", {
            "id": r.id, "state": r.state, "run_at": r.run_at, "now": r.now, "additional": r.additional_attempts,
            "reason": r.reason})

    async def list(self, f: ExecutionFilter) -> tuple[list[Row], bool]:
        """A page by (scheduled_for, id) descending, before the cursor: at most `limit` rows and,
        past the first, only while their payload, checkpoint, result and error add up to at most
        `max_bytes`; and whether more rows follow. The keys and sizes are read first, through a
        server-side cursor in growing batches (api_list_executions), then the rows that fit: the
        node holds one page's bytes, whatever the rows' sizes."""
        params = {"tenant": f.tenant, "schedule_id": f.schedule_id, "states": list(f.states) if f.states else None,
                  "type": f.type, "from": f.scheduled_from, "until": f.scheduled_until,
                  "before_scheduled_for": f.before_scheduled_for, "before_id": f.before_id, "limit": f.limit + 1}
        cap = f.max_bytes if f.max_bytes is not None else float("inf")
        ids: list[uuid.UUID] = []
        more, total, batch = False, 0, 8
        async with self.db.transaction() as conn:
            async with conn.cursor(name="api_list_executions") as cur:
                await cur.execute(q("api_list_executions"), params)
                while not more:
                    got = await cur.fetchmany(batch)
                    for ident, _, size in got:
                        total += size
                        if len(ids) == f.limit or (ids and total > cap):
                            more = True
                            break
                        ids.append(ident)
                    if len(got) < batch:
                        break
                    batch = min(batch * 2, 256)
            return (await rows(conn, "api_executions_by_ids", {"ids": ids}) if ids else []), more

    async def active_counts(self, conn: Conn, partition: int, epoch: int, schedule_id: uuid.UUID) -> tuple[int, int]:
        """(runs in flight, runs buffered) of one schedule: the firing path's `active_counts`,
        under `epoch` (from `Database.at_current_epoch` in the same transaction)."""
        r = await row(conn, "active_counts", {"partition": partition, "epoch": epoch, "ids": [schedule_id]})
        return (int(r["running"]), int(r["buffered"])) if r else (0, 0)

    async def replace_active(self, conn: Conn, partition: int, epoch: int, schedule_id: uuid.UUID,
                             now: datetime) -> list[str]:
        """Overlap `replace` for one schedule (storage/api.py `replace_active`, as the firing path):
        the job type of each run it cancelled."""
        return await replace_active(conn, partition, epoch, [schedule_id], now)

    async def release_buffered(self, conn: Conn, schedule_id: uuid.UUID, now: datetime) -> str | None:
        """Queue the oldest buffered run of the schedule (the run ahead of it ended), waking the
        dispatchers at commit: its job type, or None (storage/api.py `release_buffered`)."""
        return await release_buffered(conn, schedule_id, now)

    async def notify_queued(self, conn: Conn, priority: str) -> None:
        await notify_queued(conn, priority)

    async def notify_due(self, conn: Conn, partition: int, execution_id: uuid.UUID) -> None:
        """At commit, the partition's owner reloads the one-off execution."""
        await notify_due(conn, partition, "o", execution_id)
