"""The tokens port (tokens.sql): bearer tokens made through the API, stored as the hex SHA-256
of their secret (the secret itself is never stored nor logged).

`live()` is what every node's token cache (cluster/api/tokens.py) re-reads: the tokens not
revoked, with their hashes; whether one has expired is decided per call against the caller's
clock, so expiry is exact and needs no refresh.

Audit: `token_created` and `token_revoked` events (no tenant on the event, so tenant tokens do
not list them; the token's tenant is in `data`), in the same transaction.

Time is the caller's (`now`). Task-safe (stateless over the pool).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from cronwheel.storage.api import Event, EventsPort, Row, row, rows
from cronwheel.storage.db import Database


@dataclass(frozen=True, slots=True)
class NewToken:
    id: uuid.UUID
    name: str
    tenant: str | None
    admin: bool
    sha256: str
    expires_at: datetime | None
    actor: str
    now: datetime


class TokensPort:
    """Task-safe (stateless over the pool)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, t: NewToken) -> Row:
        async with self.db.transaction() as conn:
            got = await row(conn, "token_insert", {
                "id": t.id, "name": t.name, "tenant": t.tenant, "admin": t.admin, "sha256": t.sha256,
                "expires_at": t.expires_at, "actor": t.actor, "now": t.now})
            await EventsPort(self.db).insert(Event("token_created", None, actor=t.actor, at=t.now, data={
                "token_id": str(t.id), "name": t.name, "tenant": t.tenant, "admin": t.admin,
                "expires_at": t.expires_at.isoformat() if t.expires_at else None}), conn)
        assert got is not None
        return got

    async def list(self, tenant: str | None, include_revoked: bool, after: uuid.UUID | None, limit: int) -> list[Row]:
        async with self.db.connection() as conn:
            return await rows(conn, "token_list", {"tenant": tenant, "include_revoked": include_revoked,
                                                   "after": after, "limit": limit})

    async def revoke(self, token_id: uuid.UUID, now: datetime, actor: str = "api") -> Row | None:
        """The token with its revoked_at (kept from the first revocation); None if absent. The
        first revocation appends a `token_revoked` event."""
        async with self.db.transaction() as conn:
            got = await row(conn, "token_revoke", {"id": token_id, "now": now})
            if got is not None and got["revoked_at"] == now:
                await EventsPort(self.db).insert(Event("token_revoked", None, actor=actor, at=now, data={
                    "token_id": str(token_id), "name": got["name"], "tenant": got["tenant"]}), conn)
        return got

    async def live(self) -> list[Row]:
        """Every token not revoked: sha256, name, tenant, admin, expires_at."""
        async with self.db.connection() as conn:
            return await rows(conn, "token_live", {})
