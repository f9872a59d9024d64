"""SchedulerService: the user-facing gRPC API (proto/cronwheel/v1/scheduler.proto is the contract).

Each RPC converts and validates its request (api_convert; errors name the field), calls one
command of `commands.schedules` / `commands.runs` with the caller's tenant scope, and converts the
rows back. Authentication, tenancy of the call itself and the mapping of domain errors to status
codes happen in front of it (auth.AuthInterceptor); another tenant's object is NOT_FOUND because
the commands look objects up within the caller's scope. ExplainSchedule is computed by
`explain_service` (after the id, range and page size are checked here).

Dependencies: the store (its API ports), the clock (every `now`), the partition count (read per
call) and the retention of records; never the whole Node (`services.grpc_services` builds it).

Concurrency: stateless but for SubmitJob's group commit (`SubmitBatcher`, one per service, so
one per node): concurrent SubmitJob calls share transactions; every other call borrows its own
connection from the node's pool. SubmitJobs writes its jobs in one transaction of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from cronwheel import tracing
from cronwheel.clock import Clock
from cronwheel.cluster.api import convert as cv
from cronwheel.cluster.api import pages
from cronwheel.cluster.api.auth import current_caller
from cronwheel.cluster.api.explain_service import DEFAULT_RETENTION, explain_schedule
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands import schedules as sch
from cronwheel.cluster.commands.logs import read_logs
from cronwheel.cluster.commands.submit_batcher import SubmitBatcher
from cronwheel.cluster.commands.values import parse_json, text
from cronwheel.cron import jitter_offset_s
from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument
from cronwheel.limits import ANSWER_ROWS_BYTES
from cronwheel.storage import PgStore
from cronwheel.storage.api import Row
from cronwheel.storage.executions import ExecutionFilter, SubmittedJob
from cronwheel.storage.schedules import ScheduleFilter
from cronwheel.v1 import common_pb2, enums, scheduler_pb2, scheduler_pb2_grpc

if TYPE_CHECKING:
    from cronwheel.cluster.metrics import Metrics

Ctx: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
NIL_UUID = "00000000-0000-0000-0000-000000000000"


def _filter_text(value: str, field: str) -> str | None:
    """An optional name-like filter; None when empty."""
    if not value:
        return None
    return text(field, value, required=False) or None


class SchedulerService(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, store: PgStore, clock: Clock, partitions: Callable[[], int],
                 retention: timedelta = DEFAULT_RETENTION, metrics: Metrics | None = None,
                 egress: EgressPolicy | None = None) -> None:
        self.store = store
        self.egress = egress or EgressPolicy()  # HTTP targets' URLs are checked as stored (--egress-allow)
        self.clock = clock
        self.metrics = metrics
        self.partitions = partitions  # read per call: known once the node has read the database
        self.retention = retention
        self.batcher = SubmitBatcher(store, clock)

    def _entered(self, *pairs: tuple[str, str]) -> None:
        """Executions this call moved into a state, (state, job type) each: the API's part of
        `cronwheel_executions_entered_total` (docs/operating.md, where each state is counted)."""
        if self.metrics is not None and pairs:
            self.metrics.executions_entered(pairs)

    # ------------------------------------------------------------------------------ schedules

    async def CreateSchedule(self, request: scheduler_pb2.CreateScheduleRequest,  # noqa: N802
                             context: Ctx) -> scheduler_pb2.CreateScheduleResponse:
        caller = current_caller()
        s = request.schedule
        tenant = caller.owner(s.tenant, "schedule.tenant")
        with cv.fields_under("schedule"):
            spec = cv.spec_from(s, tenant, self.egress)
            row = await sch.create_schedule(self.store, spec, self.clock.now(), self.partitions(),
                                            actor=caller.name)
        return scheduler_pb2.CreateScheduleResponse(schedule=cv.schedule_out(row))

    async def UpdateSchedule(self, request: scheduler_pb2.UpdateScheduleRequest,  # noqa: N802
                             context: Ctx) -> scheduler_pb2.UpdateScheduleResponse:
        caller = current_caller()
        sid = cv.req_uuid(request.schedule.id, "schedule.id")
        version = cv.expected_version(request.expected_version)
        paths = cv.mask_paths(list(request.update_mask.paths))
        with cv.fields_under("schedule"):
            changes = cv.changes_from(request.schedule, paths, self.egress)
            row = await sch.update_schedule(self.store, sid, changes, self.clock.now(), caller.scope(),
                                            actor=caller.name, expected_version=version)
        return scheduler_pb2.UpdateScheduleResponse(schedule=cv.schedule_out(row))

    async def GetSchedule(self, request: scheduler_pb2.GetScheduleRequest,  # noqa: N802
                          context: Ctx) -> scheduler_pb2.GetScheduleResponse:
        sid = cv.req_uuid(request.schedule_id, "schedule_id")
        row = await sch.get_schedule(self.store, sid, current_caller().scope())
        return scheduler_pb2.GetScheduleResponse(schedule=cv.schedule_out(row))

    async def ListSchedules(self, request: scheduler_pb2.ListSchedulesRequest,  # noqa: N802
                            context: Ctx) -> scheduler_pb2.ListSchedulesResponse:
        tenant = current_caller().filter(request.tenant, "tenant")
        size = cv.page_size(request.page_size)
        filters = {"tenant": tenant, "job_type": _filter_text(request.job_type, "job_type"),
                   "paused": request.paused if request.HasField("paused") else None,
                   "name_contains": _filter_text(request.name_contains, "name_contains")}
        if request.order_by not in ("", "created", "name"):
            raise InvalidArgument("order_by", f"expected created or name, got {request.order_by!r}")
        if request.order_by == "name":
            kind = "schedules-by-name"  # a token of one order is refused by the other
            after_name, after_id = pages.text_id_cursor(pages.decode(request.page_token, kind, filters))
            rows = await self.store.schedules.list(ScheduleFilter(**filters, after_created_at=None, after_id=after_id,
                                                                  limit=size + 1, by_name=True, after_name=after_name))
            page, token = pages.text_id_page(rows, size, kind, filters, "name")
        else:
            after_at, after_id = pages.time_id_cursor(pages.decode(request.page_token, "schedules", filters))
            rows = await self.store.schedules.list(ScheduleFilter(**filters, after_created_at=after_at,
                                                                  after_id=after_id, limit=size + 1))
            page, token = pages.time_id_page(rows, size, "schedules", filters, "created_at")
        return scheduler_pb2.ListSchedulesResponse(schedules=[cv.schedule_out(r) for r in page], next_page_token=token)

    async def DeleteSchedule(self, request: scheduler_pb2.DeleteScheduleRequest,  # noqa: N802
                             context: Ctx) -> scheduler_pb2.DeleteScheduleResponse:
        caller = current_caller()
        sid = cv.req_uuid(request.schedule_id, "schedule_id")
        version = cv.expected_version(request.expected_version)
        _, cancelled = await sch.delete_schedule(self.store, sid, self.clock.now(), caller.scope(), actor=caller.name,
                                                 expected_version=version, cancel_pending=request.cancel_pending,
                                                 reason=request.reason)
        return scheduler_pb2.DeleteScheduleResponse(cancelled_count=cancelled)

    async def _set_paused(self, request: Any, paused: bool) -> common_pb2.Schedule:
        caller = current_caller()
        sid = cv.req_uuid(request.schedule_id, "schedule_id")
        version = cv.expected_version(request.expected_version)
        row = await sch.set_paused(self.store, sid, paused, self.clock.now(), caller.scope(), actor=caller.name,
                                   reason=request.reason, expected_version=version)
        return cv.schedule_out(row)

    async def PauseSchedule(self, request: scheduler_pb2.PauseScheduleRequest,  # noqa: N802
                            context: Ctx) -> scheduler_pb2.PauseScheduleResponse:
        return scheduler_pb2.PauseScheduleResponse(schedule=await self._set_paused(request, True))

    async def ResumeSchedule(self, request: scheduler_pb2.ResumeScheduleRequest,  # noqa: N802
                             context: Ctx) -> scheduler_pb2.ResumeScheduleResponse:
        return scheduler_pb2.ResumeScheduleResponse(schedule=await self._set_paused(request, False))

    async def TriggerSchedule(self, request: scheduler_pb2.TriggerScheduleRequest,  # noqa: N802
                              context: Ctx) -> scheduler_pb2.TriggerScheduleResponse:
        caller = current_caller()
        sid = cv.req_uuid(request.schedule_id, "schedule_id")
        payload = parse_json("payload_json", request.payload_json) if request.payload_json else None
        overlap = cv.enum(cv.OVERLAP, request.overlap_policy, "overlap_policy")
        moved: list[tuple[str, str]] = []  # runs an overlap `replace` cancelled
        row, dedup = await runs.trigger_schedule(
            self.store, sid, self.clock.now(), caller.scope(), actor=caller.name, payload=payload,
            overlap_policy=overlap, idempotency_key=request.idempotency_key, reason=request.reason, moved=moved)
        if not dedup:
            self._entered((row["state"], row["type"]), *moved)
        return scheduler_pb2.TriggerScheduleResponse(execution=cv.execution_out(row), deduplicated=dedup)

    async def BackfillSchedule(self, request: scheduler_pb2.BackfillScheduleRequest,  # noqa: N802
                               context: Ctx) -> scheduler_pb2.BackfillScheduleResponse:
        caller = current_caller()
        sid = cv.req_uuid(request.schedule_id, "schedule_id")
        if not request.HasField("range"):
            raise InvalidArgument("range", "required: start_time and end_time")
        start = cv.opt_dt(request.range, "start_time", "range.start_time")
        end = cv.opt_dt(request.range, "end_time", "range.end_time")
        res = await runs.backfill_schedule(self.store, sid, start, end, self.clock.now(), caller.scope(),
                                           actor=caller.name, reason=request.reason)
        self._entered(*(("queued", res.job_type) for _ in res.created))
        return scheduler_pb2.BackfillScheduleResponse(
            created_count=len(res.created), existing_count=res.existing_count,
            execution_ids=[str(i) for i, _ in res.created])

    async def PreviewSchedule(self, request: scheduler_pb2.PreviewScheduleRequest,  # noqa: N802
                              context: Ctx) -> scheduler_pb2.PreviewScheduleResponse:
        which = request.WhichOneof("source")
        if which is None:
            raise InvalidArgument("source", "required: schedule_id or spec")
        count = request.count or 10
        if not 1 <= count <= 1000:
            raise InvalidArgument("count", f"must be 0 (default 10) or 1..1000, got {request.count}")
        after = cv.opt_dt(request, "start_time", "start_time") or self.clock.now()
        if which == "schedule_id":
            sid = cv.req_uuid(request.schedule_id, "schedule_id")
            row = await sch.get_schedule(self.store, sid, current_caller().scope())
            if row.get("parent_schedule_id") is not None:  # a child schedule has no ticks of its own
                return scheduler_pb2.PreviewScheduleResponse()
            cron = sch.validate_cron(sch.spec_of(row), sid)
            jitter, seed = float(row["jitter_s"] or 0), str(sid)
        else:
            spec = request.spec
            seed = str(cv.uuid_of(spec.schedule_id, "spec.schedule_id", required=False) or NIL_UUID)
            jitter = cv.opt_s(spec, "jitter", "spec.jitter") or 0.0
            with cv.fields_under("spec"):
                gap = cv.enum(cv.DST_GAP, spec.dst_policy.gap, "dst_policy.gap")
                repeated = cv.enum(cv.DST_REPEATED, spec.dst_policy.repeated_hour, "dst_policy.repeated_hour")
                cron = sch.preview_cron(spec.cron, spec.timezone, gap, repeated, jitter, seed)
        resp = scheduler_pb2.PreviewScheduleResponse()
        tick = after
        for _ in range(count):
            try:
                tick = cron.next_after(tick)
                run_at = tick + timedelta(seconds=jitter_offset_s(seed, tick, jitter))
                local = tick.astimezone(cron.zone).isoformat()
            except OverflowError:
                break  # the calendar ends (year 9999): fewer ticks than asked
            resp.ticks.append(scheduler_pb2.PreviewedTick(scheduled_for=cv.ts(tick), run_at=cv.ts(run_at),
                                                          local_time=local, note=pages.dst_note(cron, tick)))
        return resp

    async def ExplainSchedule(self, request: scheduler_pb2.ExplainScheduleRequest,  # noqa: N802
                              context: Ctx) -> scheduler_pb2.ExplainScheduleResponse:
        return await explain_schedule(self.store, self.clock.now(), request, current_caller().scope(),
                                      retention=self.retention)

    # ------------------------------------------------------------------------------ executions

    def _job(self, request: scheduler_pb2.SubmitJobRequest, tenant: str) -> runs.JobSpec:
        return runs.JobSpec(
            tenant=tenant, type=request.type, payload=parse_json("payload_json", request.payload_json),
            run_at=cv.opt_dt(request, "run_at", "run_at"),
            priority=cv.enum(cv.PRIORITY, request.priority, "priority", "default") or "default",
            retry=cv.retry_from(request.retry_policy, request.HasField("retry_policy")),
            timeout_s=cv.opt_s(request, "timeout", "timeout"), idempotency_key=request.idempotency_key or None,
            unique=cv.unique_from(request.unique) if request.HasField("unique") else None,
            concurrency_key=request.concurrency_key or None, concurrency_limit=request.concurrency_limit or None,
            depends_on=list(request.depends_on),
            dependency_policy=cv.enum(enums.DEPENDENCY_POLICY, request.dependency_policy, "dependency_policy", None),
            target=cv.target_from(request.target, request.HasField("target"), self.egress),
            queue=request.queue or None, required_capabilities=tuple(request.required_capabilities))

    async def SubmitJob(self, request: scheduler_pb2.SubmitJobRequest,  # noqa: N802
                        context: Ctx) -> scheduler_pb2.SubmitJobResponse:
        tenant = current_caller().owner(request.tenant, "tenant")
        if request.depends_on:  # its own transaction, not a group's: it locks its upstreams first
            job = runs.prepare_job(self._job(request, tenant), self.clock.now(), self.partitions())
            row, dedup = await runs.write_job(self.store, job, self.clock.now())
            if not dedup:
                self._entered((row["state"], job.type))
            return _submitted(job, row, dedup)
        if not tracing.enabled():
            job = runs.prepare_job(self._job(request, tenant), self.clock.now(), self.partitions())
            row, dedup = await self.batcher.submit(job)  # validated first: a bad call never joins a group
        else:
            with tracing.span("submit", attributes={"rpc.method": "SubmitJob", "cronwheel.jobs": 1}):
                job = runs.prepare_job(self._job(request, tenant), self.clock.now(), self.partitions())
                traced, fires = runs.traced_jobs([job])
                try:
                    row, dedup = await self.batcher.submit(traced[0])
                finally:
                    tracing.end_all(fires)
        if not dedup:
            self._entered((row["state"], job.type))
        return _submitted(job, row, dedup)

    async def SubmitJobs(self, request: scheduler_pb2.SubmitJobsRequest,  # noqa: N802
                         context: Ctx) -> scheduler_pb2.SubmitJobsResponse:
        caller = current_caller()
        n = len(request.jobs)
        runs.check_batch_size(n)
        now, partitions = self.clock.now(), self.partitions()
        jobs: list[SubmittedJob] = []

        def prepare(indices: Sequence[int]) -> list[SubmittedJob]:
            """Validate the jobs at `indices` (InvalidArgument naming jobs[i].field) and add them to `jobs`."""
            out = []
            for i in indices:
                item = request.jobs[i]
                tenant = caller.owner(item.tenant, f"jobs[{i}].tenant")
                try:  # not cv.fields_under: entering a context manager per job cost a tenth of this loop
                    out.append(runs.prepare_job(self._job(item, tenant), now, partitions))
                except InvalidArgument as exc:
                    raise cv.under(f"jobs[{i}]", exc) from None
            jobs.extend(out)
            return out

        if tracing.enabled():
            prepare(range(n))
            with tracing.span("submit", attributes={"rpc.method": "SubmitJobs", "cronwheel.jobs": n}):
                traced, fires = runs.traced_jobs(jobs)
                try:
                    got = await runs.submit_jobs(self.store, traced, now, brief=True)
                finally:
                    tracing.end_all(fires)
        elif n > runs.SUBMIT_CHUNK and not any(item.HasField("unique") or item.depends_on or item.required_capabilities
                                               for item in request.jobs):  # (capability sets: write_jobs registers)
            # Validated a chunk at a time while PostgreSQL writes the chunks before it (runs.submit_jobs).
            # The chunks are cut in key order (the insert's own order, executions.sql
            # insert_submitted_many): keys are taken in one order across the whole call, so two
            # calls holding the same keys never wait for each other in a cycle (issue 47 item 5).
            order = runs.key_order([(item.tenant.strip() or caller.tenant or "", item.idempotency_key.strip())
                                    for item in request.jobs])
            step = runs.SUBMIT_CHUNK
            got = await runs.submit_jobs(self.store, (prepare(order[lo:lo + step]) for lo in range(0, n, step)),
                                         now, brief=True)
            back = sorted(range(n), key=order.__getitem__)  # chunk position of each request index
            jobs, got = [jobs[k] for k in back], [got[k] for k in back]
        else:
            got = await runs.submit_jobs(self.store, prepare(range(n)), now, brief=True)
        self._entered(*((r["state"], j.type) for j, (r, dedup) in zip(jobs, got, strict=True) if not dedup))
        state = enums.by_name(cv.STATE)
        stamps = cv.Converted(cv.ts)  # the jobs of a call share a few run_at values
        resp = scheduler_pb2.SubmitJobsResponse()
        add = resp.results.add  # in place: a result built apart is copied in, twice the work
        for j, (r, dedup) in zip(jobs, got, strict=True):
            add(execution_id=str(r["id"]), deduplicated=dedup, state=state[r["state"]], partition=r["partition"],
                run_at=stamps[r["run_at"]], deduplicated_by=_DEDUP[runs.deduplicated_by(j, r, dedup)])
        return resp

    async def GetExecution(self, request: scheduler_pb2.GetExecutionRequest,  # noqa: N802
                           context: Ctx) -> scheduler_pb2.GetExecutionResponse:
        eid = cv.req_uuid(request.execution_id, "execution_id")
        row = await runs.get_execution(self.store, eid, current_caller().scope())
        e = cv.execution_out(row)
        if row.get("dependency_policy"):  # it named upstreams: what it waits (or waited) for
            cv.upstreams_out(e, await self.store.dependencies.upstreams_of(eid))
        return scheduler_pb2.GetExecutionResponse(execution=e)

    async def GetExecutionLogs(self, request: scheduler_pb2.GetExecutionLogsRequest,  # noqa: N802
                               context: Ctx) -> scheduler_pb2.GetExecutionLogsResponse:
        eid = cv.req_uuid(request.execution_id, "execution_id")
        page = await read_logs(self.store, eid, current_caller().scope(), attempt=request.attempt,
                               after_attempt=request.after_attempt, after_seq=request.after_seq,
                               page_size=request.page_size)
        resp = scheduler_pb2.GetExecutionLogsResponse(state=enums.by_name(cv.STATE)[page.state], final=page.final,
                                                       more=page.more)
        add = resp.lines.add
        for ln in page.lines:
            add(attempt=ln.attempt, seq=ln.seq, time=cv.ts(ln.at), level=ln.level, logger=ln.logger,
                message=ln.message)
        return resp

    async def ListExecutions(self, request: scheduler_pb2.ListExecutionsRequest,  # noqa: N802
                             context: Ctx) -> scheduler_pb2.ListExecutionsResponse:
        tenant = current_caller().filter(request.tenant, "tenant")
        sid = cv.uuid_of(request.schedule_id, "schedule_id", required=False)
        states = sorted({cv.enum(cv.STATE, s, "states") or _unspecified_state() for s in request.states})
        start = end = None
        if request.HasField("scheduled_for"):
            start = cv.opt_dt(request.scheduled_for, "start_time", "scheduled_for.start_time")
            end = cv.opt_dt(request.scheduled_for, "end_time", "scheduled_for.end_time")
            if start is not None and end is not None and start >= end:
                raise InvalidArgument("scheduled_for", "start_time must be before end_time")
        size = cv.page_size(request.page_size)
        filters = {"tenant": tenant, "schedule_id": sid, "states": states or None,
                   "type": _filter_text(request.type, "type"), "from": start, "until": end}
        before_at, before_id = pages.time_id_cursor(pages.decode(request.page_token, "executions", filters))
        rows, more = await self.store.executions.list(ExecutionFilter(
            tenant=tenant, schedule_id=sid, states=states or None, type=filters["type"], scheduled_from=start,
            scheduled_until=end, before_scheduled_for=before_at, before_id=before_id, limit=size,
            max_bytes=ANSWER_ROWS_BYTES))  # the page's rows: at most size, and cut by bytes
        page, token = pages.time_id_page(rows, size, "executions", filters, "scheduled_for", more)
        return scheduler_pb2.ListExecutionsResponse(executions=[cv.execution_out(r) for r in page],
                                                    next_page_token=token)

    async def CancelExecution(self, request: scheduler_pb2.CancelExecutionRequest,  # noqa: N802
                              context: Ctx) -> scheduler_pb2.CancelExecutionResponse:
        caller = current_caller()
        eid = cv.req_uuid(request.execution_id, "execution_id")
        moved: list[tuple[str, str]] = []  # a buffered run released
        row, entered = await runs.cancel_execution(self.store, eid, self.clock.now(), caller.scope(),
                                                   actor=caller.name, reason=request.reason, moved=moved)
        self._entered(*([("cancelled", row["type"])] if entered else []), *moved)
        return scheduler_pb2.CancelExecutionResponse(execution=cv.execution_out(row))

    async def RetryExecution(self, request: scheduler_pb2.RetryExecutionRequest,  # noqa: N802
                             context: Ctx) -> scheduler_pb2.RetryExecutionResponse:
        caller = current_caller()
        eid = cv.req_uuid(request.execution_id, "execution_id")
        extra = request.additional_attempts or 1  # 0: the default; the command checks the range
        row = await runs.retry_execution(self.store, eid, self.clock.now(), caller.scope(), actor=caller.name,
                                         additional_attempts=extra, run_at=cv.opt_dt(request, "run_at", "run_at"),
                                         reason=request.reason)
        self._entered((row["state"], row["type"]))  # dead, cancelled or skipped -> queued or retry_scheduled
        return scheduler_pb2.RetryExecutionResponse(execution=cv.execution_out(row))


def _unspecified_state() -> str:
    raise InvalidArgument("states", "EXECUTION_STATE_UNSPECIFIED is not a state")


_DEDUP: dict[str | None, int] = {None: 0, **enums.by_name(enums.words(scheduler_pb2.Deduplication, "DEDUPLICATION_"))}


def _submitted(job: SubmittedJob, row: Row, dedup: bool) -> scheduler_pb2.SubmitJobResponse:
    return scheduler_pb2.SubmitJobResponse(execution=cv.execution_out(row), deduplicated=dedup,
                                           deduplicated_by=_DEDUP[runs.deduplicated_by(job, row, dedup)])
