"""The webhooks port (webhooks.sql): subscriptions, and the deliveries each event owes them.

The outbox (issue 48). An event is appended with `events.webhooks_pending` set (the column's
default, migration 0022), in whatever transaction appends it: the fire batch, a completion, an
API call. Nothing else of webhooks happens there, so a fan-out over many webhooks never
lengthens a transaction that holds the partition fence or an execution's row. The senders then
`fan_out` pending events, each in its own transaction that clears the flag and adds a pending
delivery per matching webhook. An event committed is a delivery owed: a node that dies between
the event and its fan-out leaves the flag set, and any sender (`SKIP LOCKED`, so two never take
the same event) fans it out. A webhook created between an event and its fan-out gets it too.

Claims. Any node's sender claims due deliveries (`claim`): `FOR UPDATE SKIP LOCKED`, so two
senders never wait on, nor take, the same row; owners (tenants, '' for the cluster's own
webhooks) take turns, each capped by what the sender already has in flight for it; the claim
moves `next_attempt_at` past a lease and adds one to `attempts`, which is the claim's token. A
sender that dies mid-delivery leaves the row due again when its lease lapses (another sender, or
the restarted one, sends it again: at-least-once). `record` applies an outcome only while the
row still carries the claim's token.

Secrets at rest (issue 48). `webhooks.secret` holds the signing secret sealed by the node's
`SecretStore` (cronwheel/secret_store.py; plaintext only on a cluster run without a key): sealed
by `create`, opened by `Claimed.secret` at the moment a request is signed, never returned by a
read of the API (`webhook_get`/`webhook_list` do not select it). `seal_at_rest` (every node start,
`cronwheel secrets rotate`) refuses a store that lacks a key in use, then re-seals under the first
key what it did not seal (storage/secrets.py `seal_rows`: each re-seal is a compare-and-set on the
value read, so nodes starting at once never seal a secret twice nor lose one).

Time is the caller's (`now`), as in every port. Task-safe (stateless over the pool).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronwheel.errors import ResourceExhausted
from cronwheel.secret_store import SecretStore
from cronwheel.storage.api import Row, row, rows
from cronwheel.storage.db import Database
from cronwheel.storage.queries import q
from cronwheel.storage.secrets import SealedColumn, SealReport, seal_rows

DELIVERY_STATES = ("pending", "delivered", "failed")  # the CHECK of webhook_deliveries.state


@dataclass(frozen=True, slots=True)
class NewWebhook:
    id: uuid.UUID
    tenant: str | None
    url: str
    secret: str
    kinds: tuple[str, ...]
    schedule_id: uuid.UUID | None
    description: str
    actor: str
    now: datetime
    cap: int  # at most this many webhooks per owner (the tenant, or the cluster's own): ResourceExhausted



@dataclass(frozen=True, slots=True)
class DeliveryFilter:
    tenant: str | None
    webhook_id: uuid.UUID | None
    event_id: int | None
    state: str | None
    before: tuple[datetime, uuid.UUID] | None  # (created_at, id) of the last row of the previous page
    limit: int


def secret_place(webhook_id: uuid.UUID) -> str:
    """Where a webhook's secret is sealed for (a sealed value opens at its own row only)."""
    return f"webhooks.secret:{webhook_id}"


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery claimed for one attempt, with what its request needs. `event_*` are None when
    the event was pruned by retention (the delivery cannot be built any more). The secret is
    opened when the request is signed (`secret`: SecretUnavailable when this node lacks its key)."""

    id: uuid.UUID
    attempt: int
    webhook_id: uuid.UUID
    owner: str  # the webhook's tenant, '' for the cluster's own: the unit of fairness
    url: str
    stored_secret: str = field(repr=False)
    event: Row | None  # id, at, tenant, kind, schedule_id, schedule_name, execution_id, partition, actor, alert, data
    secrets: SecretStore = field(default_factory=SecretStore, repr=False)

    @property
    def secret(self) -> str:
        return self.secrets.open(self.stored_secret, secret_place(self.webhook_id))


WEBHOOK_SECRETS = SealedColumn(
    what="webhook secret", key_ids="webhook_secret_key_ids", to_reseal="webhook_secrets_to_reseal",
    reseal="webhook_secret_reseal", place=lambda r: secret_place(r["id"]), ident=lambda r: {"id": r["id"]})


@dataclass(frozen=True, slots=True)
class Outcome:
    """The write that ends one claimed attempt (`next_attempt_at` only for state `pending`)."""

    id: uuid.UUID
    attempt: int
    state: str  # one of DELIVERY_STATES
    next_attempt_at: datetime | None
    status: int | None
    error: str | None
    now: datetime


_EVENT_COLUMNS = ("event_id", "at", "tenant", "kind", "schedule_id", "schedule_name", "execution_id", "partition",
                  "actor", "alert", "data")


class WebhooksPort:
    """Task-safe (stateless over the pool)."""

    def __init__(self, db: Database, secrets: SecretStore | None = None) -> None:
        self.db = db
        self.secrets = secrets or SecretStore()

    async def create(self, w: NewWebhook) -> Row:
        sealed = self.secrets.seal(w.secret, secret_place(w.id))
        async with self.db.transaction() as conn:
            await conn.execute(q("webhook_lock_owner"), {"tenant": w.tenant})
            got = await row(conn, "webhook_insert", {
                "id": w.id, "tenant": w.tenant, "url": w.url, "secret": sealed, "kinds": list(w.kinds),
                "schedule_id": w.schedule_id, "description": w.description, "actor": w.actor, "now": w.now,
                "cap": w.cap})
        if got is None:
            owner = f"tenant {w.tenant}" if w.tenant is not None else "the cluster (no tenant)"
            raise ResourceExhausted(f"{owner} already has {w.cap} webhooks, the most allowed; delete one first")
        return got

    async def get(self, webhook_id: uuid.UUID) -> Row | None:
        async with self.db.connection() as conn:
            return await row(conn, "webhook_get", {"id": webhook_id})

    async def list(self, tenant: str | None, after: uuid.UUID | None, limit: int) -> list[Row]:
        async with self.db.connection() as conn:
            return await rows(conn, "webhook_list", {"tenant": tenant, "after": after, "limit": limit})

    async def delete(self, webhook_id: uuid.UUID) -> int | None:
        """Delete it with its deliveries; the number of pending ones dropped, None if absent."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(q("webhook_delete"), {"id": webhook_id})
            got = await cur.fetchone()
        return int(got[0]) if got else None

    async def deliveries(self, f: DeliveryFilter) -> list[Row]:
        before_at, before_id = f.before if f.before else (None, None)
        async with self.db.connection() as conn:
            return await rows(conn, "delivery_list", {
                "tenant": f.tenant, "webhook_id": f.webhook_id, "event_id": f.event_id, "state": f.state,
                "before_at": before_at, "before_id": before_id, "limit": f.limit})

    async def fan_out(self, limit: int) -> tuple[int, int]:
        """Fan out up to `limit` pending events to their deliveries: (events, deliveries)."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(q("fan_out_events"), {"limit": limit})
            got = await cur.fetchone()
        return (int(got[0]), int(got[1])) if got else (0, 0)

    async def claim(self, node: str, now: datetime, lease_s: float, limit: int, per_owner: int = 1_000_000,
                    busy: Mapping[str, int] | None = None, scan: int = 5000) -> list[Claimed]:
        """Claim up to `limit` due deliveries, owners taking turns, none past `per_owner` counting
        `busy` (what this sender has in flight per owner), among the oldest `scan` due rows."""
        busy = dict(busy or {})
        async with self.db.transaction() as conn:
            got = await rows(conn, "claim_deliveries", {
                "node": node, "now": now, "lease_s": lease_s, "limit": limit, "per_owner": per_owner, "scan": scan,
                "busy_owners": list(busy), "busy_counts": list(busy.values())})
        return [_claimed(r, self.secrets) for r in got]

    async def seal_at_rest(self, batch: int = 500) -> SealReport:
        """Refuse a store that lacks a key a webhook secret needs, then re-seal under its first
        key what it did not seal (storage/secrets.py `seal_rows`, the one rule)."""
        return await seal_rows(self.db, self.secrets, WEBHOOK_SECRETS, batch)

    async def record(self, o: Outcome) -> bool:
        """Apply the outcome of one attempt; False when the claim was superseded (the lease
        lapsed and another sender claimed the row) or the row is gone."""
        async with self.db.connection() as conn:
            cur = await conn.execute(q("delivery_outcome"), {
                "id": o.id, "attempts": o.attempt, "state": o.state, "next_attempt_at": o.next_attempt_at,
                "status": o.status, "error": o.error, "now": o.now})
            return cur.rowcount == 1

    async def prune(self, days: int, now: datetime, limit: int = 1000) -> int:
        """Drop up to `limit` finished deliveries older than `days` (a bounded batch)."""
        async with self.db.connection() as conn:
            cur = await conn.execute(q("delivery_prune"), {"days": days, "now": now, "limit": limit})
            return cur.rowcount


def _claimed(r: Row, secrets: SecretStore) -> Claimed:
    event: dict[str, Any] | None = None
    if r["event_id"] is not None:
        event = {k: r[k] for k in _EVENT_COLUMNS}
    return Claimed(id=r["id"], attempt=int(r["attempts"]), webhook_id=r["webhook_id"], owner=r["owner"],
                   url=r["url"], stored_secret=r["secret"], event=event, secrets=secrets)
