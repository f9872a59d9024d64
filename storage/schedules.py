"""The API's queries on schedules (api.sql, schedules.sql): one typed method per query.

Rows are decoded by `storage.api.rows` (dicts, JSON as text) and carry the schedule's due
index fields (`next_run_at`, `last_scheduled_for`). Writes take `now` from the caller. The
firing path's queries on schedules live in `storage/firing.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwheel.storage.api import Conn, Row, json_text, notify_due, row, rows
from cronwheel.storage.db import Database
from cronwheel.storage.queries import q


@dataclass(frozen=True, slots=True)
class ScheduleFields:
    """Every settable column of a schedule, already validated (payload: JSON text)."""

    id: uuid.UUID
    tenant: str
    name: str
    cron: str
    timezone: str
    dst_gap: str | None
    dst_repeated: str | None
    job_type: str
    payload: str
    priority: str
    retry_initial_s: float
    retry_multiplier: float
    retry_max_s: float
    max_attempts: int
    timeout_s: float | None
    misfire_policy: str
    max_catch_up: int
    overlap_policy: str
    jitter_s: float
    paused: bool
    alert_if_no_success_within_s: float | None
    keep_last: int | None = None  # retention (cluster/retention): None inherits
    keep_succeeded_for_s: float | None = None
    keep_failed_for_s: float | None = None
    target: str | None = None  # an HTTP target's JSON (issue 50); None: a job type's schedule
    queue: str = "default"  # its runs' queue and required capabilities (canonical), 0025
    required_capabilities: str = ""

    def params(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["payload"] = json_text(self.payload)
        out["target"] = None if self.target is None else json_text(self.target)
        return out


@dataclass(frozen=True, slots=True)
class TenantQuota:
    max_schedules: int | None
    max_executions_per_day: int | None
    egress_rules: tuple[str, ...] | None = None  # HTTP targets' destinations (None: any public address)


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    tenant: str | None
    job_type: str | None
    paused: bool | None
    after_created_at: datetime | None
    after_id: uuid.UUID | None
    limit: int
    name_contains: str | None = None  # case-insensitive substring of the name
    by_name: bool = False  # order by (name, id); the cursor is then (after_name, after_id)
    after_name: str | None = None


class SchedulesPort:
    """Schedules as the API reads and writes them. Task-safe (stateless over the pool)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, schedule_id: uuid.UUID) -> Row | None:
        """A live schedule of any tenant (the caller checks the tenant)."""
        async with self.db.connection() as conn:
            return await row(conn, "api_get_schedule", {"id": schedule_id})

    async def lock(self, conn: Conn, schedule_id: uuid.UUID) -> Row | None:
        """A live schedule, row-locked until the end of the transaction."""
        return await row(conn, "api_lock_schedule", {"id": schedule_id})

    async def set_parent(self, conn: Conn, schedule_id: uuid.UUID, parent: uuid.UUID) -> None:
        """Make a new schedule a child of `parent` (in its creating transaction)."""
        await row(conn, "set_schedule_parent", {"id": schedule_id, "parent": parent})

    async def lock_tenant(self, conn: Conn, tenant: str) -> TenantQuota | None:
        """The tenant's quotas; when it has a schedule quota, also an advisory lock held to
        commit, so that its creations count one after another (`count_live` after this sees
        every creation that held the lock before). A tenant without one is not serialised."""
        r = await row(conn, "api_tenant_quotas", {"tenant": tenant})
        if r is None:
            return None
        if r["max_schedules"] is not None:
            await conn.execute(q("api_lock_schedule_quota"), {"tenant": tenant})
        return TenantQuota(r["max_schedules"], r["max_executions_per_day"],
                           tuple(r["egress_rules"]) if r.get("egress_rules") else None)

    async def count_live(self, conn: Conn, tenant: str) -> int:
        r = await row(conn, "count_live_schedules", {"tenant": tenant})
        return int(r["count"]) if r else 0

    async def insert(self, conn: Conn, fields: ScheduleFields, partition: int, next_run_at: datetime | None,
                     now: datetime) -> Row:
        """Create the schedule and its due row. AlreadyExists (from map_error) for a taken id or
        live name."""
        r = await row(conn, "insert_schedule", {**fields.params(), "partition": partition,
                                                "next_run_at": next_run_at, "now": now})
        assert r is not None
        return r

    async def unfire_ahead(self, conn: Conn, schedule_id: uuid.UUID, now: datetime) -> datetime | None:
        """Inside the transaction that edits, pauses or deletes the schedule (after its lock): take
        back its ticks queued ahead and not due at `now` (`api_unfire_ahead`); the earliest of
        them, where the schedule's cursor goes back to if it keeps ticking, or None."""
        r = await row(conn, "api_unfire_ahead", {"id": schedule_id, "now": now})
        return None if r is None else r["tick"]

    async def write(self, conn: Conn, fields: ScheduleFields, next_run_at: datetime | None, now: datetime,
                    deleted: bool = False) -> Row | None:
        """Write every settable field and the paused flag (soft-delete when `deleted`), bump the
        version, set the next tick. None if the schedule is gone; AlreadyExists (map_error) for a
        live name taken."""
        return await row(conn, "api_write_schedule", {**fields.params(), "next_run_at": next_run_at, "now": now,
                                                      "deleted": deleted})

    async def list(self, f: ScheduleFilter) -> list[Row]:
        """A page of live schedules by (created_at, id), or by (name, id), after the cursor."""
        like = None
        if f.name_contains:
            escaped = f.name_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
        async with self.db.connection() as conn:
            return await rows(conn, "api_list_schedules_by_name" if f.by_name else "api_list_schedules", {
                "tenant": f.tenant, "job_type": f.job_type, "paused": f.paused, "name_like": like,
                "after_created_at": f.after_created_at, "after_name": f.after_name, "after_id": f.after_id,
                "limit": f.limit})

    async def notify_changed(self, conn: Conn, partition: int, schedule_id: uuid.UUID) -> None:
        """At commit, the partition's owner reloads the schedule."""
        await notify_due(conn, partition, "s", schedule_id)
