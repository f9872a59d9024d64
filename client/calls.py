"""Every Client method once: its signature, its documentation, the request it sends, whether it
is safe to repeat, and how the response becomes plain values. `Client` (sync) and `AsyncClient`
(asyncio) wrap these plans with their own transport, so the two cannot drift apart.

A plan returns one of:
- `Call`: one RPC; `safe` says whether the transport may retry it on UNAVAILABLE (and send it to
  another node): reads, and writes the server deduplicates or that are no-ops when repeated
  (submit and trigger with an idempotency key, pause, resume, cancel, backfill);
- `Pages`: a List RPC followed page by page, yielding converted items;
- `Gather`: every page of a List RPC, folded into one value (explain);
- `Many`: several Calls sent one after the other, their results concatenated (submit_many);
- `Steps`: several calls chosen as it goes (apply, client/apply.py).

(Over 400 lines: one plan per Client method, in one place so the two clients cannot drift.)
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from google.protobuf.field_mask_pb2 import FieldMask

from cronwheel.clock import Clock
from cronwheel.entropy import random_bytes
from cronwheel.limits import DEFAULT_LOG_PAGE, MAX_LOG_PAGE, MAX_NAME, MAX_PAYLOAD_BYTES, MAX_SUBMIT_BATCH
from cronwheel.v1 import admin_pb2, scheduler_pb2

from . import convert as c
from . import types as t
from .errors import ApiError

T = TypeVar("T")
S = scheduler_pb2
A = admin_pb2
SCHEDULER, ADMIN, WEBHOOKS, TENANTS = "scheduler", "admin", "webhooks", "tenants"
UNSET: Any = object()  # update_schedule: a keyword argument that was not given


@dataclass(frozen=True, slots=True)
class Context:
    """What plans need besides their arguments: the clock (delay -> run_at)."""

    clock: Clock


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    service: str
    method: str
    request: Any
    convert: Callable[[Any], T]
    safe: bool


@dataclass(frozen=True, slots=True)
class Pages(Generic[T]):
    service: str
    method: str
    request: Any  # its page_token is set by the transport, page after page
    items: Callable[[Any], Iterable[T]]


@dataclass(frozen=True, slots=True)
class Gather(Generic[T]):
    pages: Pages[Any]
    finish: Callable[[list[Any]], T]


@dataclass(frozen=True, slots=True)
class Many(Generic[T]):
    """Calls sent in order; `starts[k]` is the index, in the caller's list, of the first item of
    `calls[k]` (a server error naming "jobs[i]" is re-indexed with it, see `at_offset`)."""

    calls: list[Call[list[T]]]
    starts: list[int]


@dataclass(frozen=True, slots=True)
class Steps(Generic[T]):
    """A generator that yields Calls and Pages and returns the method's value: each Call is
    answered with its converted result, each Pages with the list of every item, and a call's
    ApiError is thrown into the generator at its yield."""

    run: Generator[Call[Any] | Pages[Any], Any, T]


def as_method(plan: Callable[..., Any], method: Any) -> Any:
    """`method` (a Client method calling `plan`) with plan's name, documentation and signature,
    less the Context and with `self` (what help() and IDEs show)."""
    functools.update_wrapper(method, plan)
    del method.__wrapped__
    params = list(inspect.signature(plan).parameters.values())[1:]
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = inspect.Signature([self, *params])
    return method


def _page_size(n: int) -> int:
    if not 1 <= n <= 1000:
        raise c.BadValue("page_size", f"expected 1..1000, got {n}")
    return n


# ------------------------------------------------------------------------------------ schedules


def create_schedule(ctx: Context, name: str, cron: str, job_type: str, *, timezone: str,
                    misfire_policy: t.MisfirePolicy | str, payload: Any = None,  # type: ignore[valid-type]
                    priority: t.Priority | str | None = None,  # type: ignore[valid-type]
                    retry_policy: t.RetryPolicy | None = None, attempt_timeout: timedelta | None = None,
                    max_catch_up: int | None = None,
                    overlap_policy: t.OverlapPolicy | str | None = None,  # type: ignore[valid-type]
                    dst_policy: t.DstPolicy | None = None, jitter: timedelta | None = None,
                    alert_if_no_success_within: timedelta | None = None, paused: bool = False,
                    tenant: str | None = None, id: str | None = None, keep_last: int | None = None,
                    keep_succeeded_for: timedelta | None = None,
                    keep_failed_for: timedelta | None = None,
                    parent_schedule_id: str | None = None,
                    target: dict[str, Any] | None = None, queue: str | None = None,
                    required_capabilities: list[str] | tuple[str, ...] | None = None) -> Call[t.Schedule]:
    """Creates a schedule: fires `job_type` with `payload` at every tick of `cron` in `timezone`,
    or calls an HTTP `target` (job_type "": docs/http-targets.md) with the payload as its body.
    A child schedule (`parent_schedule_id`, with `cron` ""): runs once per successful run of its
    parent, with that run's scheduled time.
    Its runs wait in `queue` (None: "default") for a worker advertising `required_capabilities`.
    Retention: `keep_last` N finished runs at most, succeeded/skipped/cancelled runs kept
    `keep_succeeded_for`, failed/dead ones `keep_failed_for` (None: the cluster's windows).
    Raises AlreadyExists when the tenant has a live schedule of that name, InvalidArgument naming
    the field for a bad value. Not retried on UNAVAILABLE unless the request never left."""
    values = dict(locals())
    del values["ctx"]
    msg = c.schedule_message(values)
    return Call(SCHEDULER, "CreateSchedule", S.CreateScheduleRequest(schedule=msg),
                lambda r: c.schedule(r.schedule), safe=False)


def update_schedule(ctx: Context, schedule_id: str, *, expected_version: int = 0,
                    **changes: Any) -> Call[t.Schedule]:
    """Changes the fields given as keyword arguments (the field mask is their names; None resets a
    field to its default, e.g. `jitter=None`; a RetryPolicy or DstPolicy replaces the whole policy,
    its None fields taking their defaults), guarded by `expected_version` when non-zero
    (FailedPrecondition on a conflict). Keywords: those of create_schedule except tenant, id and
    paused (use pause/resume), and one field of a policy leaving its others unchanged:
    max_attempts, initial_backoff, backoff_multiplier, max_backoff (of retry_policy), dst_gap,
    dst_repeated_hour (of dst_policy)."""
    if not changes:
        raise c.BadValue("changes", "name at least one field to change, e.g. cron='0 3 * * *'")
    for key in changes:
        if key not in c.SCHEDULE_FIELDS and key not in c.POLICY_FIELDS:
            raise c.BadValue(key, f"not an updatable field (expected one of "
                                  f"{', '.join([*c.SCHEDULE_FIELDS, *c.POLICY_FIELDS])})")
    parts = {k: changes.pop(k) for k in list(changes) if k in c.POLICY_FIELDS}
    for key in parts:
        if c.POLICY_FIELDS[key][0] in changes:
            raise c.BadValue(key, f"give {c.POLICY_FIELDS[key][0]} or its fields, not both")
    msg = c.schedule_message(changes)
    msg.id = schedule_id
    mask = FieldMask(paths=[c.SCHEDULE_FIELDS[k][0] for k in changes] + c.policy_fields(msg, parts))
    req = S.UpdateScheduleRequest(schedule=msg, expected_version=expected_version, update_mask=mask)
    return Call(SCHEDULER, "UpdateSchedule", req, lambda r: c.schedule(r.schedule), safe=True)


def get_schedule_by_id(ctx: Context, schedule_id: str) -> Call[t.Schedule]:
    return Call(SCHEDULER, "GetSchedule", S.GetScheduleRequest(schedule_id=schedule_id),
                lambda r: c.schedule(r.schedule), safe=True)


def _schedules_request(tenant: str | None, job_type: str | None, paused: bool | None, page_size: int,
                       name_contains: str | None, order_by: str | None) -> Any:
    req = S.ListSchedulesRequest(tenant=tenant or "", job_type=job_type or "", page_size=_page_size(page_size),
                                 name_contains=name_contains or "", order_by=order_by or "")
    if paused is not None:
        req.paused = paused
    return req


def list_schedules(ctx: Context, *, tenant: str | None = None, job_type: str | None = None,
                   paused: bool | None = None, page_size: int = 100, name_contains: str | None = None,
                   order_by: str | None = None) -> Pages[t.Schedule]:
    """Every live schedule the caller sees (optionally of one tenant, job type, paused or not,
    whose name contains `name_contains` ignoring case), ordered by creation (or by name with
    `order_by="name"`); pages are fetched as the iterator is consumed."""
    req = _schedules_request(tenant, job_type, paused, page_size, name_contains, order_by)
    return Pages(SCHEDULER, "ListSchedules", req, lambda r: [c.schedule(s) for s in r.schedules])


def schedules_page(ctx: Context, *, tenant: str | None = None, job_type: str | None = None,
                   paused: bool | None = None, page_size: int = 100, name_contains: str | None = None,
                   order_by: str | None = None, page_token: str = "") -> Call[t.Page[t.Schedule]]:
    """One page of list_schedules (same filters): its schedules and the token of the next page
    ("" on the last), for a caller that pages on demand (the console)."""
    req = _schedules_request(tenant, job_type, paused, page_size, name_contains, order_by)
    req.page_token = page_token
    return Call(SCHEDULER, "ListSchedules", req,
                lambda r: t.Page(tuple(c.schedule(s) for s in r.schedules), r.next_page_token), safe=True)


def delete(ctx: Context, schedule_id: str, *, expected_version: int = 0, cancel_pending: bool = False,
           reason: str = "") -> Call[int]:
    """Deletes a schedule (no tick fires after the call); with cancel_pending, also cancels its
    unfinished executions. Returns how many were cancelled."""
    req = S.DeleteScheduleRequest(schedule_id=schedule_id, expected_version=expected_version,
                                  cancel_pending=cancel_pending, reason=reason)
    return Call(SCHEDULER, "DeleteSchedule", req, lambda r: int(r.cancelled_count), safe=False)


def pause(ctx: Context, schedule_id: str, *, reason: str = "", expected_version: int = 0) -> Call[t.Schedule]:
    """Pauses a schedule (a no-op on a paused one); returns it."""
    req = S.PauseScheduleRequest(schedule_id=schedule_id, reason=reason, expected_version=expected_version)
    return Call(SCHEDULER, "PauseSchedule", req, lambda r: c.schedule(r.schedule), safe=True)


def resume(ctx: Context, schedule_id: str, *, reason: str = "", expected_version: int = 0) -> Call[t.Schedule]:
    """Resumes a paused schedule (a no-op on an active one); returns it."""
    req = S.ResumeScheduleRequest(schedule_id=schedule_id, reason=reason, expected_version=expected_version)
    return Call(SCHEDULER, "ResumeSchedule", req, lambda r: c.schedule(r.schedule), safe=True)


def trigger(ctx: Context, schedule_id: str, *, payload: Any = UNSET,
            overlap_policy: t.OverlapPolicy | str | None = None,  # type: ignore[valid-type]
            idempotency_key: str | None = None, reason: str = "") -> Call[t.Execution]:
    """Runs a schedule now, out of band (its payload unless `payload` is given); returns the
    execution. The Client adds an idempotency key when none is given, so a retried call never
    runs the schedule twice."""
    req = S.TriggerScheduleRequest(
        schedule_id=schedule_id, payload_json="" if payload is UNSET else c.json_text(payload, "payload"),
        overlap_policy=c.enum_number(t.OverlapPolicy, overlap_policy, "overlap_policy"),
        idempotency_key=idempotency_key or _new_key(), reason=reason)
    return Call(SCHEDULER, "TriggerSchedule", req, lambda r: c.execution(r.execution, r.deduplicated), safe=True)


def backfill(ctx: Context, schedule_id: str, start: datetime, end: datetime, *,
             reason: str = "") -> Call[t.Backfill]:
    """Runs the ticks start <= tick < end that have no execution yet (never a tick twice)."""
    req = S.BackfillScheduleRequest(schedule_id=schedule_id, range=c.time_range(start, end, "range"), reason=reason)
    return Call(SCHEDULER, "BackfillSchedule", req,
                lambda r: t.Backfill(r.created_count, r.existing_count, tuple(r.execution_ids)), safe=True)


def preview(ctx: Context, schedule_id: str | None = None, *, cron: str | None = None, timezone: str | None = None,
            dst_policy: t.DstPolicy | None = None, jitter: timedelta | None = None, seed_id: str | None = None,
            count: int = 10, after: datetime | None = None) -> Call[list[t.PreviewedTick]]:
    """The next `count` fire times (after `after`, default now) of a saved schedule, or of an
    unsaved one given by cron and timezone (`seed_id`: the id that seeds `H` fields and jitter)."""
    req = S.PreviewScheduleRequest(count=count, start_time=c.timestamp(after, "after"))
    if schedule_id is not None:
        if cron is not None or timezone is not None:
            raise c.BadValue("schedule_id", "give a schedule id or cron and timezone, not both")
        req.schedule_id = schedule_id
    else:
        req.spec.CopyFrom(S.ScheduleSpec(cron=cron or "", timezone=timezone or "",
                                         dst_policy=c.dst_policy(dst_policy), jitter=c.duration(jitter, "jitter"),
                                         schedule_id=seed_id or ""))
    return Call(SCHEDULER, "PreviewSchedule", req, lambda r: [c.previewed(x) for x in r.ticks], safe=True)


def explain(ctx: Context, schedule_id: str, start: datetime, end: datetime | None = None, *,
            page_size: int = 1000) -> Gather[t.Explanation]:
    """What happened, or will happen, at every tick start <= tick < end (end: now), every page."""
    req = S.ExplainScheduleRequest(schedule_id=schedule_id, range=c.time_range(start, end, "range"),
                                   page_size=_page_size(page_size))
    pages = Pages(SCHEDULER, "ExplainSchedule", req, lambda r: list(r.ticks))
    return Gather(pages, lambda rs: t.Explanation(ticks=tuple(c.explained(x) for r in rs for x in r.ticks),
                                                  notes=tuple(rs[0].notes) if rs else ()))


# ------------------------------------------------------------------------------------ jobs


def submit(ctx: Context, type: str, payload: Any = None, *, run_at: datetime | None = None,
           delay: timedelta | None = None, idempotency_key: str | None = None,
           priority: t.Priority | str | None = None,  # type: ignore[valid-type]
           retry_policy: t.RetryPolicy | None = None, attempt_timeout: timedelta | None = None,
           tenant: str | None = None, unique: t.Unique | None = None, concurrency_key: str | None = None,
           concurrency_limit: int | None = None, depends_on: Iterable[str] = (),
           dependency_policy: str | None = None, target: dict[str, Any] | None = None, queue: str | None = None,
           required_capabilities: tuple[str, ...] | list[str] = ()) -> Call[t.Execution]:
    """Submits a one-off job of `type` (or calling an HTTP `target`, type "": docs/http-targets.md)
    with `payload` (any JSON value), now, at `run_at` or after
    `delay`. A second submit with the same idempotency key returns the first execution
    (`deduplicated` true, `deduplicated_by` "idempotency_key"). The Client adds a key (a random
    UUID) when none is given, so a submit it retries after UNAVAILABLE never creates two jobs.
    `unique=Unique(by_args=True)` (or `args_keys=[...]`, `period=`, `states=[...]`): no second
    execution of the same job while one is queued, running, ... (`deduplicated_by` "unique"),
    exact across nodes; see `Unique`. `concurrency_key` with `concurrency_limit` (both or
    neither): at most that many of the tenant's runs with the key run at once, anywhere in the
    cluster. `depends_on`: the executions it waits for (ids, or idempotency keys of this tenant):
    it is created WAITING and queued when the last of them succeeded; one that does not succeed
    cancels it, naming it, unless `dependency_policy` is "always" (docs/semantics.md).
    `queue` (None: "default"): only workers naming it lease the job;
    `required_capabilities` ("gpu=a100", ...): only workers advertising all of them."""
    req = _job_request(ctx, "", t.JobSpec(type, payload, run_at=run_at, delay=delay, idempotency_key=idempotency_key,
                                          priority=priority, retry_policy=retry_policy,
                                          attempt_timeout=attempt_timeout, tenant=tenant, unique=unique,
                                          concurrency_key=concurrency_key, concurrency_limit=concurrency_limit,
                                          depends_on=tuple(depends_on), dependency_policy=dependency_policy,
                                          target=target, queue=queue,
                                          required_capabilities=required_capabilities))
    return Call(SCHEDULER, "SubmitJob", req,
                lambda r: c.execution(r.execution, r.deduplicated, r.deduplicated_by), safe=True)


# The most jobs one SubmitJobs call takes: the server's (cronwheel/limits.py).
SUBMIT_MANY_JOBS = MAX_SUBMIT_BATCH
# The most bytes of one SubmitJobs request: the node's gRPC receive limit (gRPC's default, 4 MiB)
# less room for framing. A list is split at whichever limit comes first.
SUBMIT_MANY_BYTES = 4 * 1024 * 1024 - 64 * 1024
# What the client checks before sending are the server's limits (cronwheel/limits.py): a job type
# and an idempotency key of at most MAX_NAME characters, a payload of at most MAX_PAYLOAD_BYTES as
# JSON.


def submit_many(ctx: Context, jobs: Iterable[t.JobSpec | dict[str, Any]]) -> Many[t.SubmittedJob]:
    """Submits one-off jobs, each a `JobSpec` (or a dict of JobSpec's fields: `{"type": "email",
    "payload": {...}, "delay": timedelta(minutes=5)}`), with the SubmitJobs RPC: one call per
    10,000 jobs (SUBMIT_MANY_JOBS) or 4 MiB of request, sent one after the other. Returns one
    SubmittedJob per job, in order: the execution id, whether it was deduplicated, its state,
    partition and run_at, and the idempotency key sent. An empty list sends nothing.

    Every job without an idempotency key gets one (a random UUID), so a call retried after
    UNAVAILABLE (like submit, on the next address) never creates a job twice: the retry returns
    the stored executions with `deduplicated` true.

    Each call is all or nothing on the server. Before sending anything the client checks every
    job (type given and at most 200 characters, payload JSON and at most 256 KiB, idempotency key
    at most 200 characters, enums, aware datetimes, run_at or delay, durations): a job it refuses
    raises InvalidArgument naming it, e.g. `jobs[17777].type`, and nothing at all is stored. What
    only the server can refuse (run_at more than 10 years ahead by its clock, a retry policy out
    of range, another tenant, a tenant's daily quota) fails that call alone: the calls before it
    are stored, nothing of it or of the calls after it is; the error names the job by its index
    in `jobs` (the server's per-call index translated, e.g. `jobs[17777].run_at`), and
    `error.submitted` holds the results of the stored jobs (jobs[0:len(error.submitted)]).
    A call that still meets UNAVAILABLE after its retries may or may not be stored. Either way,
    submitting again with the same keys (the caller's, or those the results and
    `error.submitted` carry for jobs given none) stores each remaining job once."""
    items: list[S.SubmitJobRequest] = []
    for i, job in enumerate(jobs):
        prefix = f"jobs[{i}]."
        if isinstance(job, dict):
            try:
                job = t.JobSpec(**job)
            except TypeError as exc:
                raise c.BadValue(f"jobs[{i}]", f"not a JobSpec: {exc}") from None
        if not isinstance(job, t.JobSpec):
            raise c.BadValue(f"jobs[{i}]", f"expected a JobSpec or a dict, got {job!r}")
        items.append(_job_request(ctx, prefix, job))
    calls: list[Call[list[t.SubmittedJob]]] = []
    starts: list[int] = []
    start, size = 0, 0
    for i, item in enumerate(items + [None]):  # type: ignore[list-item]
        n = 0 if item is None else item.ByteSize() + 8  # the item, its tag and length
        if i > start and (item is None or i - start == SUBMIT_MANY_JOBS or size + n > SUBMIT_MANY_BYTES):
            chunk = items[start:i]
            calls.append(Call(SCHEDULER, "SubmitJobs", S.SubmitJobsRequest(jobs=chunk),
                              functools.partial(_submitted, [j.idempotency_key for j in chunk]), safe=True))
            starts.append(start)
            start, size = i, 0
        size += n
    return Many(calls, starts)


# ------------------------------------------------------------------------------------ webhooks


def create_webhook(ctx: Context, url: str, *, kinds: Iterable[str] = (), tenant: str | None = None,
                   schedule_id: str | None = None, secret: str | None = None,
                   description: str = "") -> Call[t.CreatedWebhook]:
    """Subscribes `url` to event `kinds` (none: the alerts dead_letter, no_success_alert,
    misfire_refused, execution_failed), optionally of one tenant and one schedule. Returns the webhook and,
    when `secret` is not given, the signing secret generated, which is shown only here (a secret given is never
    returned: `secret` is then ""). Not retried."""
    req = A.CreateWebhookRequest(url=url, kinds=list(kinds), tenant=tenant or "", schedule_id=schedule_id or "",
                                 secret=secret or "", description=description)
    return Call(WEBHOOKS, "CreateWebhook", req, c.created_webhook, safe=False)


def list_webhooks(ctx: Context, *, tenant: str | None = None, page_size: int = 100) -> Pages[t.Webhook]:
    """Webhooks by ascending id (without their secrets)."""
    req = A.ListWebhooksRequest(tenant=tenant or "", page_size=_page_size(page_size))
    return Pages(WEBHOOKS, "ListWebhooks", req, lambda r: [c.webhook(w) for w in r.webhooks])


def delete_webhook(ctx: Context, webhook_id: str) -> Call[int]:
    """Deletes a webhook and its deliveries; returns how many were still pending (not sent)."""
    req = A.DeleteWebhookRequest(webhook_id=webhook_id)
    return Call(WEBHOOKS, "DeleteWebhook", req, lambda r: int(r.dropped_pending), safe=False)


def list_deliveries(ctx: Context, *, webhook_id: str | None = None, event_id: int = 0,
                    state: t.DeliveryState | str | None = None,  # type: ignore[valid-type]
                    tenant: str | None = None, page_size: int = 100) -> Pages[t.Delivery]:
    """Deliveries newest first: state (pending, delivered, failed), attempts, last error."""
    req = A.ListDeliveriesRequest(webhook_id=webhook_id or "", event_id=event_id, tenant=tenant or "",
                                  state=c.enum_number(t.DeliveryState, state, "state"),  # type: ignore[arg-type]
                                  page_size=_page_size(page_size))
    return Pages(WEBHOOKS, "ListDeliveries", req, lambda r: [c.delivery(d) for d in r.deliveries])


# ------------------------------------------------------------------------------- tenants

TENANT_INTS = ("max_concurrency", "weight")  # required numbers (None is refused)
TENANT_OPTIONAL = ("rate_per_s", "burst", "max_schedules", "max_executions_per_day")  # None: no limit
_TENANT_REALS = ("rate_per_s", "burst")


def tenant_message(tenant_id: str, values: dict[str, Any]) -> A.Tenant:
    """A Tenant message from keyword values, checked for type (the server checks ranges)."""
    msg = A.Tenant(id=tenant_id if isinstance(tenant_id, str) else "")
    if not isinstance(tenant_id, str):
        raise c.BadValue("tenant_id", f"expected a string, got {tenant_id!r}")
    for key, value in values.items():
        if key == "egress_rules":  # a list of "HOST_GLOB" / "HOST_GLOB:PORT" (None or []: none)
            if value is not None and (isinstance(value, str) or not all(isinstance(r, str) for r in value)):
                raise c.BadValue(key, f"expected a list of strings, got {value!r}")
            msg.egress_rules.extend(value or ())
            continue
        if key not in TENANT_INTS + TENANT_OPTIONAL:
            raise c.BadValue(key, f"not a tenant field (expected one of "
                                  f"{', '.join(TENANT_INTS + TENANT_OPTIONAL + ('egress_rules',))})")
        if value is None:
            if key in TENANT_INTS:
                raise c.BadValue(key, "cannot be cleared (give a number >= 1)")
            continue
        real = key in _TENANT_REALS
        if isinstance(value, bool) or not isinstance(value, (int, float) if real else int):
            raise c.BadValue(key, f"expected {'a number' if real else 'an integer'}, got {value!r}")
        if not real and not -(2**31) <= value < 2**31:
            raise c.BadValue(key, f"out of range, got {value}")
        setattr(msg, key, float(value) if real else value)
    return msg


def create_tenant(ctx: Context, tenant_id: str, *, max_concurrency: int | None = None,
                  rate_per_s: float | None = None, burst: float | None = None, weight: int | None = None,
                  max_schedules: int | None = None, max_executions_per_day: int | None = None,
                  egress_rules: list[str] | None = None) -> Call[t.Tenant]:
    """Creates a tenant with its limits and quotas (admin tokens only): `max_concurrency` (default
    1000) runs at once, `rate_per_s` starts per second with a bucket of `burst` (default: one
    second's worth; None: no rate limit), `weight` (default 1) its share of starts,
    `max_schedules` and `max_executions_per_day` quotas (None: none), `egress_rules` where its
    HTTP targets may point ("HOST_GLOB" or "HOST_GLOB:PORT" each; None: any public address).
    AlreadyExists when it has a row. Not retried."""
    values = {"max_concurrency": max_concurrency or 0, "weight": weight or 0, "rate_per_s": rate_per_s,
              "burst": burst, "max_schedules": max_schedules, "max_executions_per_day": max_executions_per_day,
              "egress_rules": egress_rules}
    req = A.CreateTenantRequest(tenant=tenant_message(tenant_id, values))
    return Call(TENANTS, "CreateTenant", req, lambda r: c.tenant(r.tenant), safe=False)


def update_tenant(ctx: Context, tenant_id: str, **changes: Any) -> Call[t.Tenant]:
    """Changes the fields given as keyword arguments (those of create_tenant; the field mask is
    their names). None clears rate_per_s (no rate limit), burst (one second's worth) or a quota
    (no quota). Returns the tenant as it is now."""
    if not changes:
        raise c.BadValue("changes", "name at least one field to change, e.g. rate_per_s=100")
    req = A.UpdateTenantRequest(tenant=tenant_message(tenant_id, changes), update_mask=FieldMask(paths=sorted(changes)))
    return Call(TENANTS, "UpdateTenant", req, lambda r: c.tenant(r.tenant), safe=True)


def get_tenant(ctx: Context, tenant_id: str) -> Call[t.Tenant]:
    """One tenant's limits and quotas. NotFound when it has no row (it then acts with the
    defaults)."""
    return Call(TENANTS, "GetTenant", A.GetTenantRequest(tenant_id=tenant_id), lambda r: c.tenant(r.tenant),
                safe=True)


def tenant_queue_message(queue: str, max_concurrency: int | None, weight: int | None) -> A.TenantQueue:
    """A TenantQueue message from set_tenant_queue's values, checked for type (the server
    checks ranges); unset (None) is sent as 0."""
    for key, value in (("max_concurrency", max_concurrency), ("weight", weight)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31):
            raise c.BadValue(key, f"expected an integer >= 1 or None, got {value!r}")
    return A.TenantQueue(name=queue, max_concurrency=max_concurrency or 0, weight=weight or 0)


def set_tenant_queue(ctx: Context, tenant_id: str, queue: str, *, max_concurrency: int | None = None,
                     weight: int | None = None) -> Call[list[t.TenantQueue]]:
    """Sets a queue's limits for a tenant (admin tokens only; replaces what was set): at most
    `max_concurrency` of its runs of the queue at once (None: no limit but the tenant's), and
    `weight` (default 1) among its queues. Returns the tenant's queues with limits set."""
    req = A.SetTenantQueueRequest(tenant_id=tenant_id, queue=tenant_queue_message(queue, max_concurrency, weight))
    return Call(TENANTS, "SetTenantQueue", req, lambda r: [c.tenant_queue(x) for x in r.queues], safe=True)


def list_tenants(ctx: Context, *, page_size: int = 100) -> Pages[t.Tenant]:
    """Tenants by ascending id."""
    req = A.ListTenantsRequest(page_size=_page_size(page_size))
    return Pages(TENANTS, "ListTenants", req, lambda r: [c.tenant(x) for x in r.tenants])


def create_token(ctx: Context, name: str, *, tenant: str | None = None, admin: bool = False,
                 expires_at: datetime | None = None, expires_in: timedelta | None = None) -> Call[t.CreatedToken]:
    """Creates a bearer token (admin tokens only): a tenant token for `tenant`, or with `admin`
    an admin token (`tenant` then its default tenant); it stops working at `expires_at` (or
    after `expires_in`; neither: never). Returns the token and its secret, which is shown only
    here (the cluster keeps its SHA-256). Every node accepts it within about a second. Not
    retried."""
    if expires_at is not None and expires_in is not None:
        raise c.BadValue("expires_in", "give expires_at or expires_in, not both")
    if expires_in is not None:
        if not isinstance(expires_in, timedelta):
            raise c.BadValue("expires_in", f"expected a timedelta, got {expires_in!r}")
        expires_at = ctx.clock.now() + expires_in
    req = A.CreateTokenRequest(name=name, tenant=tenant or "", admin=bool(admin),
                               expires_at=c.timestamp(expires_at, "expires_at"))
    return Call(TENANTS, "CreateToken", req, c.created_token, safe=False)


def list_tokens(ctx: Context, *, tenant: str | None = None, include_revoked: bool = False,
                page_size: int = 100) -> Pages[t.Token]:
    """API-made tokens by ascending id, without their secrets (the auth file's are not listed)."""
    req = A.ListTokensRequest(tenant=tenant or "", include_revoked=include_revoked, page_size=_page_size(page_size))
    return Pages(TENANTS, "ListTokens", req, lambda r: [c.token(x) for x in r.tokens])


def revoke_token(ctx: Context, token_id: str) -> Call[t.Token]:
    """Revokes a token: every node refuses it within about a second. Revoking it again changes
    nothing. Returns the token with its revoked_at."""
    return Call(TENANTS, "RevokeToken", A.RevokeTokenRequest(token_id=token_id), lambda r: c.token(r.token),
                safe=True)


def _submitted(keys: list[str], resp: S.SubmitJobsResponse) -> list[t.SubmittedJob]:
    return [c.submitted(r, key) for r, key in zip(resp.results, keys, strict=True)]


_JOB_INDEX = re.compile(r"^jobs\[(\d+)\]")


def at_offset(exc: ApiError, start: int, submitted: list[Any]) -> ApiError:
    """A SubmitJobs call's error as submit_many raises it: "jobs[i]..." (the call's index) becomes
    "jobs[start + i]..." (the caller's), and `.submitted` holds the results of the earlier calls."""
    message = _JOB_INDEX.sub(lambda m: f"jobs[{start + int(m.group(1))}]", str(exc), count=1)
    out = type(exc)(exc.code, message)
    out.submitted = tuple(submitted)
    return out


def _new_key() -> str:
    """A random idempotency key (a version-4 UUID) from cronwheel.entropy's pool."""
    return v4_text(random_bytes(16))


def v4_text(raw: bytes) -> str:
    """str(uuid.UUID(bytes=raw, version=4)) for 16 bytes, in half the time (a submit_many of 1,000
    jobs made 1,000 of them)."""
    n = int.from_bytes(raw, "big") & _V4_CLEAR | _V4_SET
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_V4_CLEAR = ~(0xF000 << 64 | 0xC000 << 48) & (1 << 128) - 1  # the version nibble, the variant's two bits
_V4_SET = 0x4000 << 64 | 0x8000 << 48  # version 4, variant RFC 4122


def _job_request(ctx: Context, prefix: str, job: t.JobSpec) -> S.SubmitJobRequest:
    """One job as a SubmitJobRequest, checked as far as the client can (fields named `prefix` +
    keyword), with an idempotency key added when it has none."""
    if not isinstance(job.type, str) or (not job.type.strip() and job.target is None):
        raise c.BadValue(f"{prefix}type", "required: the job type, a non-empty string (or a target)")
    if len(job.type.strip()) > MAX_NAME:
        raise c.BadValue(f"{prefix}type", f"at most {MAX_NAME} characters, got {len(job.type.strip())}")
    key = job.idempotency_key
    if key is not None and (not isinstance(key, str) or len(key.strip()) > MAX_NAME):
        raise c.BadValue(f"{prefix}idempotency_key", f"expected a string of at most {MAX_NAME} characters")
    run_at = job.run_at
    if run_at is not None and job.delay is not None:
        raise c.BadValue(f"{prefix}delay", "give run_at or delay, not both")
    if job.delay is not None:
        if not isinstance(job.delay, timedelta):
            raise c.BadValue(f"{prefix}delay", f"expected a timedelta, got {job.delay!r}")
        run_at = ctx.clock.now() + job.delay
    ckey, climit = job.concurrency_key, job.concurrency_limit
    if ckey is not None and (not isinstance(ckey, str) or not ckey.strip() or len(ckey.strip()) > MAX_NAME):
        raise c.BadValue(f"{prefix}concurrency_key", f"expected a non-empty string of at most {MAX_NAME} characters")
    if climit is not None and (isinstance(climit, bool) or not isinstance(climit, int) or climit < 1):
        raise c.BadValue(f"{prefix}concurrency_limit", f"expected an int >= 1, got {climit!r}")
    if (ckey is None) != (climit is None):
        missing = "concurrency_limit" if climit is None else "concurrency_key"
        raise c.BadValue(f"{prefix}{missing}", "concurrency_key and concurrency_limit go together")
    payload = "" if job.payload is None else c.json_text(job.payload, f"{prefix}payload")
    if len(payload) * 4 > MAX_PAYLOAD_BYTES and len(payload.encode()) > MAX_PAYLOAD_BYTES:  # <= 4 bytes a char
        raise c.BadValue(f"{prefix}payload", f"at most {MAX_PAYLOAD_BYTES} bytes as JSON, got {len(payload.encode())}")
    # Only the fields given: a field left at its default is not sent either way, and naming each
    # one cost a thousand-job submit_many a millisecond.
    fields: dict[str, Any] = {"type": job.type, "idempotency_key": key or _new_key()}
    if job.target is not None:
        fields["target"] = c.http_target(job.target, f"{prefix}target")
    if job.tenant:
        fields["tenant"] = job.tenant
    if payload:
        fields["payload_json"] = payload
    if run_at is not None:
        fields["run_at"] = c.timestamp(run_at, f"{prefix}run_at")
    if job.priority is not None:
        fields["priority"] = c.enum_number(t.Priority, job.priority, f"{prefix}priority")
    if job.retry_policy is not None:
        fields["retry_policy"] = c.retry_policy(job.retry_policy, f"{prefix}retry_policy")
    if job.attempt_timeout is not None:
        fields["timeout"] = c.duration(job.attempt_timeout, f"{prefix}attempt_timeout")
    if job.unique is not None:
        fields["unique"] = c.unique(job.unique, f"{prefix}unique")
    if ckey is not None and climit is not None:
        fields["concurrency_key"], fields["concurrency_limit"] = ckey, min(climit, 2**31 - 1)
    if job.depends_on:
        if isinstance(job.depends_on, str) or not all(isinstance(r, str) for r in job.depends_on):
            raise c.BadValue(f"{prefix}depends_on", "expected a list of execution ids or idempotency keys")
        fields["depends_on"] = list(job.depends_on)
    if job.dependency_policy is not None:
        fields["dependency_policy"] = c.enum_number(t.DependencyPolicy, job.dependency_policy,
                                                    f"{prefix}dependency_policy")
    if job.queue:
        fields["queue"] = job.queue
    if job.required_capabilities:
        if isinstance(job.required_capabilities, str) or not all(isinstance(x, str) for x in job.required_capabilities):
            raise c.BadValue(f"{prefix}required_capabilities", "expected a list of key=value strings")
        fields["required_capabilities"] = list(job.required_capabilities)
    return S.SubmitJobRequest(**fields)


def get_execution(ctx: Context, execution_id: str) -> Call[t.Execution]:
    """One execution."""
    return Call(SCHEDULER, "GetExecution", S.GetExecutionRequest(execution_id=execution_id),
                lambda r: c.execution(r.execution), safe=True)


def logs_page(ctx: Context, execution_id: str, *, attempt: int | None = None, after: tuple[int, int] = (0, 0),
              page_size: int = DEFAULT_LOG_PAGE) -> Call[t.LogPage]:
    """A page of an execution's log lines after `after` (attempt, seq), in order; `attempt`: only
    that attempt's. The page's `final` says the execution is final (read before the lines)."""
    if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1):
        raise c.BadValue("attempt", f"expected an int >= 1, got {attempt!r}")
    if not 1 <= page_size <= MAX_LOG_PAGE:
        raise c.BadValue("page_size", f"expected 1..{MAX_LOG_PAGE}, got {page_size}")
    req = S.GetExecutionLogsRequest(execution_id=execution_id, attempt=attempt or 0, after_attempt=after[0],
                                    after_seq=after[1], page_size=page_size)
    return Call(SCHEDULER, "GetExecutionLogs", req, c.log_page, safe=True)


def logs_step(page: t.LogPage, follow: bool) -> str:
    """What a logs() iteration does after `page`: "next" (more lines are stored: ask again at
    once), "wait" (following a running execution and caught up: ask again after a pause), "end"."""
    if page.more:
        return "next"
    return "wait" if follow and not page.final else "end"


def _executions_request(tenant: str | None, schedule_id: str | None, states: Iterable[Any],
                        scheduled_from: datetime | None, scheduled_until: datetime | None, type: str | None,
                        page_size: int) -> Any:
    req = S.ListExecutionsRequest(
        tenant=tenant or "", schedule_id=schedule_id or "",
        states=[c.enum_number(t.ExecutionState, s, "states") for s in states], type=type or "",
        page_size=_page_size(page_size))
    if scheduled_from is not None or scheduled_until is not None:
        req.scheduled_for.CopyFrom(c.time_range(scheduled_from, scheduled_until, "scheduled"))
    return req


def list_executions(ctx: Context, *, tenant: str | None = None, schedule_id: str | None = None,
                    states: Iterable[t.ExecutionState | str] = (),  # type: ignore[valid-type]
                    scheduled_from: datetime | None = None, scheduled_until: datetime | None = None,
                    type: str | None = None, page_size: int = 100) -> Pages[t.Execution]:
    """Executions matching every filter, newest scheduled_for first (scheduled_from inclusive,
    scheduled_until exclusive); pages are fetched as the iterator is consumed."""
    req = _executions_request(tenant, schedule_id, states, scheduled_from, scheduled_until, type, page_size)
    return Pages(SCHEDULER, "ListExecutions", req, lambda r: [c.execution(e) for e in r.executions])


def executions_page(ctx: Context, *, tenant: str | None = None, schedule_id: str | None = None,
                    states: Iterable[t.ExecutionState | str] = (),  # type: ignore[valid-type]
                    scheduled_from: datetime | None = None, scheduled_until: datetime | None = None,
                    type: str | None = None, page_size: int = 100, page_token: str = "") -> Call[t.Page[t.Execution]]:
    """One page of list_executions (same filters) and the token of the next page ("" on the last)."""
    req = _executions_request(tenant, schedule_id, states, scheduled_from, scheduled_until, type, page_size)
    req.page_token = page_token
    return Call(SCHEDULER, "ListExecutions", req,
                lambda r: t.Page(tuple(c.execution(e) for e in r.executions), r.next_page_token), safe=True)


def cancel(ctx: Context, execution_id: str, *, reason: str = "") -> Call[t.Execution]:
    """Cancels an execution: CANCELLED at once unless RUNNING (then cancel_requested, and the
    worker is told). FailedPrecondition when it already SUCCEEDED, is DEAD or SKIPPED."""
    req = S.CancelExecutionRequest(execution_id=execution_id, reason=reason)
    return Call(SCHEDULER, "CancelExecution", req, lambda r: c.execution(r.execution), safe=True)


def retry(ctx: Context, execution_id: str, *, additional_attempts: int = 1, run_at: datetime | None = None,
          reason: str = "") -> Call[t.Execution]:
    """Brings a DEAD, FAILED, CANCELLED or SKIPPED execution back with `additional_attempts` more
    attempts, at `run_at` (default now). FailedPrecondition in any other state."""
    req = S.RetryExecutionRequest(execution_id=execution_id, additional_attempts=additional_attempts,
                                  run_at=c.timestamp(run_at, "run_at"), reason=reason)
    return Call(SCHEDULER, "RetryExecution", req, lambda r: c.execution(r.execution), safe=False)


# ------------------------------------------------------------------------------------ cluster


def status(ctx: Context) -> Call[t.ClusterStatus]:
    """The cluster as the answering node sees it (admin tokens only: PermissionDenied otherwise)."""
    return Call(ADMIN, "ClusterStatus", A.ClusterStatusRequest(), c.cluster_status, safe=True)


def events_page(*, since: int = 0, tenant: str | None = None, schedule_id: str | None = None,
                execution_id: str | None = None, kind: str | None = None, alerts_only: bool = False,
                page_size: int = 1000) -> Pages[t.Event]:
    req = A.ListEventsRequest(tenant=tenant or "", schedule_id=schedule_id or "", execution_id=execution_id or "",
                              kind=kind or "", alerts_only=alerts_only, after_id=since,
                              page_size=_page_size(page_size))
    return Pages(ADMIN, "ListEvents", req, lambda r: [c.event(e) for e in r.events])
