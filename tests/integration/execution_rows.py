"""Test setup for dispatch tests: write an execution row as a claim or a fire left it, read one back."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from cronwheel.storage import PgStore


async def insert_execution(store: PgStore, **columns: Any) -> uuid.UUID:
    """An execution with the given columns (tenant 't', type 'job', trigger 'submit' unless given)."""
    cols = {"id": uuid.uuid4(), "tenant": "t", "type": "job", "trigger": "submit", **columns}
    stmt = sql.SQL("INSERT INTO executions ({}) VALUES ({})").format(
        sql.SQL(", ").join(map(sql.Identifier, cols)), sql.SQL(", ").join(sql.Placeholder() * len(cols)))
    async with store.connection() as conn:
        await conn.execute(stmt, list(cols.values()))
    return uuid.UUID(str(cols["id"]))


async def execution_row(store: PgStore, ident: uuid.UUID) -> dict[str, Any]:
    async with store.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT * FROM executions WHERE id = %s", (ident,))
        r = await cur.fetchone()
    assert r is not None, ident
    return r
