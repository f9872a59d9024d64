"""The webhooks port (webhooks.sql): subscriptions, and the deliveries each event owes them.

Durability. `enqueue_deliveries(conn, event_id)` runs in the transaction that appended the event
(`EventsPort.insert` and the fire batch's partition events call it), so an event and the
deliveries it owes commit or vanish together: no event is recorded without its deliveries.

Claims. Any node's sender claims due deliveries (`claim`): `FOR UPDATE SKIP LOCKED`, so two
senders never wait on, nor take, the same row; the claim moves `next_attempt_at` past a lease
and adds one to `attempts`, which is the claim's token. A sender that dies mid-delivery leaves
the row due again when its lease lapses (another sender, or the restarted one, sends it again:
at-least-once). `record` applies an outcome only while the row still carries the claim's token.

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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronwheel.secret_store import SecretStore
from cronwheel.storage.api import Conn, Row, row, rows
from cronwheel.storage.db import Database
from cronwheel.storage.queries import q
from cronwheel.storage.secrets import SealedColumn, SealReport, seal_rows

DELIVERY_STATES = ("pending", "delivered", "failed")  # the CHECK of webhook_deliveries.state


async def enqueue_deliveries(conn: Conn, event_id: int) -> None:
    """Inside the transaction that appended event `event_id`: a pending delivery for every
    webhook subscribed to it."""
    await conn.execute(q("enqueue_deliveries"), {"event_id": event_id})


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
            got = await row(conn, "webhook_insert", {
                "id": w.id, "tenant": w.tenant, "url": w.url, "secret": sealed, "kinds": list(w.kinds),
                "schedule_id": w.schedule_id, "description": w.description, "actor": w.actor, "now": w.now})
        assert got is not None
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

    async def claim(self, node: str, now: datetime, lease_s: float, limit: int) -> list[Claimed]:
        async with self.db.transaction() as conn:
            got = await rows(conn, "claim_deliveries", {"node": node, "now": now, "lease_s": lease_s,
                                                        "limit": limit})
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
    return Claimed(id=r["id"], attempt=int(r["attempts"]), webhook_id=r["webhook_id"], url=r["url"],
                   stored_secret=r["secret"], event=event, secrets=secrets)
