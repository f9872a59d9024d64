"""A node stopped in the middle of a transaction holds its locks no longer than its session limits.

The fault (chaos seed 4, stop 41): a node's completion batch is a pipelined transaction of two
round trips. Its first statements reached PostgreSQL and locked two executions; then the node was
cut off (partition-node) before the Sync. The backend stayed "active" waiting to read, so
`idle_in_transaction_session_timeout` never applied, and the rows stayed locked for the seven
seconds the cut lasted: another node's fire of an overlap-`replace` schedule waited on one of them
and fired 2.02 s late. `transaction_timeout` (PostgreSQL >= 17) ends such a transaction.
Fails without the fix: the stalled transaction keeps the row until the other writer's lock_timeout.

PostgreSQL 15 and 16 have no `transaction_timeout`: there the sessions carry their limit in their
application_name and every node ends the sessions past it (`Database.end_overrun_transactions`,
once a second). Fails without that sweep on PostgreSQL 15 the same way (stop 43).
"""

from __future__ import annotations

import asyncio
import re
import time

import psycopg
import pytest

from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.cluster.metrics import Metrics
from cronwheel.cluster.node import session_limits, sweep_overruns
from cronwheel.errors import Unavailable
from cronwheel.storage.db import (
    TRANSACTION_TIMEOUT_SINCE,
    TX_LIMIT_PATTERN,
    Database,
    SessionLimits,
    StoreConfig,
    tx_limit_name,
)


def test_a_node_limits_its_transactions_to_its_lease() -> None:
    assert session_limits(PartitionLeaseConfig.for_ttl(3)) == SessionLimits(idle_s=2.0, total_s=3.0)
    assert session_limits(PartitionLeaseConfig()).total_s == PartitionLeaseConfig().ttl_s
    with pytest.raises(ValueError, match="total_s"):
        StoreConfig(dsn="x", limits=SessionLimits(idle_s=2.0, total_s=1.0)).validate()


async def _version(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return conn.info.server_version


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


def test_the_limit_tag_survives_any_application_name() -> None:
    for own in ("", "billing-scheduler", "x" * 200, "é" * 40):
        name = tx_limit_name(own, 5000)
        assert len(name.encode()) <= 63, name
        match = re.search(TX_LIMIT_PATTERN, name)
        assert match and match.group(1) == "5000", name
    assert tx_limit_name("billing", 3000) == "billing [cronwheel tx limit 3000ms]"


async def test_a_pipeline_stalled_before_its_sync_releases_its_locks(plan_dsn: str) -> None:
    """The guarantee above on every server version: PostgreSQL >= 17 by `transaction_timeout`, 15
    and 16 by another node's sweep (here a second Database, as a second node would be). The node
    "stops" between its two round trips: the test never sends the rest until the lock is gone."""
    limits = SessionLimits(idle_s=1.0, total_s=1.0)
    version = await _version(plan_dsn)
    async with await psycopg.AsyncConnection.connect(plan_dsn, autocommit=True) as other:
        await other.execute("CREATE TABLE locked_row (id int PRIMARY KEY, v int NOT NULL)")
        await other.execute("INSERT INTO locked_row VALUES (1, 0), (2, 0)")
        stalled = Database(StoreConfig(dsn=plan_dsn, min_connections=1, max_connections=1, limits=limits))
        peer = Database(StoreConfig(dsn=plan_dsn, min_connections=1, max_connections=1, limits=limits))
        await stalled.open()
        await peer.open()
        ended: list[int] = []
        metrics = Metrics()

        async def sweep() -> None:  # the peer node's loop (cluster/node.py), quicker
            while True:
                got = await sweep_overruns(peer, metrics)
                if got is None:
                    return
                ended.extend(got)
                await asyncio.sleep(0.2)

        sweeper = asyncio.create_task(sweep())
        try:
            t0 = time.monotonic()
            with pytest.raises(Unavailable):
                async with stalled.connection() as conn, stalled.pipelined_transaction(conn):
                    pid = conn.info.backend_pid
                    await conn.execute("UPDATE locked_row SET v = 1 WHERE id = 2")
                    cur = await conn.execute("SELECT v FROM locked_row WHERE id = 1 FOR UPDATE")
                    assert await cur.fetchone() == (0,)  # first round trip: the row is locked now
                    writer = asyncio.create_task(other.execute(
                        "SET lock_timeout = '8s'; UPDATE locked_row SET v = 7 WHERE id = 1"))
                    await asyncio.wait({writer}, timeout=5.0)
                    assert writer.done() and writer.exception() is None, "the stalled transaction kept its lock"
                    waited = time.monotonic() - t0
                    assert waited < 3.0, f"the lock was held {waited:.2f}s past a 1 s limit"
                    await conn.execute("SELECT 1")  # the node wakes and sends the rest: refused
        finally:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
            await peer.close()
            await stalled.close()
        rows = await (await other.execute("SELECT id, v FROM locked_row ORDER BY id")).fetchall()
        assert rows == [(1, 7), (2, 0)]  # the stalled transaction wrote nothing
        if version >= TRANSACTION_TIMEOUT_SINCE:
            assert sweeper.done() and not ended  # nothing to sweep: the server ended it
        else:
            assert ended == [pid], "the peer's sweep ended the stalled session, and only it"
        assert metrics.registry.get_sample_value("cronwheel_overrun_sessions_ended_total") == len(ended)
