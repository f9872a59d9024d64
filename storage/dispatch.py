"""DispatchPort: the dispatch domain's queries (storage/sql/queries/dispatch.sql), one typed
method each.

Workers' calls (claim, heartbeat, checkpoint, finish) and the reaper's rounds run as
multi-statement transactions that the caller opens (`Database.transaction()` or
`Database.fenced()`), so the methods that belong in one take its connection first; the read-only
metrics queries borrow their own. Every time a query decides by (`run_at <= now`, lease
deadlines, `started_at`, `finished_at`, reap cut-offs, the dead man's switch) is `now`, passed by
the caller from its `Clock`: node time everywhere, and pinned in tests. The retry policy is
never computed here: the caller decides state and `run_at`, the SQL applies them.

Concurrency: task-safe (it holds only the Database).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from cronwheel.storage.api import release_buffered
from cronwheel.storage.db import Database, Pending, price_out_seqscans
from cronwheel.storage.errors import map_error
from cronwheel.storage.queries import q

Conn = AsyncConnection[Any]


class Leased(NamedTuple):
    """One leased run as `claim` returns it: ids, JSON as text, times as epoch seconds (the
    caller only forwards them)."""

    id: str
    schedule_id: str | None
    tenant: str
    type: str
    payload: str
    scheduled_for: float
    run_at: float
    attempt: int
    max_attempts: int
    fencing_token: int
    checkpoint: str | None
    lease_expires: float
    timeout_s: float | None
    priority: str
    trigger: str
    started_at: float
    trace_context: str | None  # W3C traceparent (cronwheel/tracing.py); None: not traced
    target: str | None = None  # an HTTP target's JSON (type 'http', issue 50); None: a job type's run


@dataclass(frozen=True, slots=True)
class ClaimParams:
    worker: str
    priorities: Sequence[str]  # poll order, drawn by the caller
    types: Sequence[str] | None  # None: any type
    limit: int
    lease_s: float
    tenant: str | None  # None: any tenant
    now: datetime
    fair_tau_s: float  # the fair share's memory: a tenant's served count decays by exp(-age / this)
    max_bytes: int | None = None  # past the first run, payloads and checkpoints up to this (None: no cap)
    queues: Sequence[str] = ("default",)  # the worker's queues (cluster/commands/lanes.py)
    capabilities: Sequence[str] = ()  # what the worker advertises: it takes runs requiring a subset
    slots: Sequence[tuple[str, int]] = ()  # (queue, n): at most n runs of the queue held by the worker


@dataclass(frozen=True, slots=True)
class TokenCall:
    """A worker call on one run, checked against its current token, owner and state."""

    id: uuid.UUID
    token: int
    worker: str
    tenant: str | None


@dataclass(frozen=True, slots=True)
class RunningRun:
    """A running run locked before finishing it (`lock_running`)."""

    id: uuid.UUID
    schedule_id: uuid.UUID | None
    tenant: str
    partition: int
    attempt: int
    max_attempts: int
    retry_initial_s: float
    retry_multiplier: float
    retry_max_s: float
    cancel_requested: bool
    type: str = ""  # job type (metrics labels)


@dataclass(frozen=True, slots=True)
class FinishParams:
    id: uuid.UUID
    state: str
    reason: str | None
    result: Any  # a JSON value or None
    error: str | None
    error_type: str | None
    run_at: datetime | None  # the retry's time (retry_scheduled only)
    finished_at: datetime | None  # terminal states only
    now: datetime


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """The recorded outcome of a run (`finish`, `finished_outcome`)."""

    state: str
    run_at: datetime | None
    attempt: int
    max_attempts: int
    fencing_token: int = 0


@dataclass(frozen=True, slots=True)
class TokenState:
    fencing_token: int
    lease_owner: str | None
    state: str
    type: str = ""


@dataclass(frozen=True, slots=True)
class Completion:
    id: uuid.UUID
    token: int
    result: Any  # a JSON value or None


@dataclass(frozen=True, slots=True)
class Completed:
    id: uuid.UUID
    schedule_id: uuid.UUID | None
    type: str = ""
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class ReapCandidate:
    """A running run past its lease ('expired') or its timeout ('timed_out'), locked."""

    id: uuid.UUID
    kind: str
    attempt: int
    max_attempts: int
    cancel_requested: bool
    timeout_s: float | None
    retry_initial_s: float
    retry_multiplier: float
    retry_max_s: float
    schedule_id: uuid.UUID | None
    tenant: str


@dataclass(frozen=True, slots=True)
class ReapApply:
    """The state the retry policy decided for one reaped run."""

    id: uuid.UUID
    partition: int
    epoch: int
    state: str
    reason: str
    error: str
    error_type: str
    run_at: datetime | None
    queued_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Reaped:
    id: uuid.UUID
    state: str
    schedule_id: uuid.UUID | None
    tenant: str
    priority: str
    type: str = ""


@dataclass(frozen=True, slots=True)
class SuccessAlert:
    schedule_id: uuid.UUID
    tenant: str
    last_success_at: datetime | None
    within_s: float


@dataclass(frozen=True, slots=True)
class QueueDepth:
    priority: str
    queued: int
    oldest_run_at: datetime | None


def claim_args(p: ClaimParams) -> dict[str, Any]:
    """The `claim` statement's parameters."""
    return {"priorities": list(p.priorities), "types": list(p.types) if p.types else None, "limit": p.limit,
            "tenant": p.tenant, "worker": p.worker, "lease_s": p.lease_s, "now": p.now,
            "fair_tau_s": p.fair_tau_s, "max_bytes": p.max_bytes, "queues": list(p.queues),
            "capabilities": list(p.capabilities), "slot_queues": [name for name, _ in p.slots],
            "slot_counts": [n for _, n in p.slots]}


def _jsonb(value: Any) -> Jsonb | None:
    return Jsonb(value) if value is not None else None


class DispatchPort:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ------------------------------------------------------------------ worker calls

    async def lock_claim_tenants(self, conn: Conn, tenant: str | None,
                                 slot_worker: str | None = None) -> Pending[bool]:
        """Send the first statement of a claim's transaction (`claim_lock_tenants`): it locks the
        tenants with queued work for this transaction and leaves them where the `claim` sent
        next reads them, so the claim needs nothing from its answer: in a
        `pipelined_transaction` the two statements and the COMMIT can travel in one round trip.
        The Pending's result says whether any tenant had queued work. `slot_worker`: the
        worker of a claim that caps its runs per queue (ClaimParams.slots), locked first."""
        cur = await conn.execute(q("claim_lock_tenants"), {"tenant": tenant, "slot_worker": slot_worker},
                                 prepare=True)
        return Pending(cur, lambda rows: bool(rows) and rows[0][0] != "{}")

    async def queued_tenant_names(self) -> set[str]:
        """The tenants with queued work now (`queued_tenant_names`: one read on a connection of
        its own, no lock): which idle waiting calls a wake concerns."""
        async with self.db.connection() as conn:
            cur = await conn.execute(q("queued_tenant_names"), prepare=True)
            return {str(r[0]) for r in await cur.fetchall()}

    async def claim(self, conn: Conn, p: ClaimParams) -> Pending[list[Leased]]:
        """Send the claim (`claim`), after `lock_claim_tenants` in the same transaction; its
        leased runs are the Pending's result. In a `pipelined_transaction`, read it after the
        block: the runs are handed out only once the claim's COMMIT succeeded."""
        cur = await conn.execute(q("claim"), claim_args(p),
                                 prepare=True)  # parsed once per connection (planned once: db.py)
        return Pending(cur, lambda rows: [Leased._make(r) for r in rows])

    async def claim_wait(self, conn: Conn, tenant: str | None, now: datetime,
                         priorities: Sequence[str], queues: Sequence[str] = ("default",),
                         capabilities: Sequence[str] = ()) -> float | None:
        """Seconds after `now` until queued work that is not claimable now may be (`claim_wait`):
        the soonest rate-limited tenant's next whole token, or the soonest run queued ahead of
        its run_at; None when neither. The dispatcher reads it right after a claim that came
        back empty committed, with that claim's `now`: the buckets as the claim (or a later
        one) left them. It only says how long to wait before the next claim, which decides
        under the tenants' locks. `priorities`: every priority (policy.PRIORITIES)."""
        cur = await conn.execute(q("claim_wait"), {"tenant": tenant, "now": now, "priorities": list(priorities),
                                                   "queues": list(queues), "capabilities": list(capabilities)})
        row = await cur.fetchone()
        return None if row is None or row[0] is None else max(0.0, float(row[0]))

    async def heartbeat(self, conn: Conn, call: TokenCall, lease_s: float,
                        now: datetime) -> tuple[datetime, bool] | None:
        """(new lease deadline, cancel requested), or None if the token does not hold the run."""
        cur = await conn.execute(q("heartbeat"), {"id": call.id, "token": call.token, "worker": call.worker,
                                                  "lease_s": lease_s, "tenant": call.tenant, "now": now})
        row = await cur.fetchone()
        return None if row is None else (row[0], bool(row[1]))

    async def checkpoint(self, conn: Conn, call: TokenCall, checkpoint: Any, now: datetime) -> bool | None:
        """Cancel requested, or None if the token does not hold the run."""
        cur = await conn.execute(q("checkpoint"), {"id": call.id, "token": call.token, "worker": call.worker,
                                                   "checkpoint": Jsonb(checkpoint), "tenant": call.tenant,
                                                   "now": now})
        row = await cur.fetchone()
        return None if row is None else bool(row[0])

    async def lock_running(self, conn: Conn, call: TokenCall) -> RunningRun | None:
        async with conn.cursor(row_factory=dict_row) as c:
            await c.execute(q("lock_running"), {"id": call.id, "token": call.token, "worker": call.worker,
                                                "tenant": call.tenant})
            r = await c.fetchone()
        if r is None:
            return None
        return RunningRun(r["id"], r["schedule_id"], r["tenant"], int(r["partition"]), int(r["attempt"]),
                          int(r["max_attempts"]), float(r["retry_initial_s"]), float(r["retry_multiplier"]),
                          float(r["retry_max_s"]), bool(r["cancel_requested"]), r["type"])

    async def finish(self, conn: Conn, p: FinishParams) -> RunOutcome:
        cur = await conn.execute(q("finish"), {
            "id": p.id, "state": p.state, "reason": p.reason, "result": _jsonb(p.result), "error": p.error,
            "error_type": p.error_type, "run_at": p.run_at, "finished_at": p.finished_at, "now": p.now})
        row = await cur.fetchone()
        if row is None:
            raise LookupError(f"execution {p.id} vanished under its lock")
        return RunOutcome(row[0], row[1], int(row[2]), int(row[3]))

    async def complete_batch(self, conn: Conn, worker: str, tenant: str | None, items: Sequence[Completion],
                             now: datetime) -> list[Completed]:
        """Succeed the listed runs (`complete_batch`), inside the caller's transaction, planned
        with sequential scans priced out for the rest of it (db.price_out_seqscans): psycopg
        prepares the statement at its 6th run on a connection, PostgreSQL then keeps a generic
        plan, and on PostgreSQL 15 one made on a nearly empty table scanned the whole table at
        every batch once thousands ran (27 ms for 250 beside 20,000 running runs, 7.5 ms by id)."""
        await price_out_seqscans(conn)
        cur = await conn.execute(q("complete_batch"), {
            "worker": worker, "tenant": tenant, "ids": [i.id for i in items], "tokens": [i.token for i in items],
            "results": [_jsonb(i.result) for i in items], "now": now})
        return [Completed(r[0], r[1], r[3], r[4]) for r in await cur.fetchall()]

    async def release_buffered(self, conn: Conn, schedule_id: uuid.UUID, now: datetime) -> str | None:
        """Overlap buffer_*: queue the schedule's oldest buffered run, waking the dispatchers at
        commit; its job type, or None (storage/api.py `release_buffered`)."""
        return await release_buffered(conn, schedule_id, now)

    async def release_buffered_many(self, conn: Conn, schedule_ids: Sequence[uuid.UUID],
                                    now: datetime) -> Pending[list[str]]:
        """Queue each listed schedule's oldest buffered run (`release_buffered_many`), waking the
        dispatchers at commit if one was. Nothing is read here, so in a pipelined transaction the
        statement travels with the COMMIT: the answer (the released runs' job types) is read
        once the transaction is over."""
        await conn.execute(q("lock_buffers"), {"schedule_ids": list(schedule_ids)})  # before the release's snapshot
        cur = await conn.execute(q("release_buffered_many"), {"schedule_ids": list(schedule_ids), "now": now})
        return Pending(cur, lambda got: [str(r[0]) for r in got])

    async def release_children(self, conn: Conn, ids: Sequence[uuid.UUID], now: datetime) -> Pending[list[str]]:
        """Child schedules: a queued run of each live child of the schedules of the succeeded
        runs `ids`, with the parent run's scheduled time, once (`release_children`). Nothing is
        read here (pipelined with the COMMIT, as `release_buffered_many`): the job types of the
        runs created come once the transaction is over."""
        cur = await conn.execute(q("release_children"), {"ids": list(ids), "now": now})
        return Pending(cur, lambda got: [str(r[0]) for r in got])

    async def mark_success(self, conn: Conn, schedule_id: uuid.UUID, now: datetime) -> bool:
        """Feed the schedule's dead man's switch (`mark_success`); whether it has live, unpaused
        children (then `release_children` has runs to create)."""
        cur = await conn.execute(q("mark_success"), {"schedule_id": schedule_id, "now": now})
        row = await cur.fetchone()
        return row is not None and bool(row[0])

    async def finished_outcome(self, conn: Conn, ident: uuid.UUID, tenant: str | None) -> RunOutcome | None:
        cur = await conn.execute(q("finished_outcome"), {"id": ident, "tenant": tenant})
        row = await cur.fetchone()
        if row is None:
            return None
        return RunOutcome(row[1], row[2], int(row[3]), int(row[4]), fencing_token=int(row[0]))

    async def execution_token_state(self, conn: Conn, ident: uuid.UUID, tenant: str | None) -> TokenState | None:
        cur = await conn.execute(q("execution_token_state"), {"id": ident, "tenant": tenant})
        row = await cur.fetchone()
        return None if row is None else TokenState(int(row[0]), row[1], row[2], row[5])

    async def notify_queued(self, conn: Conn, payload: str) -> None:
        """Wake every node's waiting workers at commit (`notify_queued`, executions.sql)."""
        await conn.execute(q("notify_queued"), {"payload": payload})

    # ------------------------------------------------------------------ the reaper (fenced)

    async def reap_due_partitions(self, partitions: Sequence[int], now: datetime) -> set[int]:
        """Those of `partitions` with reaper work as of `now` (`reap_due_partitions`: one read,
        not fenced; the work itself is done fenced, per partition)."""
        if not partitions:
            return set()
        async with self.db.connection() as conn:
            cur = await conn.execute(q("reap_due_partitions"), {"partitions": list(partitions), "now": now})
            return {int(r[0]) for r in await cur.fetchall()}

    async def reap_candidates(self, conn: Conn, partition: int, epoch: int, now: datetime,
                              limit: int = 1000) -> list[ReapCandidate]:
        cur = await conn.execute(q("reap_candidates"), {"partition": partition, "epoch": epoch, "now": now,
                                                        "limit": limit})
        return [ReapCandidate(r[0], r[1], int(r[2]), int(r[3]), bool(r[4]), None if r[5] is None else float(r[5]),
                              float(r[6]), float(r[7]), float(r[8]), r[9], r[10]) for r in await cur.fetchall()]

    @asynccontextmanager
    async def savepoint(self, conn: Conn) -> AsyncIterator[None]:
        """A savepoint in the caller's transaction: a failure inside undoes only what was done
        inside and leaves the transaction usable (the error leaves as a cronwheel error where
        one fits, `storage.errors.map_error`)."""
        try:
            async with conn.transaction():
                yield
        except psycopg.Error as exc:
            raise map_error(exc) from exc

    async def reap_apply(self, conn: Conn, a: ReapApply) -> Reaped | None:
        """Write one decision; None if the run is no longer running in the partition."""
        cur = await conn.execute(q("reap_apply"), {
            "id": a.id, "partition": a.partition, "epoch": a.epoch, "state": a.state, "reason": a.reason,
            "error": a.error, "error_type": a.error_type, "run_at": a.run_at, "queued_at": a.queued_at,
            "finished_at": a.finished_at})
        row = await cur.fetchone()
        return None if row is None else Reaped(row[0], row[1], row[2], row[3], row[4], row[5])

    async def requeue_retries(self, conn: Conn, partition: int, epoch: int, now: datetime) -> list[str]:
        """Retries whose backoff has passed become claimable; the job type of each."""
        cur = await conn.execute(q("requeue_retries"), {"partition": partition, "epoch": epoch, "now": now})
        return [r[2] for r in await cur.fetchall()]

    async def dead_mans_switch(self, conn: Conn, partition: int, epoch: int, now: datetime) -> list[SuccessAlert]:
        cur = await conn.execute(q("dead_mans_switch"), {"partition": partition, "epoch": epoch, "now": now})
        return [SuccessAlert(r[0], r[1], r[2], float(r[3])) for r in await cur.fetchall()]

    async def prune_history(self, days: int, now: datetime) -> tuple[int, int]:
        """Retention of events and ownership history older than `days` before `now`
        (`prune_history`, explain.sql): rows dropped."""
        async with self.db.connection() as conn:
            cur = await conn.execute(q("prune_history"), {"days": days, "now": now})
            row = await cur.fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # ------------------------------------------------------------------ metrics and status

    async def queue_depths(self) -> list[QueueDepth]:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("queue_depths"))
            return [QueueDepth(r[0], int(r[1]), r[2]) for r in await cur.fetchall()]

    async def executions_by_state(self) -> dict[str, int]:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("executions_by_state"))
            return {r[0]: int(r[1]) for r in await cur.fetchall()}

    async def stuck_executions(self, grace_s: float, now: datetime) -> int:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("stuck_executions"), {"grace_s": grace_s, "now": now})
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def overdue_success_alerts(self) -> int:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("overdue_success_alerts"))
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])
