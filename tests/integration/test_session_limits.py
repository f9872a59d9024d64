"""A node stopped in the middle of a transaction holds its locks no longer than its session limits.

The fault (chaos seed 4, stop 41): a node's completion batch is a pipelined transaction of two
round trips. Its first statements reached PostgreSQL and locked two executions; then the node was
cut off (partition-node) before the Sync. The backend stayed "active" waiting to read, so
`idle_in_transaction_session_timeout` never applied, and the rows stayed locked for the seven
seconds the cut lasted: another node's fire of an overlap-`replace` schedule waited on one of them
and fired 2.02 s late. `transaction_timeout` (PostgreSQL >= 17) ends such a transaction.
Fails without the fix: the stalled transaction keeps the row until the other writer's lock_timeout.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.cluster.node import session_limits
from cronwheel.errors import Unavailable
from cronwheel.storage.db import TRANSACTION_TIMEOUT_SINCE, Database, SessionLimits, StoreConfig


def test_a_node_limits_its_transactions_to_its_lease() -> None:
    assert session_limits(PartitionLeaseConfig.for_ttl(3)) == SessionLimits(idle_s=2.0, total_s=3.0)
    assert session_limits(PartitionLeaseConfig()).total_s == PartitionLeaseConfig().ttl_s
    with pytest.raises(ValueError, match="total_s"):
        StoreConfig(dsn="x", limits=SessionLimits(idle_s=2.0, total_s=1.0)).validate()


async def _version(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return conn.info.server_version


async def test_a_pipeline_stalled_before_its_sync_releases_its_locks(dsn: str) -> None:
    if await _version(dsn) < TRANSACTION_TIMEOUT_SINCE:
        pytest.skip("transaction_timeout needs PostgreSQL 17 (the tests' server is 18)")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
        await other.execute("CREATE TABLE locked_row (id int PRIMARY KEY, v int NOT NULL)")
        await other.execute("INSERT INTO locked_row VALUES (1, 0), (2, 0)")
        db = Database(StoreConfig(dsn=dsn, min_connections=1, max_connections=1,
                                  limits=SessionLimits(idle_s=1.0, total_s=1.0)))
        await db.open()
        stopped = asyncio.Event()  # the node "stopped" between its two round trips: never set
        try:
            t0 = time.monotonic()
            with pytest.raises(Unavailable):
                async with db.connection() as conn, db.pipelined_transaction(conn):
                    await conn.execute("UPDATE locked_row SET v = 1 WHERE id = 2")
                    cur = await conn.execute("SELECT v FROM locked_row WHERE id = 1 FOR UPDATE")
                    assert await cur.fetchone() == (0,)  # first round trip: the row is locked now
                    writer = asyncio.create_task(other.execute(
                        "SET lock_timeout = '8s'; UPDATE locked_row SET v = 7 WHERE id = 1"))
                    await asyncio.wait({writer}, timeout=5.0)
                    assert writer.done() and writer.exception() is None, "the stalled transaction kept its lock"
                    waited = time.monotonic() - t0
                    assert waited < 3.0, f"the lock was held {waited:.2f}s past a 1 s limit"
                    assert not stopped.is_set()
                    await conn.execute("SELECT 1")  # the node wakes and sends the rest: refused
        finally:
            await db.close()
        rows = await (await other.execute("SELECT id, v FROM locked_row ORDER BY id")).fetchall()
        assert rows == [(1, 7), (2, 0)]  # the stalled transaction wrote nothing


async def test_every_server_takes_the_limits_it_has(plan_dsn: str) -> None:
    """PostgreSQL 15 has no transaction_timeout: the pool still connects, with the idle limit."""
    db = Database(StoreConfig(dsn=plan_dsn, min_connections=1, max_connections=1,
                              limits=SessionLimits(idle_s=1.5, total_s=4.0)))
    await db.open()
    try:
        async with db.connection() as conn:
            idle = await (await conn.execute("SHOW idle_in_transaction_session_timeout")).fetchone()
            assert idle == ("1500ms",)
            if conn.info.server_version >= TRANSACTION_TIMEOUT_SINCE:
                assert await (await conn.execute("SHOW transaction_timeout")).fetchone() == ("4s",)
    finally:
        await db.close()
