"""Commands that create or change executions: manual triggers, backfills, one-off jobs,
cancellation and retry.

Same rules as `schedules`: validation first (errors name the field), then one transaction that
writes the rows and an audit event, and a notification: `executions.notify_queued(<priority>)`
for work queued at once (dispatchers wake), `executions.notify_due` for a one-off job whose due
time changed (its partition owner reloads it). `tenant` is None for an admin caller, else the
caller's tenant; another tenant's object is NotFound. Rows carry JSON columns as text.

A manual trigger decides overlap with the firing path's own fenced statements (`active_counts`,
`replace_active`) under the partition's current epoch, share-locked for the transaction
(`Database.at_current_epoch`), so a trigger and a fire of the same schedule see one rule.

Execution states: scheduled -> queued -> running -> succeeded | failed -> retry_scheduled | dead,
plus cancelled and skipped. Cancel takes scheduled, queued, retry_scheduled (and the transient
failed) to cancelled, and marks running ones cancel_requested; retry takes dead, cancelled,
skipped (and failed) back to queued or retry_scheduled.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cronwheel.cluster.commands.schedules import get_schedule, lock_schedule, spec_of, validate_cron
from cronwheel.cluster.commands.values import (
    MAX_RUN_AT_AHEAD,
    JsonText,
    QuotaExceeded,
    RetryPolicy,
    partition_of,
    payload_json,
    priority,
    reason_text,
    text,
    timeout,
)
from cronwheel.cron import CronSchedule, OverlapAction, decide_overlap, parse_overlap_policy
from cronwheel.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from cronwheel.storage import PgStore
from cronwheel.storage.api import Conn, Event, Row
from cronwheel.storage.executions import Backfill, ManualRun, Retry, SubmittedJob
from cronwheel.storage.ids import new_execution_id

MAX_BACKFILL_TICKS = 10_000
CANCELLABLE = ("scheduled", "queued", "retry_scheduled", "failed")
RETRYABLE = ("dead", "cancelled", "skipped", "failed")
_MICRO = timedelta(microseconds=1)


def _key(value: str | None) -> str | None:
    """An idempotency key (<= 200 characters), or None when empty."""
    if not value:
        return None
    return text("idempotency_key", value, required=False) or None


# ---------------------------------------------------------------------------------- triggers


async def trigger_schedule(store: PgStore, schedule_id: uuid.UUID, now: datetime, tenant: str | None,
                           actor: str = "api", payload: str | None = None, overlap_policy: str | None = None,
                           idempotency_key: str | None = None, reason: str = "") -> tuple[Row, bool]:
    """Run a schedule now (paused or not): an execution with trigger 'manual', scheduled_for =
    run_at = now, queued unless the overlap policy (the schedule's, or the one given) skips or
    buffers it. Returns (execution, deduplicated)."""
    reason = reason_text(reason)
    key = _key(idempotency_key)
    doc = payload_json("payload_json", JsonText(payload)) if payload else None
    pol = parse_overlap_policy(overlap_policy).value if overlap_policy else None
    partition = (await get_schedule(store, schedule_id, tenant))["partition"]  # never changes
    ex = store.executions
    async with store.transaction() as conn:
        epoch = await store.at_current_epoch(conn, partition)  # before the schedule: the fire path's order
        sched = await lock_schedule(store, conn, schedule_id, tenant)  # serialises triggers of one schedule
        if key is not None and (existing := await ex.by_idempotency_key(conn, sched["tenant"], key)) is not None:
            return existing, True
        running, buffered = await ex.active_counts(conn, partition, epoch, schedule_id)
        decision = decide_overlap(pol or sched["overlap_policy"], running, buffered)
        state, why = "queued", f"triggered by {actor}" + (f": {reason}" if reason else "")
        if decision.action is OverlapAction.SKIP:
            state, why = "skipped", f"overlap: {decision.reason}"
        elif decision.action is OverlapAction.BUFFER:
            state, why = "scheduled", "buffered"
        elif decision.action is OverlapAction.CANCEL_RUNNING_THEN_START:
            await ex.replace_active(conn, partition, epoch, schedule_id, now)
        row = None
        for i in range(8):  # scheduled_for is unique per schedule: step a microsecond on a clash
            row = await ex.insert_run(conn, ManualRun(new_execution_id(), schedule_id, str(doc) if doc else None,
                                                      now + i * _MICRO, state, why, key), now)
            if row is not None:
                break
            if key is not None and (existing := await ex.by_idempotency_key(conn, sched["tenant"], key)) is not None:
                return existing, True  # a concurrent call with the same key won
        if row is None:
            raise AlreadyExists("execution", f"{schedule_id}@{now.isoformat()}")
        await store.events.insert(Event("schedule_triggered", sched["tenant"], schedule_id, row["id"], partition,
                                        actor, at=now,
                                        data={"reason": reason, "state": state, "overlap": decision.reason}), conn)
        if state == "queued":
            await ex.notify_queued(conn, row["priority"])
    return row, False


@dataclass(frozen=True, slots=True)
class BackfillResult:
    created: list[tuple[uuid.UUID, datetime]] = field(default_factory=list)  # in tick order
    existing_count: int = 0


def backfill_ticks(cron: CronSchedule, start: datetime, end: datetime,
                   limit: int = MAX_BACKFILL_TICKS) -> list[datetime]:
    """Ticks t with start <= t < end; InvalidArgument("range") beyond `limit` of them."""
    out: list[datetime] = []
    try:
        after = start - _MICRO
    except OverflowError:
        raise InvalidArgument("range.start_time", "before the supported calendar range") from None
    try:
        for t in cron.ticks_between(after, end - _MICRO):
            if len(out) == limit:
                raise InvalidArgument("range", f"more than {limit} ticks in the range; split it")
            out.append(t)
    except OverflowError:
        pass  # the calendar ends (year 9999): no more ticks
    return out


def check_range(start: datetime | None, end: datetime | None, now: datetime) -> tuple[datetime, datetime]:
    if start is None:
        raise InvalidArgument("range.start_time", "required")
    if end is None:
        raise InvalidArgument("range.end_time", "required")
    if start >= end:
        raise InvalidArgument("range", "start_time must be before end_time")
    if end > now:
        raise InvalidArgument("range.end_time", f"must not be in the future (now is {now.isoformat()})")
    return start, end


async def backfill_schedule(store: PgStore, schedule_id: uuid.UUID, start: datetime | None, end: datetime | None,
                            now: datetime, tenant: str | None, actor: str = "api",
                            reason: str = "") -> BackfillResult:
    """Queue every tick in [start, end) of the schedule's current cron that has no execution
    yet (trigger 'backfill', run_at now, tick order kept by run_at). Safe to repeat."""
    start, end = check_range(start, end, now)
    reason = reason_text(reason)
    async with store.transaction() as conn:
        sched = await lock_schedule(store, conn, schedule_id, tenant)
        cron = validate_cron(spec_of(sched), schedule_id)
        ticks = await asyncio.to_thread(backfill_ticks, cron, start, end)
        n = len(ticks)
        created: list[tuple[uuid.UUID, datetime]] = []
        if ticks:
            created = await store.executions.backfill(conn, Backfill(
                schedule_id, [new_execution_id() for _ in ticks], ticks,
                [now - (n - 1 - i) * _MICRO for i in range(n)], now))
        await store.events.insert(Event("schedule_backfilled", sched["tenant"], schedule_id, None,
                                        sched["partition"], actor, at=now,
                                        data={"reason": reason, "start": start.isoformat(), "end": end.isoformat(),
                                              "created": len(created), "existing": n - len(created)}), conn)
        if created:
            await store.executions.notify_queued(conn, sched["priority"])
    return BackfillResult(created, n - len(created))


# ---------------------------------------------------------------------------------- one-off jobs


@dataclass(frozen=True, slots=True)
class JobSpec:
    tenant: str
    type: str
    payload: Any = field(default_factory=dict)
    run_at: datetime | None = None
    priority: str = "default"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float | None = None
    idempotency_key: str | None = None


def _day_start(now: datetime) -> datetime:
    d = now.astimezone(UTC)
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


async def submit_job(store: PgStore, job: JobSpec, now: datetime, partitions: int,
                     actor: str = "api") -> tuple[Row, bool]:
    """Returns (execution row, deduplicated). A repeated idempotency key returns the existing
    execution of that tenant and stores nothing. Queued at once unless run_at is in the future
    (then scheduled, and the partition owner is told)."""
    tenant = text("tenant", job.tenant)
    jtype = text("type", job.type)
    payload = payload_json("payload_json", job.payload)
    key = _key(job.idempotency_key)
    run_at = job.run_at or now
    if run_at.utcoffset() is None:
        raise InvalidArgument("run_at", "must carry a time zone")
    if run_at > now + MAX_RUN_AT_AHEAD:
        raise InvalidArgument("run_at", f"must be at most 10 years ahead, got {run_at.isoformat()}")
    run_at = max(run_at, now)
    retry = job.retry.validate()
    eid = new_execution_id()
    p = partition_of(eid, partitions)
    state = "queued" if run_at <= now else "scheduled"
    sub = SubmittedJob(
        id=eid, tenant=tenant, type=jtype, payload=str(payload), partition=p, run_at=run_at,
        priority=priority(job.priority), state=state, max_attempts=retry.max_attempts,
        retry_initial_s=retry.initial_s, retry_multiplier=retry.multiplier, retry_max_s=retry.max_s,
        timeout_s=timeout("timeout", job.timeout_s), idempotency_key=key,
    )
    ex = store.executions
    async with store.transaction() as conn:
        if key is not None and (existing := await ex.by_idempotency_key(conn, tenant, key)) is not None:
            return existing, True
        quota = await store.schedules.lock_tenant(conn, tenant)
        if quota is not None and quota.max_executions_per_day is not None:
            used = await ex.count_since(conn, tenant, _day_start(now))
            if used >= quota.max_executions_per_day:
                raise QuotaExceeded(f"tenant {tenant} has used its quota of {quota.max_executions_per_day} "
                                    f"executions today (UTC)")
        row = await ex.insert_submitted(conn, sub, now)
        if row is None:
            existing = await ex.by_idempotency_key(conn, tenant, key) if key else None
            if existing is None:
                raise AlreadyExists("execution", key)
            return existing, True
        if state == "scheduled":
            await ex.notify_due(conn, p, eid)
        else:
            await ex.notify_queued(conn, row["priority"])
    return row, False


# ---------------------------------------------------------------------------------- executions


async def get_execution(store: PgStore, execution_id: uuid.UUID, tenant: str | None) -> Row:
    row = await store.executions.get(execution_id)
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise NotFound("execution", execution_id)
    return row


async def _lock_execution(store: PgStore, conn: Conn, execution_id: uuid.UUID, tenant: str | None) -> Row:
    row = await store.executions.lock(conn, execution_id)
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise NotFound("execution", execution_id)
    return row


async def cancel_execution(store: PgStore, execution_id: uuid.UUID, now: datetime, tenant: str | None,
                           actor: str = "api", reason: str = "") -> Row:
    """scheduled/queued/retry_scheduled -> cancelled; running -> cancel_requested. Cancelling a
    cancelled execution, or asking a running one again, returns it unchanged."""
    reason = reason_text(reason)
    async with store.transaction() as conn:
        row = await _lock_execution(store, conn, execution_id, tenant)
        state = row["state"]
        if state == "cancelled" or (state == "running" and row["cancel_requested"]):
            return row
        if state not in (*CANCELLABLE, "running"):
            raise FailedPrecondition(f"execution {execution_id} is {state}: only scheduled, queued, "
                                     f"retry_scheduled and running executions can be cancelled")
        why = (f"cancel requested by {actor}" if state == "running" else f"cancelled by {actor}") + (
            f": {reason}" if reason else "")
        new = await store.executions.cancel(conn, execution_id, why, now)
        assert new is not None
        await store.events.insert(Event("execution_cancelled", row["tenant"], row["schedule_id"], execution_id,
                                        row["partition"], actor, at=now,
                                        data={"reason": reason, "from_state": state}), conn)
        if state in ("scheduled", "retry_scheduled"):
            await store.executions.notify_due(conn, row["partition"], execution_id)  # the owner drops it
        if new["state"] == "cancelled" and row["schedule_id"] is not None and row["state_reason"] != "buffered":
            # It was a run ahead of a buffered one (overlap buffer_*): that one may start now.
            if await store.executions.release_buffered(conn, row["schedule_id"], now):
                await store.executions.notify_queued(conn, "buffered")
    return new


async def retry_execution(store: PgStore, execution_id: uuid.UUID, now: datetime, tenant: str | None,
                          actor: str = "api", additional_attempts: int = 1, run_at: datetime | None = None,
                          reason: str = "") -> Row:
    """dead/cancelled/skipped -> queued (or retry_scheduled when run_at is in the future), with
    max_attempts = max(max_attempts, attempt + additional_attempts)."""
    reason = reason_text(reason)
    if isinstance(additional_attempts, bool) or not 1 <= additional_attempts <= 1000:
        raise InvalidArgument("additional_attempts", f"must be 1..1000, got {additional_attempts}")
    if run_at is not None and run_at > now + MAX_RUN_AT_AHEAD:
        raise InvalidArgument("run_at", f"must be at most 10 years ahead, got {run_at.isoformat()}")
    at = now if run_at is None or run_at <= now else run_at
    state = "queued" if at <= now else "retry_scheduled"
    async with store.transaction() as conn:
        row = await _lock_execution(store, conn, execution_id, tenant)
        if row["state"] not in RETRYABLE:
            raise FailedPrecondition(f"execution {execution_id} is {row['state']}: only dead, cancelled and "
                                     f"skipped executions can be retried")
        why = f"retried by {actor}" + (f": {reason}" if reason else "")
        new = await store.executions.retry(conn, Retry(execution_id, state, at, additional_attempts, why, now))
        assert new is not None
        await store.events.insert(Event("execution_retried", row["tenant"], row["schedule_id"], execution_id,
                                        row["partition"], actor, at=now,
                                        data={"reason": reason, "from_state": row["state"], "run_at": at.isoformat(),
                                              "max_attempts": new["max_attempts"]}), conn)
        if state == "queued":
            await store.executions.notify_queued(conn, new["priority"])
        else:
            await store.executions.notify_due(conn, new["partition"], execution_id)
    return new
