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

(Over 400 lines: submit's write, read-back and settle of a batch whose commit may be lost is
about half of it; the commands around it share its idempotency keys and tenant rules.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronwheel import tracing
from cronwheel.cluster.commands.dependencies import DependencyLinker, check_depends_on
from cronwheel.cluster.commands.lanes import capabilities, capability_set, queue_name
from cronwheel.cluster.commands.schedules import (
    get_schedule,
    job_type_or_target,
    lock_schedule,
    spec_of,
    target_text,
    validate_cron,
)
from cronwheel.cluster.commands.unique import UniqueSpec, unique_key
from cronwheel.cluster.commands.unique import validate as validate_unique
from cronwheel.cluster.commands.values import (
    MAX_RUN_AT_AHEAD,
    QUEUED_AT_SUBMIT_WITHIN,
    JsonText,
    QuotaExceeded,
    RetryPolicy,
    concurrency_key,
    partition_of,
    payload_json,
    priority,
    reason_text,
    text,
    timeout,
    visible,
)
from cronwheel.cron import CronSchedule, OverlapAction, decide_overlap, parse_overlap_policy
from cronwheel.errors import AlreadyExists, CronwheelError, FailedPrecondition, InvalidArgument, Unavailable
from cronwheel.limits import MAX_SUBMIT_BATCH
from cronwheel.storage import PgStore
from cronwheel.storage.api import Conn, Event, Row
from cronwheel.storage.executions import Backfill, ManualRun, Retry, SubmittedJob, announced
from cronwheel.storage.ids import new_execution_id
from cronwheel.times import MICROSECOND

MAX_BACKFILL_TICKS = 10_000
CANCELLABLE = ("scheduled", "queued", "retry_scheduled", "failed", "waiting")
RETRYABLE = ("dead", "cancelled", "skipped", "failed")


def _key(value: str | None) -> str | None:
    """An idempotency key (<= 200 characters), or None when empty."""
    if not value:
        return None
    return text("idempotency_key", value, required=False) or None


# ---------------------------------------------------------------------------------- triggers


async def trigger_schedule(store: PgStore, schedule_id: uuid.UUID, now: datetime, tenant: str | None,
                           actor: str = "api", payload: str | None = None, overlap_policy: str | None = None,
                           idempotency_key: str | None = None, reason: str = "",
                           moved: list[tuple[str, str]] | None = None) -> tuple[Row, bool]:
    """Run a schedule now (paused or not): an execution with trigger 'manual', scheduled_for =
    run_at = now, queued unless the overlap policy (the schedule's, or the one given) skips or
    buffers it. Returns (execution, deduplicated). `moved`, if given, receives once committed the
    (state, job type) of the other executions the call moved: the runs an overlap `replace` cancelled."""
    reason = reason_text(reason)
    key = _key(idempotency_key)
    replaced: list[str] = []
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
            replaced = await ex.replace_active(conn, partition, epoch, schedule_id, now)
        row = None
        for i in range(8):  # scheduled_for is unique per schedule: step a microsecond on a clash
            row = await ex.insert_run(conn, ManualRun(new_execution_id(), schedule_id, str(doc) if doc else None,
                                                      now + i * MICROSECOND, state, why, key), now)
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
    if moved is not None:
        moved.extend(("cancelled", t) for t in replaced)
    return row, False


@dataclass(frozen=True, slots=True)
class BackfillResult:
    created: list[tuple[uuid.UUID, datetime]] = field(default_factory=list)  # in tick order
    existing_count: int = 0
    job_type: str = ""  # the schedule's: the type of every execution created


def backfill_ticks(cron: CronSchedule, start: datetime, end: datetime,
                   limit: int = MAX_BACKFILL_TICKS) -> list[datetime]:
    """Ticks t with start <= t < end; InvalidArgument("range") beyond `limit` of them."""
    out: list[datetime] = []
    try:
        after = start - MICROSECOND
    except OverflowError:
        raise InvalidArgument("range.start_time", "before the supported calendar range") from None
    try:
        for t in cron.ticks_between(after, end - MICROSECOND):
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
                [now - (n - 1 - i) * MICROSECOND for i in range(n)], now))
        await store.events.insert(Event("schedule_backfilled", sched["tenant"], schedule_id, None,
                                        sched["partition"], actor, at=now,
                                        data={"reason": reason, "start": start.isoformat(), "end": end.isoformat(),
                                              "created": len(created), "existing": n - len(created)}), conn)
        if created:
            await store.executions.notify_queued(conn, sched["priority"])
    return BackfillResult(created, n - len(created), sched["job_type"])


# ---------------------------------------------------------------------------------- one-off jobs


@dataclass(slots=True)
class JobSpec:
    tenant: str
    type: str
    payload: Any = field(default_factory=dict)
    run_at: datetime | None = None
    priority: str = "default"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float | None = None
    idempotency_key: str | None = None
    unique: UniqueSpec | None = None  # unique job options (cluster/commands/unique.py)
    concurrency_key: str | None = None  # with concurrency_limit: at most that many running at once
    concurrency_limit: int | None = None
    depends_on: Sequence[str] = ()  # upstreams: execution ids or idempotency keys (dependencies.py)
    dependency_policy: str | None = None  # "on_success" (default) or "always"
    target: str | None = None  # an HTTP target's JSON instead of a job type (type: "" or "http")
    queue: str | None = None  # None or "": lanes.DEFAULT_QUEUE
    required_capabilities: tuple[str, ...] = ()  # key=value each (cluster/commands/lanes.py)


# Jobs per chunk when SubmitJobs streams a large call (`submit_jobs`): validating 1,000 jobs took
# 10 ms and writing them 14, so four chunks of 250 hide most of one behind the other (measured in
# `insert_chunks_unless_quota`); a call of 10,000 sends 40 inserts, each a few ms.
SUBMIT_CHUNK = 250


def key_order(keys: Sequence[tuple[str, str]]) -> list[int]:
    """The indices of jobs given as (tenant, idempotency key or "") in the order the insert
    takes their keys (executions.sql insert_submitted_many: tenant, then key, in code point order,
    which is UTF-8 byte order, COLLATE "C"; jobs without a key last; ties in item order): the order
    SubmitJobs cuts its chunks in, so that a call's keys are taken in one order across its chunks."""
    return sorted(range(len(keys)), key=lambda i: (not keys[i][1], keys[i][0], keys[i][1]))


def prepare_job(job: JobSpec, now: datetime, partitions: int) -> SubmittedJob:
    """Validate one job (InvalidArgument naming the field) and give it its id, partition and
    state: queued at once unless run_at is more than QUEUED_AT_SUBMIT_WITHIN ahead (then
    scheduled); a queued job is claimed from its run_at. No I/O."""
    tenant = text("tenant", job.tenant)
    jtype = job_type_or_target(job.type, job.target, "type")
    payload = payload_json("payload_json", job.payload)
    key = _key(job.idempotency_key)
    ckey, climit = concurrency_key(job.concurrency_key, job.concurrency_limit)
    depends_on, dep_policy = check_depends_on(job.depends_on, job.dependency_policy)
    run_at = job.run_at or now
    if run_at.utcoffset() is None:
        raise InvalidArgument("run_at", "must carry a time zone")
    if run_at > now + MAX_RUN_AT_AHEAD:
        raise InvalidArgument("run_at", f"must be at most 10 years ahead, got {run_at.isoformat()}")
    run_at = max(run_at, now)
    retry = job.retry.validate()
    ukey = umask = None
    if job.unique is not None:
        rule = validate_unique(job.unique)
        ukey, umask = unique_key(rule, tenant, jtype, str(payload), run_at), rule.mask
    eid = new_execution_id()
    # `now` is this API node's clock: a job queued here at once is still claimed only from its
    # run_at, by a node whose clock the clock-skew guard keeps within --max-clock-skew of
    # PostgreSQL's (cluster/coordination/clock_skew.py); a node whose clock runs ahead delays it.
    state = "queued" if run_at <= now + QUEUED_AT_SUBMIT_WITHIN else "scheduled"
    if depends_on:
        state = "waiting"  # released by its last upstream's finish (dependencies.py)
    return SubmittedJob(
        id=eid, tenant=tenant, type=jtype, payload=str(payload), partition=partition_of(eid, partitions),
        run_at=run_at, priority=priority(job.priority), state=state, max_attempts=retry.max_attempts,
        retry_initial_s=retry.initial_s, retry_multiplier=retry.multiplier, retry_max_s=retry.max_s,
        timeout_s=timeout("timeout", job.timeout_s), idempotency_key=key, unique_key=ukey, unique_states=umask,
        concurrency_key=ckey, concurrency_limit=climit, depends_on=depends_on, dependency_policy=dep_policy,
        target=target_text(job.target),
        queue=queue_name("queue", job.queue),
        required_capabilities=capability_set(capabilities("required_capabilities", job.required_capabilities)),
    )


def traced_jobs(jobs: Sequence[SubmittedJob]) -> tuple[list[SubmittedJob], list[Any]]:
    """Tracing only, inside the "submit" span: a "fire" span per job (child of submit: the
    job enters the queue, or the wheel for a future run_at), its traceparent stored with the job
    (executions.trace_context) so lease, run and complete join the trace. The caller ends the
    spans (`tracing.end_all`) once the jobs are written."""
    out: list[SubmittedJob] = []
    spans: list[Any] = []
    for j in jobs:
        s = tracing.start("fire", attributes={"cronwheel.execution_id": str(j.id), "cronwheel.tenant": j.tenant,
                                              "cronwheel.type": j.type, "cronwheel.state": j.state,
                                              "cronwheel.partition": j.partition})
        if s is None:
            out.append(j)
            continue
        spans.append(s)
        out.append(dataclasses.replace(j, trace_context=tracing.traceparent(s)))
    return out, spans


Submitted = tuple[Row, bool]  # (execution, deduplicated)


def _quota_error(tenant: str, limit: int) -> QuotaExceeded:
    return QuotaExceeded("max_executions_per_day",
                         f"tenant {tenant} has used its quota of {limit} executions today (UTC)")


async def write_jobs(store: PgStore, jobs: Sequence[SubmittedJob] | Iterator[Sequence[SubmittedJob]], now: datetime,
                     all_or_nothing: bool, brief: bool = False,
                     linker: DependencyLinker | None = None) -> list[Submitted | Exception]:
    """Write prepared jobs in ONE transaction (one insert statement, one per chunk when `jobs`
    is an iterator of chunks, below); a result per job, in
    order: (row, deduplicated) or the job's own error. `all_or_nothing` (SubmitJobs): a job over
    quota fails the whole call instead, and nothing is stored. Errors of the transaction itself
    (database down) raise, for every job.

    Idempotency: a (tenant, key) that exists returns that execution (deduplicated); a key
    repeated inside `jobs` is one job (the first), the later ones return it deduplicated; a key
    taken by a committed or concurrent transaction is resolved per job by the insert's
    ON CONFLICT DO NOTHING and a read-back of the existing rows.

    Unique jobs (cluster/commands/unique.py): the same, by unique key, against the execution that
    holds it now (in its unique states): the partial unique index decides, so an earlier job of
    `jobs`, another group on this node and a submit on another node are one rule. The key is
    checked after the idempotency key (a taken idempotency key wins, whatever `unique` says). A
    job that lost its key to a holder that then left its states before the read-back (it finished
    in between) has no execution to return: it is written again, in a transaction of its own
    (UNIQUE_ATTEMPTS in all), so the answer is always the holder or a new execution.

    Two paths. When none of the jobs' tenants has a daily quota (the common case) the group is
    one round trip to PostgreSQL (`insert_unless_quota`: quota read, guarded insert, coalesced
    notifications and commit pipelined), plus a read-back only if a key was taken. Otherwise the
    counted path, exact without a row lock: one advisory transaction lock per quota tenant per
    group (`lock_quotas`), then today's count (`used_today`: the day's counter, which the insert
    statement itself increments, so retention never gives room back) read after the lock (READ
    COMMITTED: a fresh snapshot that sees every group that held the lock before), then at most
    `limit - used` new jobs; existing keys (idempotency and unique) are read first so they do not
    count, and a unique key repeated inside `jobs` counts once. The lock is held to commit, so two
    groups of one tenant count one after the other. A job lost to a concurrent key counts as used
    for its group (never over, possibly one refused that would have fitted). A quota set while a
    group is in flight applies from the next group.

    `brief`: the rows of new jobs hold only id, tenant, idempotency_key, state, partition,
    run_at and priority (storage's BRIEF_COLUMNS: a SubmitJobs answer), built by storage from the
    jobs sent (PostgreSQL only says which were inserted, and only when some were not); a
    deduplicated job's row is whole.

    `jobs` may instead be an iterator of chunks, drawn lazily (`submit_jobs`): no chunk may hold
    a unique job, and the fast path writes each chunk while the next is drawn
    (`insert_chunks_unless_quota`, which also keeps quotas exact: it rolls back and the counted
    path takes the whole group). An exception raised by the iterator stores nothing.

    `linker` (jobs that name upstreams, cluster/commands/dependencies.py): `jobs` is a list and
    takes the counted path, with the linker's `before` (lock the upstreams, refuse an unknown one
    or a cycle) first in its transaction and its `after` (the edges) right after the insert; a
    unique job that lost its key to a holder gone meanwhile is not written again (its error says
    submit again)."""
    if isinstance(jobs, Sequence) and (sets := sorted({j.required_capabilities for j in jobs} - {""})):
        await store.executions.register_capability_sets(sets)  # before the runs: the claim knows them
    jobs, results = await _write_once(store, jobs, now, all_or_nothing, brief, linker)
    for _ in range(UNIQUE_ATTEMPTS - 1):
        again = [i for i, r in enumerate(results) if isinstance(r, _HolderGone)]
        if not again or linker is not None:
            break
        for i, r in zip(again, (await _write_once(store, [jobs[i] for i in again], now, all_or_nothing, brief))[1],
                        strict=True):
            results[i] = r
    return [AlreadyExists("execution", f"unique key of job {jobs[i].id}", "the execution holding this unique key "
                          "kept changing state; submit again") if isinstance(r, _HolderGone) else r
            for i, r in enumerate(results)]


UNIQUE_ATTEMPTS = 3


class _HolderGone(Exception):  # noqa: N818 - a marker, never raised
    """A unique job lost its key, and no execution held the key at the read-back."""


async def _write_once(store: PgStore, source: Sequence[SubmittedJob] | Iterator[Sequence[SubmittedJob]],
                      now: datetime, all_or_nothing: bool, brief: bool, linker: DependencyLinker | None = None,
                      ) -> tuple[list[SubmittedJob], list[Submitted | Exception]]:
    """One attempt of `write_jobs` (one transaction): the jobs (the chunks of `source` drawn, in
    order) and a result per job; a unique job may come back _HolderGone."""
    jobs: list[SubmittedJob] = []
    first: dict[tuple[str, str], int] = {}
    aliases: list[tuple[int, int]] = []
    unique: list[int] = []  # the jobs whose key no earlier job of the group has

    def distinct(chunk: Sequence[SubmittedJob]) -> list[SubmittedJob]:
        out = []
        for j in chunk:
            i = len(jobs)
            jobs.append(j)
            if j.idempotency_key is not None:
                k = (j.tenant, j.idempotency_key)
                if (f := first.get(k)) is not None:
                    aliases.append((i, f))
                    continue
                first[k] = i
            unique.append(i)
            out.append(j)
        return out

    ex = store.executions
    fast: list[Row] | None = None
    if linker is not None:
        assert isinstance(source, Sequence), "jobs with upstreams are written as one list"
        distinct(source)
    elif isinstance(source, Sequence):
        fast = await ex.insert_unless_quota(distinct(source), now, brief)
    else:
        fast = await ex.insert_chunks_unless_quota((distinct(c) for c in source), now, brief)
    n = len(jobs)
    results: list[Submitted | Exception | None] = [None] * n
    if fast is not None:  # committed: from here on no error may be told about a job it stored
        inserted = {r["id"]: r for r in fast}
        lost = [i for i in unique if jobs[i].id not in inserted]
        back: tuple[dict[tuple[str, str], Row], dict[bytes, Row]] | Exception = ({}, {})
        if lost:
            back = await _read_back_committed(store, jobs, lost)
        if isinstance(back, Exception):
            _settle(jobs, [i for i in unique if jobs[i].id in inserted], inserted, ({}, {}), results)
            for i in lost:
                results[i] = back
        else:
            _settle(jobs, unique, inserted, back, results)
    else:
        async with store.transaction() as conn:
            if linker is not None:
                await linker.before(conn, jobs)
            existing = await ex.by_idempotency_keys(conn, list(first)) if first else {}
            candidates: list[int] = []
            for i in unique:
                j = jobs[i]
                if j.idempotency_key is not None and (r := existing.get((j.tenant, j.idempotency_key))) is not None:
                    results[i] = (r, True)
                else:
                    candidates.append(i)
            held = await ex.by_unique_keys(conn, [k for i in candidates if (k := jobs[i].unique_key) is not None])
            if held:
                for i in candidates:
                    if (k := jobs[i].unique_key) is not None and (r := held.get(k)) is not None:
                        results[i] = (r, True)
                candidates = [i for i in candidates if results[i] is None]
            quotas = await ex.daily_quotas(conn, sorted({jobs[i].tenant for i in candidates})) if candidates else {}
            accepted = candidates
            if quotas:
                await ex.lock_quotas(conn, list(quotas))
                used = await ex.used_today(conn, list(quotas), now)
                left = {t: limit - used.get(t, 0) for t, limit in quotas.items()}
                counted: set[bytes] = set()  # a unique key repeated inside `jobs` makes one execution
                accepted = []
                for i in candidates:
                    t, k = jobs[i].tenant, jobs[i].unique_key
                    if t in left and k not in counted:
                        if left[t] <= 0:
                            if all_or_nothing:
                                raise _quota_error(t, quotas[t])
                            results[i] = _quota_error(t, quotas[t])
                            continue
                        left[t] -= 1
                        if k is not None:
                            counted.add(k)
                    accepted.append(i)
            inserted = {r["id"]: r for r in await ex.insert_submitted_many(conn, [jobs[i] for i in accepted], now,
                                                                         brief)}
            linked = await linker.after(conn, set(inserted), now) if linker is not None else []
            lost = [i for i in accepted if jobs[i].id not in inserted]
            _settle(jobs, accepted, inserted | {r["id"]: r for r in linked},  # dependents answered as linked
                    await _read_back(store, conn, jobs, lost), results)
            await ex.notify_submitted(conn, *announced(
                ((r["partition"], r["id"], r["run_at"], r["state"], r["priority"]) for r in inserted.values()), now))
    for i, f in aliases:
        got = results[f]
        results[i] = (got[0], True) if isinstance(got, tuple) else got
    out: list[Submitted | Exception] = []
    for got in results:
        assert got is not None
        out.append(got)
    return jobs, out


READ_BACK_ATTEMPTS = 3


async def _read_back_committed(store: PgStore, jobs: Sequence[SubmittedJob], lost: Sequence[int]
                               ) -> tuple[dict[tuple[str, str], Row], dict[bytes, Row]] | Exception:
    """`_read_back` after the fast path committed (a read of its own, retried: it changes
    nothing). Its error, if every attempt failed, is returned, not raised: it concerns only the
    jobs whose keys were taken, which this call did not store; the jobs it inserted keep their
    results (issue 47 item 7: a read-back failure used to fail every job of the group)."""
    err: Exception | None = None
    for _ in range(READ_BACK_ATTEMPTS):
        try:
            async with store.connection() as conn:
                return await _read_back(store, conn, jobs, lost)
        except CronwheelError as exc:
            err = exc
    assert err is not None
    return Unavailable("postgres", f"the job's key was taken by another call, whose execution could not be read "
                                   f"({err}); submit again with the same key to get it")


async def _read_back(store: PgStore, conn: Conn, jobs: Sequence[SubmittedJob],
                     lost: Sequence[int]) -> tuple[dict[tuple[str, str], Row], dict[bytes, Row]]:
    """The rows holding the keys of the jobs the insert left out: by idempotency key, then (for
    unique jobs the idempotency key did not explain) by unique key."""
    if not lost:
        return {}, {}
    ex = store.executions
    by_key = await ex.by_idempotency_keys(conn, [(jobs[i].tenant, k) for i in lost
                                                 if (k := jobs[i].idempotency_key) is not None])
    ukeys = [u for i in lost if (u := jobs[i].unique_key) is not None
             and (jobs[i].tenant, jobs[i].idempotency_key) not in by_key]
    return by_key, await ex.by_unique_keys(conn, ukeys)


def _settle(jobs: Sequence[SubmittedJob], written: Sequence[int], inserted: dict[uuid.UUID, Row],
            back: tuple[dict[tuple[str, str], Row], dict[bytes, Row]],
            results: list[Submitted | Exception | None]) -> None:
    """The result of each job the insert was given: its row, or the row that holds its key
    (idempotency key first, then unique key)."""
    by_key, by_unique = back
    for i in written:
        j = jobs[i]
        if (r := inserted.get(j.id)) is not None:
            results[i] = (r, False)
        elif j.idempotency_key is not None and (r := by_key.get((j.tenant, j.idempotency_key))) is not None:
            results[i] = (r, True)  # the key was taken (before, or by a concurrent call)
        elif j.unique_key is not None:
            r = by_unique.get(j.unique_key)
            results[i] = (r, True) if r is not None else _HolderGone()
        else:
            results[i] = AlreadyExists("execution", j.idempotency_key or str(j.id))


def deduplicated_by(job: SubmittedJob, row: Row, deduplicated: bool) -> str | None:
    """Why a submit returned an existing execution: "idempotency_key" (the job's key names it),
    "unique" (it holds the job's unique key), or None (created)."""
    if not deduplicated:
        return None
    if job.idempotency_key is not None and row["idempotency_key"] == job.idempotency_key:
        return "idempotency_key"
    return "unique"


def check_batch_size(n: int) -> None:
    """SubmitJobs takes 1..MAX_SUBMIT_BATCH jobs (InvalidArgument "jobs" otherwise)."""
    if n == 0:
        raise InvalidArgument("jobs", f"required: 1..{MAX_SUBMIT_BATCH} jobs")
    if n > MAX_SUBMIT_BATCH:
        raise InvalidArgument("jobs", f"at most {MAX_SUBMIT_BATCH} jobs per call, got {n}; split it")


async def submit_jobs(store: PgStore, jobs: Sequence[SubmittedJob] | Iterator[Sequence[SubmittedJob]],
                      now: datetime, brief: bool = False) -> list[Submitted]:
    """SubmitJobs: 1..MAX_SUBMIT_BATCH jobs, each already validated by `prepare_job` (the caller
    names the failing item, jobs[i].field); all or nothing: one transaction. Per job: (execution,
    deduplicated); `brief` as for `write_jobs`.

    `jobs` is a list (one insert statement), or an iterator of chunks of at most SUBMIT_CHUNK
    jobs, none unique, whose size the caller has checked: each chunk is drawn (validated, by the
    caller's generator) while PostgreSQL writes the ones before it; an error raised while drawing
    one stores nothing. SubmitJobs streams a call of more than SUBMIT_CHUNK jobs with no unique
    job and tracing off."""
    linker = None
    if isinstance(jobs, Sequence):
        check_batch_size(len(jobs))
        if any(j.depends_on for j in jobs):
            linker = DependencyLinker(store, batch=True)
    got = await write_jobs(store, jobs, now, all_or_nothing=True, brief=brief, linker=linker)
    failed = [r for r in got if isinstance(r, Exception)]
    if failed:
        # Only a committed call fails per job (the counted path raises, rolling back): a job told
        # failed was not stored by it; if others were, they are named, and UNAVAILABLE says
        # "submit again with the same keys" (issue 47 item 7, docs/semantics.md).
        stored = [r[0]["id"] for r in got if not isinstance(r, Exception) and not r[1]]
        raise StoredThenFailed(stored, failed[0]) if stored else failed[0]
    return [r for r in got if not isinstance(r, Exception)]


class StoredThenFailed(Unavailable):
    """Jobs of a SubmitJobs call were stored, then the answer for others could not be made (their
    keys were taken and the executions holding them could not be read back). `stored`: the ids of
    the executions this call created. Submitting the same jobs again with the same idempotency
    keys answers every job (the stored ones deduplicated)."""

    def __init__(self, stored: Sequence[uuid.UUID], cause: Exception) -> None:
        self.stored = list(stored)
        shown = ", ".join(str(i) for i in self.stored[:STORED_IDS_SHOWN])
        more = f" and {len(self.stored) - STORED_IDS_SHOWN} more" if len(self.stored) > STORED_IDS_SHOWN else ""
        super().__init__("postgres", f"{len(self.stored)} jobs of this call were stored ({shown}{more}), but {cause}")


STORED_IDS_SHOWN = 20  # in the message (gRPC's status details travel in a trailer of a few KB)


async def submit_job(store: PgStore, job: JobSpec, now: datetime, partitions: int,
                     actor: str = "api") -> tuple[Row, bool]:
    """One job, in a transaction of its own (the node's API goes through the group-commit
    `SubmitBatcher` instead, which writes the same way). Returns (execution row,
    deduplicated). A repeated idempotency key returns the existing execution of that tenant and
    stores nothing. Queued at once unless run_at is in the future (then scheduled, and the
    partition owner is told)."""
    return await write_job(store, prepare_job(job, now, partitions), now)


async def write_job(store: PgStore, job: SubmittedJob, now: datetime) -> tuple[Row, bool]:
    """One prepared job in a transaction of its own (a job with upstreams locks them first:
    SubmitJob writes it here, not in a group). Returns (execution row, deduplicated)."""
    linker = DependencyLinker(store, batch=False) if job.depends_on else None
    got = (await write_jobs(store, [job], now, all_or_nothing=False, linker=linker))[0]
    if isinstance(got, Exception):
        raise got
    return got


# ---------------------------------------------------------------------------------- executions


async def get_execution(store: PgStore, execution_id: uuid.UUID, tenant: str | None) -> Row:
    row = await store.executions.get(execution_id)
    return visible(row, tenant, "execution", execution_id)


async def _lock_execution(store: PgStore, conn: Conn, execution_id: uuid.UUID, tenant: str | None) -> Row:
    row = await store.executions.lock(conn, execution_id)
    return visible(row, tenant, "execution", execution_id)


async def cancel_execution(store: PgStore, execution_id: uuid.UUID, now: datetime, tenant: str | None,
                           actor: str = "api", reason: str = "",
                           moved: list[tuple[str, str]] | None = None) -> tuple[Row, bool]:
    """scheduled/queued/retry_scheduled -> cancelled; running -> cancel_requested. Cancelling a
    cancelled execution, or asking a running one again, returns it unchanged. Returns (execution,
    whether this call moved it into `cancelled`). `moved`, if given, receives once committed the
    (state, job type) of the other execution the call moved: a buffered run it released."""
    reason = reason_text(reason)
    async with store.transaction() as conn:
        row = await _lock_execution(store, conn, execution_id, tenant)
        state = row["state"]
        if state == "cancelled" or (state == "running" and row["cancel_requested"]):
            return row, False
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
        freed = None
        if new["state"] == "cancelled" and row["schedule_id"] is not None and row["state_reason"] != "buffered":
            # It was a run ahead of a buffered one (overlap buffer_*): that one may start now.
            freed = await store.executions.release_buffered(conn, row["schedule_id"], now)
    if moved is not None and freed is not None:
        moved.append(("queued", freed))
    return new, new["state"] == "cancelled"


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
        if (key := row.get("unique_key")) is not None and (holder := (await store.executions.by_unique_keys(
                conn, [bytes(key)])).get(bytes(key))) is not None and holder["id"] != execution_id:
            raise AlreadyExists("execution", str(holder["id"]), f"execution {holder['id']} holds this unique job's "
                                f"key ({holder['state']}): retry {execution_id} once it has left its unique states")
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
