"""Commands on schedules and one-off jobs: validation, then one transaction that writes the row,
an audit event and a change notification for the partition's owner.

The gRPC API, the CLI and the tests all go through these functions, so a rule is written once.
Validation errors name the field (`InvalidArgument(field, ...)`); nothing is stored when any
check fails. `now` is an argument: the caller reads the clock.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from cronwheel.cron import CronSchedule, validate_schedule_spec
from cronwheel.errors import AlreadyExists, InvalidArgument, NotFound, VersionConflict
from cronwheel.storage import PgStore
from cronwheel.storage.queries import q

MAX_NAME = 200
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_RUN_AT_AHEAD = timedelta(days=3653)
PRIORITIES = ("critical", "default", "bulk")


def partition_of(ident: uuid.UUID, partitions: int) -> int:
    """hash(id) % P with a stable hash (the same on every node and release)."""
    return int.from_bytes(hashlib.blake2b(ident.bytes, digest_size=8).digest(), "big") % partitions


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_s: float = 30.0
    multiplier: float = 4.0
    max_s: float = 6 * 3600.0
    max_attempts: int = 5

    def validate(self, prefix: str = "retry_policy") -> RetryPolicy:
        if not 0 <= self.initial_s <= 86400:
            raise InvalidArgument(f"{prefix}.initial_backoff", f"must be 0..86400 s, got {self.initial_s}")
        if not 1 <= self.multiplier <= 100:
            raise InvalidArgument(f"{prefix}.backoff_multiplier", f"must be 1..100, got {self.multiplier}")
        if not 0 <= self.max_s <= 7 * 86400:
            raise InvalidArgument(f"{prefix}.max_backoff", f"must be 0..604800 s, got {self.max_s}")
        if not 1 <= self.max_attempts <= 1000:
            raise InvalidArgument(f"{prefix}.max_attempts", f"must be 1..1000, got {self.max_attempts}")
        return self


def _text(fieldname: str, value: str, required: bool = True, limit: int = MAX_NAME) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(fieldname, "must be a string")
    v = value.strip()
    if required and not v:
        raise InvalidArgument(fieldname, "is required")
    if len(v) > limit:
        raise InvalidArgument(fieldname, f"must be at most {limit} characters, got {len(v)}")
    if any(ord(c) < 32 for c in v):
        raise InvalidArgument(fieldname, "must not contain control characters")
    return v


def _payload(fieldname: str, payload: Any) -> Any:
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(fieldname, f"must be JSON: {exc}") from None
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidArgument(fieldname, f"must be at most {MAX_PAYLOAD_BYTES} bytes, got {len(text.encode())}")
    if "\\u0000" in text:
        raise InvalidArgument(fieldname, "must not contain NUL characters")
    return payload


def _priority(value: str) -> str:
    if value not in PRIORITIES:
        raise InvalidArgument("priority", f"must be one of {', '.join(PRIORITIES)}, got {value!r}")
    return value


def _timeout(fieldname: str, value: float | None) -> float | None:
    if value is None:
        return None
    if not 0 < value <= 7 * 86400:
        raise InvalidArgument(fieldname, f"must be in (0, 604800] seconds, got {value}")
    return float(value)


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
    id: uuid.UUID | None = None

    def validated(self) -> tuple[ScheduleSpec, CronSchedule]:
        sid = self.id or uuid.uuid4()
        cron = _validate_cron(self, sid)
        spec = replace(
            self,
            id=sid,
            tenant=_text("tenant", self.tenant),
            name=_text("name", self.name),
            job_type=_text("job_type", self.job_type),
            payload=_payload("payload_json", self.payload),
            priority=_priority(self.priority),
            retry=self.retry.validate(),
            timeout_s=_timeout("timeout", self.timeout_s),
            alert_if_no_success_within_s=_timeout("alert_if_no_success_within", self.alert_if_no_success_within_s),
        )
        if self.overlap_policy not in ("forbid", "allow", "replace", "buffer_one", "buffer_all"):
            raise InvalidArgument("overlap_policy", f"unknown policy {self.overlap_policy!r}")
        return spec, cron


def _validate_cron(spec: ScheduleSpec, sid: uuid.UUID) -> CronSchedule:
    return validate_schedule_spec(
        spec.cron, spec.timezone, {"gap": spec.dst_gap, "repeated": spec.dst_repeated},
        spec.misfire_policy, spec.max_catch_up, spec.jitter_s, str(sid),
    )


async def create_schedule(store: PgStore, spec: ScheduleSpec, now: datetime, partitions: int,
                          actor: str = "api") -> dict[str, Any]:
    spec, cron = spec.validated()
    assert spec.id is not None
    p = partition_of(spec.id, partitions)
    params = {
        "id": spec.id, "tenant": spec.tenant, "name": spec.name, "cron": spec.cron.strip(),
        "timezone": spec.timezone, "dst_gap": spec.dst_gap, "dst_repeated": spec.dst_repeated,
        "job_type": spec.job_type, "payload": Jsonb(spec.payload), "priority": spec.priority,
        "retry_initial_s": spec.retry.initial_s, "retry_multiplier": spec.retry.multiplier,
        "retry_max_s": spec.retry.max_s, "max_attempts": spec.retry.max_attempts,
        "timeout_s": spec.timeout_s, "misfire_policy": str(spec.misfire_policy),
        "max_catch_up": spec.max_catch_up, "overlap_policy": spec.overlap_policy,
        "jitter_s": spec.jitter_s, "paused": spec.paused, "partition": p,
        "next_run_at": cron.next_after(now), "alert_if_no_success_within_s": spec.alert_if_no_success_within_s,
    }
    try:
        async with store.transaction() as conn:
            async with conn.cursor(row_factory=_dict_row()) as cur:
                await cur.execute(q("insert_schedule"), params)
                row = await cur.fetchone()
            assert row is not None
            await store.insert_event("schedule_created", tenant=spec.tenant, schedule_id=spec.id, partition=p,
                                     actor=actor, data={"cron": spec.cron, "timezone": spec.timezone}, conn=conn)
            await conn.execute(q("notify_due"), {"payload": f"{p}:s:{spec.id}"})
    except AlreadyExists as exc:
        what = "id" if "pkey" in str(exc.key) else "name"
        raise AlreadyExists("schedule", spec.name if what == "name" else spec.id,
                            f"schedule {what} already exists for tenant {spec.tenant}") from exc
    return dict(row)


async def set_paused(store: PgStore, schedule_id: uuid.UUID, paused: bool, now: datetime,
                     tenant: str | None, actor: str, reason: str = "",
                     expected_version: int | None = None) -> dict[str, Any]:
    row = await store.fetch_one("get_schedule", {"id": schedule_id})
    if row is None or (tenant is not None and row["tenant"] != tenant):
        raise NotFound("schedule", schedule_id)
    cron = _validate_cron(_spec_of(row), schedule_id)
    async with store.transaction() as conn:
        async with conn.cursor(row_factory=_dict_row()) as cur:
            await cur.execute(q("set_paused"), {
                "id": schedule_id, "paused": paused, "tenant": tenant, "expected_version": expected_version,
                "next_run_at": cron.next_after(now),
            })
            new = await cur.fetchone()
        if new is None:
            raise VersionConflict("schedule", schedule_id, expected_version or 0, row["version"])
        await store.insert_event("schedule_paused" if paused else "schedule_resumed", tenant=row["tenant"],
                                 schedule_id=schedule_id, partition=row["partition"], actor=actor,
                                 data={"reason": reason}, conn=conn)
        await conn.execute(q("notify_due"), {"payload": f"{row['partition']}:s:{schedule_id}"})
    return dict(new)


async def delete_schedule(store: PgStore, schedule_id: uuid.UUID, tenant: str | None, actor: str,
                          expected_version: int | None = None) -> dict[str, Any]:
    async with store.transaction() as conn:
        async with conn.cursor(row_factory=_dict_row()) as cur:
            await cur.execute(q("soft_delete_schedule"), {
                "id": schedule_id, "tenant": tenant, "expected_version": expected_version})
            row = await cur.fetchone()
        if row is None:
            raise NotFound("schedule", schedule_id)
        await store.insert_event("schedule_deleted", tenant=row["tenant"], schedule_id=schedule_id,
                                 partition=row["partition"], actor=actor, conn=conn)
        await conn.execute(q("notify_due"), {"payload": f"{row['partition']}:s:{schedule_id}"})
    return dict(row)


def _spec_of(row: dict[str, Any]) -> ScheduleSpec:
    return ScheduleSpec(tenant=row["tenant"], name=row["name"], cron=row["cron"], timezone=row["timezone"],
                        job_type=row["job_type"], misfire_policy=row["misfire_policy"],
                        max_catch_up=row["max_catch_up"], dst_gap=row["dst_gap"],
                        dst_repeated=row["dst_repeated"], jitter_s=row["jitter_s"], id=row["id"])


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


async def submit_job(store: PgStore, job: JobSpec, now: datetime, partitions: int,
                     actor: str = "api") -> tuple[dict[str, Any], bool]:
    """Returns (execution row, deduplicated). A repeated idempotency key returns the existing
    execution of that tenant and stores nothing."""
    tenant = _text("tenant", job.tenant)
    jtype = _text("type", job.type)
    payload = _payload("payload_json", job.payload)
    key = _text("idempotency_key", job.idempotency_key, required=False) if job.idempotency_key else None
    run_at = job.run_at or now
    if run_at.utcoffset() is None:
        raise InvalidArgument("run_at", "must carry a time zone")
    if run_at > now + MAX_RUN_AT_AHEAD:
        raise InvalidArgument("run_at", f"must be at most 10 years ahead, got {run_at.isoformat()}")
    retry = job.retry.validate()
    eid = uuid.uuid4()
    p = partition_of(eid, partitions)
    state = "queued" if run_at <= now else "scheduled"
    params = {
        "id": eid, "tenant": tenant, "type": jtype, "payload": Jsonb(payload), "partition": p,
        "scheduled_for": run_at, "run_at": run_at, "priority": _priority(job.priority), "state": state,
        "max_attempts": retry.max_attempts, "retry_initial_s": retry.initial_s,
        "retry_multiplier": retry.multiplier, "retry_max_s": retry.max_s,
        "timeout_s": _timeout("timeout", job.timeout_s), "idempotency_key": key,
    }
    async with store.transaction() as conn:
        async with conn.cursor(row_factory=_dict_row()) as cur:
            await cur.execute(q("insert_submitted"), params)
            row = await cur.fetchone()
            if row is None:
                await cur.execute(q("get_by_idempotency_key"), {"tenant": tenant, "idempotency_key": key})
                existing = await cur.fetchone()
                if existing is None:  # raced with a delete of the key holder: impossible today
                    raise AlreadyExists("execution", key)
                return dict(existing), True
        if state == "scheduled":
            await conn.execute(q("notify_due"), {"payload": f"{p}:o:{eid}"})
        else:
            await conn.execute(q("notify_queued"), {"payload": row["priority"]})
    return dict(row), False


def _dict_row() -> Any:
    from psycopg.rows import dict_row

    return dict_row
