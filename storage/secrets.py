"""The secrets port (secrets.sql): named secrets, sealed at rest, and the one re-seal rule.

`SecretsPort` is the secret store's first provider (cronwheel/secret_store.py `SecretProvider`):
a tenant's secret by name (tenant None: the cluster's, stored as ''), sealed by the node's
`SecretStore` before it is written and opened only by `get`, for the code that uses it (HTTP
targets' headers). Nothing here lists values.

`seal_rows` is the one rule for every table that keeps sealed secrets (webhooks.secret, secrets.value):
refuse a store that lacks a key in use (SecretUnavailable, one line naming the key ids, never a
value), then re-seal under the first key, page by page, what it did not seal. Each row is
replaced only while it still holds the value read (compare-and-set), so processes running it at
once seal each row once: a page where every write lost to another process ends this one's pass
(the other is sealing those rows).

Task-safe (stateless over the pool).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwheel.errors import NotFound, SecretUnavailable
from cronwheel.secret_store import KEY_ENV, KEY_FILE_FLAG, SEALED_PREFIX, SecretStore
from cronwheel.storage.api import Row, row, rows
from cronwheel.storage.db import Database
from cronwheel.storage.queries import q


@dataclass(frozen=True, slots=True)
class SealReport:
    """What a pass of `seal_rows` found and did: the stored secrets by sealing key ('' :
    plaintext), before, and how many it re-sealed under the first key."""

    by_key: dict[str, int]
    resealed: int


@dataclass(frozen=True, slots=True)
class SealedColumn:
    """A column of sealed secrets: its three queries, what the values are called in a refusal,
    where a row's value is sealed for, and the parameters naming a row in the re-seal query."""

    what: str
    key_ids: str
    to_reseal: str
    reseal: str
    place: Callable[[Row], str]
    ident: Callable[[Row], dict[str, Any]]


async def seal_rows(db: Database, store: SecretStore, col: SealedColumn, batch: int = 500) -> SealReport:
    async with db.connection() as conn:
        by_key = {r["key_id"]: int(r["n"]) for r in await rows(conn, col.key_ids, {"prefix": SEALED_PREFIX})}
    missing = store.missing(k for k in by_key if k)
    if missing:
        n = sum(by_key[k] for k in missing)
        raise SecretUnavailable(
            f"secrets: {n} {col.what}(s) are encrypted with key {', '.join(missing)}, which this process does not "
            f"hold: give {KEY_FILE_FLAG} (or ${KEY_ENV}) holding it")
    if store.ring is None:
        return SealReport(by_key, 0)
    resealed, primary = 0, f"{SEALED_PREFIX}{store.ring.primary}:"
    while True:
        async with db.connection() as conn:
            page = await rows(conn, col.to_reseal, {"sealed_by_primary": primary, "limit": batch})
            won = 0
            for r in page:
                place = col.place(r)
                cur = await conn.execute(q(col.reseal), {
                    **col.ident(r), "read": r["secret"], "sealed": store.seal(store.open(r["secret"], place), place)})
                won += cur.rowcount
        resealed += won
        if len(page) < batch or won == 0:
            return SealReport(by_key, resealed)


def _tenant(tenant: str | None) -> str:
    return tenant or ""


def secret_place(tenant: str | None, name: str) -> str:
    """Where a named secret is sealed for (it opens under its own tenant and name only)."""
    return f"secrets:{_tenant(tenant)}/{name}"


NAMED = SealedColumn(
    what="named secret", key_ids="secret_key_ids", to_reseal="secrets_to_reseal", reseal="secret_reseal",
    place=lambda r: secret_place(r["tenant"], r["name"]), ident=lambda r: {"tenant": r["tenant"], "name": r["name"]})


class SecretsPort:
    """Named secrets in PostgreSQL: the `SecretProvider` of cronwheel/secret_store.py."""

    def __init__(self, db: Database, secrets: SecretStore | None = None) -> None:
        self.db = db
        self.secrets = secrets or SecretStore()

    async def put(self, tenant: str | None, name: str, value: str, now: datetime | None = None) -> None:
        sealed = self.secrets.seal(value, secret_place(tenant, name))
        async with self.db.connection() as conn:
            await conn.execute(q("secret_put"), {"tenant": _tenant(tenant), "name": name, "value": sealed, "now": now})

    async def get(self, tenant: str | None, name: str) -> str:
        async with self.db.connection() as conn:
            got = await row(conn, "secret_get", {"tenant": _tenant(tenant), "name": name})
        if got is None:
            raise NotFound("secret", name)
        return self.secrets.open(got["secret"], secret_place(tenant, name))

    async def delete(self, tenant: str | None, name: str) -> bool:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("secret_delete"), {"tenant": _tenant(tenant), "name": name})
        return cur.rowcount == 1

    async def seal_at_rest(self, batch: int = 500) -> SealReport:
        return await seal_rows(self.db, self.secrets, NAMED, batch)
