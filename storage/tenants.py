"""The tenants port (tenants.sql): a tenant's limits and quotas, as the tenant API sets them.

Every create and change appends an audit event in its transaction (`tenant_created`,
`tenant_updated` with the fields changed, old and new; the event's tenant is the tenant).

A tenant without a row acts with the column defaults (max_concurrency 1000, weight 1, no rate
limit, no quotas). `update` reads the row under a row lock, lets the caller check the merged
values, and writes them in the same transaction, so two concurrent updates of one tenant apply
one after the other and a check never sees a half-applied neighbour (burst needs rate_per_s).

Time is the caller's (`now`). Task-safe (stateless over the pool).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime

from cronwheel.errors import NotFound
from cronwheel.storage.api import Event, EventsPort, Row, row, rows
from cronwheel.storage.db import Database


@dataclass(frozen=True, slots=True)
class TenantFields:
    """Every settable column of a tenant, validated (None: no limit / no quota / default burst)."""

    id: str
    max_concurrency: int
    rate_per_s: float | None
    burst: float | None
    weight: int
    max_schedules: int | None
    max_executions_per_day: int | None
    egress_rules: tuple[str, ...] | None = None  # HTTP targets' allowed destinations (None: any public)


def fields_of(r: Row) -> TenantFields:
    return TenantFields(id=r["id"], max_concurrency=r["max_concurrency"], rate_per_s=r["rate_per_s"],
                        burst=r["burst"], weight=r["weight"], max_schedules=r["max_schedules"],
                        max_executions_per_day=r["max_executions_per_day"],
                        egress_rules=tuple(r["egress_rules"]) if r.get("egress_rules") else None)


def _params(f: TenantFields) -> dict[str, object]:
    out = asdict(f)
    out["egress_rules"] = list(f.egress_rules) if f.egress_rules is not None else None  # a text[]
    return out


class TenantsPort:
    """Task-safe (stateless over the pool)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, f: TenantFields, now: datetime, actor: str = "api") -> Row:
        """AlreadyExists (tenants_pkey, from map_error) when the tenant has a row. Appends a
        `tenant_created` event in the same transaction."""
        async with self.db.transaction() as conn:
            got = await row(conn, "tenant_insert", {**_params(f), "now": now})
            await EventsPort(self.db).insert(Event("tenant_created", f.id, actor=actor, at=now,
                                                   data={k: v for k, v in asdict(f).items() if k != "id"}), conn)
        assert got is not None
        return got

    async def get(self, tenant: str) -> Row | None:
        async with self.db.connection() as conn:
            return await row(conn, "tenant_get", {"id": tenant})

    async def update(self, tenant: str, change: Callable[[TenantFields], TenantFields], now: datetime,
                     actor: str = "api") -> Row:
        """Apply `change` (which validates, raising to store nothing) to the locked row, with a
        `tenant_updated` event (the fields changed, old and new). NotFound without a row."""
        async with self.db.transaction() as conn:
            current = await row(conn, "tenant_lock", {"id": tenant})
            if current is None:
                raise NotFound("tenant", tenant)
            old = fields_of(current)
            new = change(old)
            got = await row(conn, "tenant_write", _params(new))
            changed = {k: [v, getattr(new, k)] for k, v in asdict(old).items() if getattr(new, k) != v}
            if changed:
                await EventsPort(self.db).insert(Event("tenant_updated", tenant, actor=actor, at=now,
                                                       data={"changed": changed}), conn)
        assert got is not None
        return got

    async def list(self, after: str | None, limit: int) -> list[Row]:
        async with self.db.connection() as conn:
            return await rows(conn, "tenant_list", {"after": after, "limit": limit})

    async def set_queue(self, tenant: str, queue: str, max_concurrency: int | None, weight: int,
                        now: datetime, actor: str = "api") -> Row:
        """Set (insert or replace) a queue's limits for `tenant` (checked by the caller), with a
        `tenant_updated` event in the same transaction (data.changed: {"queues.<name>": [old,
        new]}). A tenant needs no row for it (its runs' claims read tenant_queues by name)."""
        async with self.db.transaction() as conn:
            got = await row(conn, "tenant_queue_set", {"tenant": tenant, "queue": queue,
                                                       "max_concurrency": max_concurrency, "weight": weight})
            assert got is not None
            new = {"max_concurrency": max_concurrency, "weight": weight}
            if got["old"] != new:
                await EventsPort(self.db).insert(Event("tenant_updated", tenant, actor=actor, at=now, data={
                    "changed": {f"queues.{queue}": [got["old"], new]}}), conn)
        assert got is not None
        return got

    async def queues(self, tenant: str) -> list[Row]:
        """The tenant's queues with limits set, by name."""
        async with self.db.connection() as conn:
            return await rows(conn, "tenant_queues", {"tenant": tenant})
