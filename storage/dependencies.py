"""DependenciesPort: job B after job A (storage/sql/queries/dependencies.sql, migration 0024).

The release is not here: it is the trigger `executions_release_dependents`, which resolves an
upstream's edges in the very transaction that finishes it (whichever path finishes it: a
worker's Complete or Fail, the reaper, a cancel). This port holds what a dependent's submit
writes in its own transaction, and the reads that show what a job waits for.

Concurrency: task-safe (it holds only the Database); the writes run in the caller's transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from cronwheel.storage.api import rows
from cronwheel.storage.db import Database
from cronwheel.storage.queries import q

Conn = AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class LockedUpstream:
    id: uuid.UUID
    idempotency_key: str | None
    state: str


@dataclass(frozen=True, slots=True)
class DependentMark:
    """What `mark_jobs` writes on one row of a submit: a dependent's count and policy, and/or
    that it is an upstream of another job of the call."""

    id: uuid.UUID
    waiting_for: int | None
    policy: str | None
    upstream: bool


class DependenciesPort:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def lock_upstreams(self, conn: Conn, tenant: str, ids: Sequence[uuid.UUID],
                             keys: Sequence[str]) -> list[LockedUpstream]:
        got = await rows(conn, "deps_lock_upstreams", {"tenant": tenant, "ids": list(ids), "keys": list(keys)})
        return [LockedUpstream(r["id"], r["idempotency_key"], r["state"]) for r in got]

    async def upstream_heights(self, conn: Conn, ids: Sequence[uuid.UUID], limit: int) -> dict[uuid.UUID, int]:
        if not ids:
            return {}
        got = await rows(conn, "deps_upstream_heights", {"ids": list(ids), "limit": limit})
        return {r["root"]: int(r["height"]) for r in got}

    async def link(self, conn: Conn, edges: Sequence[tuple[uuid.UUID, uuid.UUID]],
                   marks: Sequence[DependentMark], finished_upstreams: Sequence[uuid.UUID], now: datetime) -> None:
        """Write a submit's edges and marks, then resolve the edges of upstreams that had already
        finished (as the trigger would have)."""
        if edges:
            await conn.execute(q("deps_insert_edges"),
                               {"edges": json.dumps([[str(a), str(b)] for a, b in edges])})
        if marks:
            await conn.execute(q("deps_mark_jobs"), {"jobs": json.dumps(
                [[str(m.id), m.waiting_for, m.policy, m.upstream] for m in marks])})
        if finished_upstreams:
            await conn.execute(q("deps_resolve_finished"), {"ids": list(finished_upstreams), "now": now})

    async def rows_of(self, conn: Conn, ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
        """The executions `ids` as they are now in the caller's transaction (a submit's dependents
        as linked: their count and policy, released or cancelled by upstreams already finished)."""
        return await rows(conn, "api_executions_by_ids", {"ids": list(ids)}) if ids else []

    async def upstreams_of(self, execution_id: uuid.UUID, conn: Conn | None = None) -> list[dict[str, Any]]:
        """Each upstream of an execution: upstream_id, state (None: pruned), type, idempotency_key,
        outcome (None: not finished yet), resolved_at."""
        if conn is not None:
            return await rows(conn, "deps_upstreams_of", {"id": execution_id})
        async with self.db.connection() as c:
            return await rows(c, "deps_upstreams_of", {"id": execution_id})

    async def dependents_of(self, execution_id: uuid.UUID) -> list[dict[str, Any]]:
        async with self.db.connection() as c:
            return await rows(c, "deps_dependents_of", {"id": execution_id})

