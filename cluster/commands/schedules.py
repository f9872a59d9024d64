"""Commands on schedules: validation, then one transaction that writes the row, an audit event
and a change notification for the partition's owner.

The gRPC API, the CLI and the tests all go through these functions (and those of
`commands.runs` for executions), so a rule is written once. Validation errors name the field
in the API's terms (`InvalidArgument("retry_policy.max_attempts", ...)`); nothing is stored when
any check fails. `now` is an argument: the caller reads the clock.

Tenancy: every command takes `tenant`: None for an admin caller (sees every tenant), else the
caller's tenant. Another tenant's object is reported exactly like a missing one (NotFound).

Rows returned carry JSON columns (payload, checkpoint, result) as JSON *text*, exactly as
PostgreSQL renders them, so large and precise numbers survive the round trip.

Every change of a schedule ends with a change notification (`store.schedules.notify_changed`,
`pg_notify('cronwheel_due', '<partition>:s:<id>')`) in the same transaction, so the owner of
the partition reloads it once the change is visible.
`next_run_at` stores the next TICK (scheduled_for), never tick + jitter.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from cronwheel import http_target
from cronwheel.cluster.commands.lanes import (
    DEFAULT_QUEUE,
    capabilities,
    capability_items,
    capability_set,
    queue_name,
)
from cronwheel.cluster.commands.values import (
    OVERLAP_POLICIES,
    JsonText,
    QuotaExceeded,
    RetryPolicy,
    duration,
    partition_of,
    payload_json,
    priority,
    reason_text,
    text,
    timeout,
    visible,
)
from cronwheel.cluster.retention import policy as retention
from cronwheel.cron import (
    CronSchedule,
    parse_dst_policy,
    parse_misfire_policy,
    parse_schedule,
    validate_jitter_s,
    validate_schedule_spec,
)
from cronwheel.errors import InvalidArgument, VersionConflict
from cronwheel.limits import MAX_NAME
from cronwheel.storage import PgStore
from cronwheel.storage.api import Conn, Event, Row
from cronwheel.storage.schedules import ScheduleFields, TenantQuota

__all__ = ["JsonText", "QuotaExceeded", "RetryPolicy", "ScheduleSpec", "create_schedule", "delete_schedule",
           "get_schedule", "partition_of", "set_paused", "update_schedule"]

# Spec fields whose change moves the schedule's ticks (next_run_at is recomputed).
TIMING_FIELDS = ("cron", "timezone", "dst_gap", "dst_repeated", "jitter_s")
# Domain field -> API (proto) field, for audit records.
API_NAMES = {"payload": "payload_json", "retry": "retry_policy", "timeout_s": "timeout",
             "dst_gap": "dst_policy.gap", "dst_repeated": "dst_policy.repeated_hour", "jitter_s": "jitter",
             "alert_if_no_success_within_s": "alert_if_no_success_within",
             "keep_succeeded_for_s": "keep_succeeded_for", "keep_failed_for_s": "keep_failed_for"}


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    tenant: str
    name: str
    cron: str
    timezone: str
    job_type: str
    misfire_policy: str | None
    payload: Any = field(default_factory=dict)
    priority: str = "default"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float | None = None
    max_catch_up: int = 10
    overlap_policy: str = "allow"
    dst_gap: str | None = None
    dst_repeated: str | None = None
    jitter_s: float = 0.0
    paused: bool = False
    alert_if_no_success_within_s: float | None = None
    keep_last: int | None = None  # retention (cluster/retention/policy.py): None inherits
    keep_succeeded_for_s: float | None = None
    keep_failed_for_s: float | None = None
    id: uuid.UUID | None = None
    # A child schedule (issue 52): no cron of its own; it runs once per successful run of this
    # parent, with the parent run's scheduled time (dispatch.sql release_children). Immutable.
    parent_schedule_id: uuid.UUID | None = None
    target: str | None = None  # an HTTP target's JSON (cronwheel/http_target.py) instead of a job type
    queue: str | None = None  # None: lanes.DEFAULT_QUEUE
    required_capabilities: tuple[str, ...] = ()  # checked: sorted, each once (lanes.capabilities)

    def validated(self) -> tuple[ScheduleSpec, CronSchedule | None]:
        """Every field checked (in API field order), defaults filled, the cron parsed (None: a
        child schedule, which has none)."""
        sid = self.id or uuid.uuid4()
        spec = replace(self, id=sid, tenant=text("tenant", self.tenant), name=text("name", self.name))
        cron: CronSchedule | None = None
        if self.parent_schedule_id is None:
            cron = validate_cron(spec, sid)  # timing fields, jitter included
        else:
            spec = _child_timing(spec)
        if self.overlap_policy not in OVERLAP_POLICIES:
            raise InvalidArgument("overlap_policy", f"unknown policy {self.overlap_policy!r}")
        dst = cron.dst_policy if cron is not None else None
        spec = replace(
            spec,
            cron=spec.cron.strip(),
            misfire_policy=parse_misfire_policy(spec.misfire_policy).value,
            dst_gap=dst.gap.value if dst is not None and dst.gap else None,
            dst_repeated=dst.repeated.value if dst is not None and dst.repeated else None,
            job_type=job_type_or_target(self.job_type, self.target),
            target=None if self.target is None else http_target.parse(self.target).to_json(),
            payload=payload_json("payload_json", self.payload),
            priority=priority(self.priority),
            retry=self.retry.validate(),
            timeout_s=timeout("timeout", self.timeout_s),
            alert_if_no_success_within_s=duration("alert_if_no_success_within", self.alert_if_no_success_within_s,
                                                  60.0, 365 * 86400.0),
            keep_last=retention.keep_last("keep_last", self.keep_last),
            keep_succeeded_for_s=retention.keep_for("keep_succeeded_for", self.keep_succeeded_for_s),
            keep_failed_for_s=retention.keep_for("keep_failed_for", self.keep_failed_for_s),
            queue=queue_name("queue", self.queue),
            required_capabilities=capabilities("required_capabilities", self.required_capabilities),
        )
        return spec, cron


def _child_timing(spec: ScheduleSpec) -> ScheduleSpec:
    """A child schedule's timing fields: none of its own (its runs take their parent run's
    scheduled time), so cron must be empty and the rest is stored as the defaults."""
    if spec.cron.strip():
        raise InvalidArgument("cron", "a child schedule (parent_schedule_id) has no cron of its own: leave it empty")
    if spec.jitter_s:
        raise InvalidArgument("jitter", "a child schedule runs at its parent run's time: no jitter")
    return replace(spec, cron="", timezone=spec.timezone.strip() or "UTC", dst_gap=None, dst_repeated=None,
                   misfire_policy=spec.misfire_policy or "skip")


def _not_child(spec: ScheduleSpec) -> None:
    if spec.parent_schedule_id is not None:
        raise InvalidArgument("cron", f"a child schedule has no cron of its own: it runs once per successful run "
                                      f"of its parent {spec.parent_schedule_id}")


def job_type_or_target(job_type: str, target: str | None, field: str = "job_type") -> str:
    """The job type of a schedule or job: its own, or `http` for an HTTP target; never both (the
    one rule of issue 50, for schedules and submitted jobs)."""
    if target is not None:
        if job_type and job_type != http_target.HTTP_TYPE:
            raise InvalidArgument("target", "set either job_type or target, not both")
        return http_target.HTTP_TYPE
    jtype = text(field, job_type)
    if jtype == http_target.HTTP_TYPE:
        raise InvalidArgument(field, f"{jtype!r} is reserved for HTTP targets: set target instead")
    return jtype


def _check_target_rules(spec: ScheduleSpec, tenant: TenantQuota | None) -> None:
    """A target stored now must match its tenant's egress rules (TenantService egress_rules)."""
    if spec.target is not None and tenant is not None:
        http_target.check_egress_rules(http_target.parse(spec.target).url, tenant.egress_rules)


def target_text(value: Any) -> str | None:
    """A stored target (jsonb: a dict, or JSON text) as its canonical JSON text; None: none."""
    if value is None:
        return None
    return http_target.parse(value).to_json()


def _check_lengths(cron: object, timezone: object) -> None:
    if not isinstance(cron, str) or len(cron) > MAX_NAME:
        raise InvalidArgument("cron", f"must be at most {MAX_NAME} characters")
    if not isinstance(timezone, str) or len(timezone) > MAX_NAME:
        raise InvalidArgument("timezone", f"must be at most {MAX_NAME} characters")


@contextmanager
def _api_fields() -> Iterator[None]:
    """The cron module's field names -> the API's ("jitter_s" -> "jitter")."""
    try:
        yield
    except InvalidArgument as exc:
        name = {"jitter_s": "jitter", "dst_policy.repeated": "dst_policy.repeated_hour"}.get(exc.field)
        if name is None:
            raise
        raise InvalidArgument(name, exc.message.split(": ", 1)[-1]) from None


def validate_cron(spec: ScheduleSpec, sid: uuid.UUID) -> CronSchedule:
    """Every timing field of a spec checked (the cron module's rules), the cron parsed. A child
    schedule has none: refused, naming `cron` (a trigger, a backfill, a preview of one)."""
    _not_child(spec)
    _check_lengths(spec.cron, spec.timezone)
    with _api_fields():
        return validate_schedule_spec(
            spec.cron.strip(), spec.timezone, {"gap": spec.dst_gap, "repeated": spec.dst_repeated},
            spec.misfire_policy, spec.max_catch_up, spec.jitter_s, str(sid),
        )


def preview_cron(cron: str, timezone: str, dst_gap: str | None, dst_repeated: str | None, jitter_s: float,
                 seed: str) -> CronSchedule:
    """The timing fields of an unsaved spec (PreviewSchedule: no misfire policy needed), checked
    by the same rules as `validate_cron`."""
    _check_lengths(cron, timezone)
    with _api_fields():
        validate_jitter_s(jitter_s)
        dst = parse_dst_policy({"gap": dst_gap, "repeated": dst_repeated})
        return parse_schedule(cron.strip(), timezone, dst_policy=dst, schedule_id=seed)


def spec_of(row: Mapping[str, Any]) -> ScheduleSpec:
    """The full specification of a stored schedule (payload as JsonText)."""
    return ScheduleSpec(
        tenant=row["tenant"], name=row["name"], cron=row["cron"], timezone=row["timezone"],
        job_type=row["job_type"], misfire_policy=row["misfire_policy"], payload=JsonText(row["payload"]),
        priority=row["priority"],
        retry=RetryPolicy(row["retry_initial_s"], row["retry_multiplier"], row["retry_max_s"], row["max_attempts"]),
        timeout_s=row["timeout_s"], max_catch_up=row["max_catch_up"], overlap_policy=row["overlap_policy"],
        dst_gap=row["dst_gap"], dst_repeated=row["dst_repeated"], jitter_s=row["jitter_s"], paused=row["paused"],
        alert_if_no_success_within_s=row["alert_if_no_success_within_s"], keep_last=row["keep_last"],
        keep_succeeded_for_s=row["keep_succeeded_for_s"], keep_failed_for_s=row["keep_failed_for_s"], id=row["id"],
        parent_schedule_id=row.get("parent_schedule_id"),
        target=target_text(row.get("target")),
        queue=row["queue"], required_capabilities=capability_items(row["required_capabilities"]),
    )


def _fields(spec: ScheduleSpec) -> ScheduleFields:
    assert spec.id is not None
    return ScheduleFields(
        id=spec.id, tenant=spec.tenant, name=spec.name, cron=spec.cron, timezone=spec.timezone,
        dst_gap=spec.dst_gap, dst_repeated=spec.dst_repeated, job_type=spec.job_type, payload=str(spec.payload),
        priority=spec.priority, retry_initial_s=spec.retry.initial_s, retry_multiplier=spec.retry.multiplier,
        retry_max_s=spec.retry.max_s, max_attempts=spec.retry.max_attempts, timeout_s=spec.timeout_s,
        misfire_policy=str(spec.misfire_policy), max_catch_up=spec.max_catch_up,
        overlap_policy=spec.overlap_policy, jitter_s=spec.jitter_s, paused=spec.paused,
        alert_if_no_success_within_s=spec.alert_if_no_success_within_s, keep_last=spec.keep_last,
        keep_succeeded_for_s=spec.keep_succeeded_for_s, keep_failed_for_s=spec.keep_failed_for_s,
        target=spec.target,
        queue=spec.queue or DEFAULT_QUEUE, required_capabilities=capability_set(spec.required_capabilities),
    )


async def lock_schedule(store: PgStore, conn: Conn, schedule_id: uuid.UUID, tenant: str | None,
                        expected_version: int | None = None) -> Row:
    """The live schedule, row-locked for this transaction; NotFound across tenants."""
    row = await store.schedules.lock(conn, schedule_id)
    row = visible(row, tenant, "schedule", schedule_id)
    if expected_version is not None and row["version"] != expected_version:
        raise VersionConflict("schedule", schedule_id, expected_version, row["version"])
    return row


async def get_schedule(store: PgStore, schedule_id: uuid.UUID, tenant: str | None) -> Row:
    row = await store.schedules.get(schedule_id)
    return visible(row, tenant, "schedule", schedule_id)


async def create_schedule(store: PgStore, spec: ScheduleSpec, now: datetime, partitions: int,
                          actor: str = "api") -> Row:
    """Insert a schedule (version 1, next_run_at = first tick after now unless paused).
    AlreadyExists for a taken id or live name (storage.errors names which);
    QuotaExceeded past tenants.max_schedules."""
    spec, cron = spec.validated()
    assert spec.id is not None
    p = partition_of(spec.id, partitions)
    await _register_capabilities(store, spec)
    async with store.transaction() as conn:
        quota = await store.schedules.lock_tenant(conn, spec.tenant)
        _check_target_rules(spec, quota)
        if quota is not None and quota.max_schedules is not None:
            live = await store.schedules.count_live(conn, spec.tenant)
            if live >= quota.max_schedules:
                raise QuotaExceeded("max_schedules",
                                    f"tenant {spec.tenant} has {live} schedules, its quota is {quota.max_schedules}")
        if spec.parent_schedule_id is not None:
            await _check_parent(store, conn, spec)
        row = await store.schedules.insert(conn, _fields(spec), p,
                                           None if spec.paused or cron is None else cron.next_after(now), now)
        if spec.parent_schedule_id is not None:
            await store.schedules.set_parent(conn, spec.id, spec.parent_schedule_id)
            row = {**row, "parent_schedule_id": spec.parent_schedule_id}
        await store.events.insert(Event("schedule_created", spec.tenant, spec.id, None, p, actor, at=now,
                                        data={"name": spec.name, "cron": spec.cron, "timezone": spec.timezone,
                                              "paused": spec.paused}), conn)
        await store.schedules.notify_changed(conn, p, spec.id)
    return row


async def _check_parent(store: PgStore, conn: Conn, spec: ScheduleSpec) -> None:
    """The parent is a live schedule of the same tenant (locked: it cannot be deleted meanwhile);
    a new schedule has no children yet, so no cycle can form."""
    assert spec.parent_schedule_id is not None
    parent = await store.schedules.lock(conn, spec.parent_schedule_id)
    if parent is None or parent["tenant"] != spec.tenant or parent.get("deleted_at") is not None:
        raise InvalidArgument("parent_schedule_id", f"no live schedule {spec.parent_schedule_id} of tenant "
                                                    f"{spec.tenant}")


def _apply(old: ScheduleSpec, changes: Mapping[str, Any]) -> ScheduleSpec:
    retry = old.retry
    flat: dict[str, Any] = {}
    for key, value in changes.items():
        if key.startswith("retry."):
            retry = replace(retry, **{key.split(".", 1)[1]: value})
        elif key in ScheduleSpec.__dataclass_fields__ and key not in ("id", "tenant", "paused", "parent_schedule_id"):
            flat[key] = value
        else:
            raise InvalidArgument("update_mask", f"{key!r} cannot be updated")
    return replace(old, retry=flat.pop("retry", retry), **flat)


async def _register_capabilities(store: PgStore, spec: ScheduleSpec) -> None:
    """The schedule's capability set known to the claim before a run requiring it exists."""
    if spec.required_capabilities:
        await store.executions.register_capability_sets([capability_set(spec.required_capabilities)])


def _jsonable(v: Any) -> Any:
    return asdict(v) if isinstance(v, RetryPolicy) else v


async def update_schedule(store: PgStore, schedule_id: uuid.UUID, changes: Mapping[str, Any], now: datetime,
                          tenant: str | None, actor: str = "api",
                          expected_version: int | None = None) -> Row:
    """Change the fields named in `changes` (ScheduleSpec field names; `retry.<field>` for one
    retry setting), bump the version, and recompute next_run_at (the first tick strictly after
    now) when a timing field changed. Records the changed fields in "schedule_updated"."""
    async with store.transaction() as conn:
        row = await lock_schedule(store, conn, schedule_id, tenant, expected_version)
        old = spec_of(row)
        new, cron = _apply(old, changes).validated()
        if new.target is not None and new.target != old.target:
            _check_target_rules(new, await store.schedules.lock_tenant(conn, row["tenant"]))
        await _register_capabilities(store, new)
        changed = sorted(k for k in ScheduleSpec.__dataclass_fields__ if getattr(old, k) != getattr(new, k))
        unfired = await store.schedules.unfire_ahead(conn, schedule_id, now)  # fired again, as edited
        next_run_at = unfired or row["next_run_at"]
        if any(k in changed for k in TIMING_FIELDS):
            next_run_at = None if row["paused"] or cron is None else cron.next_after(now)
        upd = await store.schedules.write(conn, _fields(new), next_run_at, now)  # AlreadyExists: name taken
        assert upd is not None
        await store.events.insert(Event(
            "schedule_updated", row["tenant"], schedule_id, None, row["partition"], actor, at=now,
            data={"fields": [API_NAMES.get(k, k) for k in changed], "version": upd["version"],
                  "changes": {API_NAMES.get(k, k): [_jsonable(getattr(old, k)), _jsonable(getattr(new, k))]
                              for k in changed if k not in ("payload", "target")}}), conn)
        await store.schedules.notify_changed(conn, row["partition"], schedule_id)
    return upd


async def set_paused(store: PgStore, schedule_id: uuid.UUID, paused: bool, now: datetime,
                     tenant: str | None, actor: str = "api", reason: str = "",
                     expected_version: int | None = None) -> Row:
    """Pause (next_run_at cleared) or resume (next_run_at = first tick after now). A schedule
    already in that state is returned unchanged: no version bump, no event."""
    reason = reason_text(reason)
    async with store.transaction() as conn:
        row = await lock_schedule(store, conn, schedule_id, tenant, expected_version)
        if row["paused"] == paused:
            return row
        child = row.get("parent_schedule_id") is not None  # no ticks: a pause only stops its runs
        cron = None if child else validate_cron(spec_of(row), schedule_id)
        if paused:
            await store.schedules.unfire_ahead(conn, schedule_id, now)  # a tick not due yet does not run
        new = await store.schedules.write(conn, _fields(replace(spec_of(row), paused=paused)),
                                          None if paused or cron is None else cron.next_after(now), now)
        assert new is not None
        await store.events.insert(Event("schedule_paused" if paused else "schedule_resumed", row["tenant"],
                                        schedule_id, None, row["partition"], actor, at=now,
                                        data={"reason": reason, "version": new["version"]}), conn)
        await store.schedules.notify_changed(conn, row["partition"], schedule_id)
    return new


async def delete_schedule(store: PgStore, schedule_id: uuid.UUID, now: datetime, tenant: str | None,
                          actor: str = "api", expected_version: int | None = None, cancel_pending: bool = False,
                          reason: str = "") -> tuple[Row, int]:
    """Soft-delete; with cancel_pending, cancel its unfinished executions (running ones get
    cancel_requested). Returns (the deleted row, executions cancelled)."""
    reason = reason_text(reason)
    async with store.transaction() as conn:
        row = await lock_schedule(store, conn, schedule_id, tenant, expected_version)
        await store.schedules.unfire_ahead(conn, schedule_id, now)  # a tick not due yet does not run
        deleted = await store.schedules.write(conn, _fields(spec_of(row)), None, now, deleted=True)
        assert deleted is not None
        cancelled = 0
        if cancel_pending:
            why = f"schedule deleted by {actor}" + (f": {reason}" if reason else "")
            cancelled = await store.executions.cancel_pending_of_schedule(conn, schedule_id, why, now)
        await store.events.insert(Event("schedule_deleted", row["tenant"], schedule_id, None, row["partition"],
                                        actor, at=now, data={"reason": reason, "cancelled": cancelled}), conn)
        await store.schedules.notify_changed(conn, row["partition"], schedule_id)
    return deleted, cancelled
