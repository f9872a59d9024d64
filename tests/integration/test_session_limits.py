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

The sweep of nodes running as different database roles: it ended only the sessions its filter
said it was allowed to signal, the same role or `pg_signal_backend`, but PostgreSQL hides
another role's transaction start from a role without `pg_read_all_stats` (or that role's
privileges), so with `pg_signal_backend` alone another node's stall was never ended, and
nothing said so; a superuser's stalled session it could see made the statement fail. Now the
statement polices by PostgreSQL's own rules and counts the tagged sessions it cannot police
(gauge cronwheel_overrun_sessions_unpoliced, log `overrun_sweep_unpoliced`), with real roles below.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.cluster.metrics import Metrics
from cronwheel.cluster.node import session_limits, sweep_overruns
from cronwheel.errors import Unavailable
from cronwheel.storage.db import (
    TRANSACTION_TIMEOUT_SINCE,
    TX_LIMIT_PATTERN,
    Database,
    OverrunSweep,
    SessionLimits,
    StoreConfig,
    end_overrun_sessions,
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
                ended.extend(got.ended)
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


# Nodes as database roles of their own. Roles belong to the server, not to a test's database: each
# test names its own and drops them after.
_role_ids = itertools.count()
MakeRole = Callable[..., Awaitable[str]]


@pytest.fixture
async def make_role(plan_dsn: str) -> AsyncIterator[MakeRole]:
    """make_role(*granted, superuser=False, inherit=True): a new login role, a member of the roles
    `granted` (predefined ones such as pg_signal_backend, or another node's role); NOINHERIT when
    not `inherit` (a member without the privileges of its roles)."""
    made: list[str] = []
    async with await psycopg.AsyncConnection.connect(plan_dsn, autocommit=True) as admin:

        async def make(*granted: str, superuser: bool = False, inherit: bool = True) -> str:
            name = f"cw_node_role_{next(_role_ids)}"
            attrs = " ".join(["LOGIN", "SUPERUSER" if superuser else "", "" if inherit else "NOINHERIT"])
            await admin.execute(f"CREATE ROLE {name} {attrs}")
            made.append(name)
            for role in granted:
                await admin.execute(f"GRANT {role} TO {name}")
            return name

        yield make
        for name in reversed(made):
            await admin.execute(f"DROP ROLE {name}")


def _as(dsn: str, role: str) -> str:
    return make_conninfo(dsn, user=role)


async def _tagged_pids(dsn: str) -> set[int]:
    """The server processes of the sessions carrying a transaction limit, as a superuser sees them."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name ~ %s", (TX_LIMIT_PATTERN,))
        return {int(pid) for (pid,) in await cur.fetchall()}


async def _until_gone(dsn: str, pids: set[int] | None = None) -> None:
    """Wait for the server processes `pids` (None: every tagged session) to leave pg_stat_activity.
    A closed connection's process exits a moment after its client: the unpoliced count is
    server-wide, so a test counts from a server without another test's tagged sessions."""
    for _ in range(100):
        left = await _tagged_pids(dsn)
        if not (left if pids is None else left & pids):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"tagged sessions still there: {left}")


async def _stalled(dsn: str, role: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """A session of a node running as `role`, stopped inside a transaction past its 100 ms limit."""
    conn = await psycopg.AsyncConnection.connect(_as(dsn, role), application_name=tx_limit_name("node-b", 100))
    await conn.execute("SELECT 1")  # not autocommit: the transaction stays open
    await asyncio.sleep(0.3)
    return conn


def _node_db(dsn: str, role: str) -> Database:
    """A node's Database as `role`: its sessions carry a transaction limit, as the stalled one's."""
    limits = SessionLimits(idle_s=1.0, total_s=60.0)
    return Database(StoreConfig(dsn=_as(dsn, role), min_connections=1, max_connections=1, limits=limits))


async def _sweep_as(dsn: str, role: str) -> OverrunSweep:
    """One round of the sweep in a node session of `role`: a node's own Database where the nodes
    sweep (PostgreSQL < 17); on 17 and later, where the server ends the transactions itself, the
    same statement on a plain session, so that its rule is also checked against the role system of
    16 and later (memberships granted WITH INHERIT FALSE)."""
    if await _version(dsn) >= TRANSACTION_TIMEOUT_SINCE:
        async with await psycopg.AsyncConnection.connect(_as(dsn, role), autocommit=True) as conn:
            return await end_overrun_sessions(conn)
    db = _node_db(dsn, role)
    await db.open()
    try:
        sweep = await db.end_overrun_transactions()
    finally:
        await db.close()
    assert sweep is not None
    return sweep


async def _ended(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
    try:
        await conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False


@pytest.mark.parametrize(
    ("granted", "inherit", "policed"),
    [
        ((), True, False),
        # What the README asked for until now: it may signal the session, but is not shown when its
        # transaction began, so the sweep never ended it (and said nothing).
        (("pg_signal_backend",), True, False),
        (("pg_read_all_stats",), True, False),  # sees it, may not signal it
        (("pg_signal_backend", "pg_read_all_stats"), True, True),
        (("<node role>",), True, True),  # the node role's privileges: as a session of that role
        (("<node role>",), False, False),  # a member without them (NOINHERIT): neither
    ],
    ids=["nothing", "signal-only", "stats-only", "signal-and-stats", "member", "noinherit-member"],
)
async def test_another_roles_stall_is_ended_or_counted_as_postgresql_allows(
    plan_dsn: str, make_role: MakeRole, granted: tuple[str, ...], inherit: bool, policed: bool
) -> None:
    """Node b, an unprivileged role, stalls in a transaction past its limit; node a, another role
    holding `granted`, sweeps. Ended exactly when PostgreSQL lets a see the transaction's start and
    signal b; otherwise not ended, and counted."""
    await _until_gone(plan_dsn)
    node_b = await make_role()
    node_a = await make_role(*(node_b if g == "<node role>" else g for g in granted), inherit=inherit)
    stalled = await _stalled(plan_dsn, node_b)
    try:
        pid = stalled.info.backend_pid
        sweep = await _sweep_as(plan_dsn, node_a)
        if policed:
            assert sweep == OverrunSweep(ended=(pid,), unpoliced=0)
            assert await _ended(stalled)
        else:
            assert sweep == OverrunSweep(ended=(), unpoliced=1), "a stall the sweep cannot end, not counted"
            assert not await _ended(stalled)
    finally:
        await stalled.close()


async def test_a_superusers_stall_is_counted_not_a_failed_sweep(plan_dsn: str, make_role: MakeRole) -> None:
    """Only a superuser may end a superuser's session, whatever else a role holds: before, the
    statement tried and failed as a whole (no stall of anyone ended that round)."""
    await _until_gone(plan_dsn)
    node_b = await make_role(superuser=True)
    node_a = await make_role("pg_signal_backend", "pg_read_all_stats")
    stalled = await _stalled(plan_dsn, node_b)
    try:
        assert await _sweep_as(plan_dsn, node_a) == OverrunSweep(ended=(), unpoliced=1)
        assert not await _ended(stalled)
    finally:
        await stalled.close()


async def test_the_unpoliced_gauge_follows_the_sweep_and_is_logged_once_per_change(
    plan_dsn: str, make_role: MakeRole, caplog: pytest.LogCaptureFixture
) -> None:
    """A node's rounds (`sweep_overruns`, as Node._end_overrun_transactions runs them): the gauge is
    the count of each round; the warning comes when the count changes, not every second."""
    await _until_gone(plan_dsn)
    node_b = await make_role()
    node_a = await make_role()  # no privileges: polices its own sessions only
    db = _node_db(plan_dsn, node_a)
    metrics = Metrics()
    caplog.set_level(logging.WARNING, logger="cronwheel.cluster.node")
    reported = 0

    async def rounds(n: int) -> float | None:
        nonlocal reported
        for _ in range(n):
            sweep = await sweep_overruns(db, metrics, reported)
            assert sweep is not None
            reported = sweep.unpoliced
        return metrics.registry.get_sample_value("cronwheel_overrun_sessions_unpoliced")

    def warned() -> list[int]:
        return [r.__dict__["sessions"] for r in caplog.records if r.__dict__.get("event") == "overrun_sweep_unpoliced"]

    await db.open()
    stalled = []
    try:
        if await _version(plan_dsn) >= TRANSACTION_TIMEOUT_SINCE:
            assert await sweep_overruns(db, metrics) is None  # nothing to sweep there: the gauge stays 0
            assert metrics.registry.get_sample_value("cronwheel_overrun_sessions_unpoliced") == 0
            return
        assert await rounds(1) == 0  # its own sessions (tagged too) are its to end
        stalled = [await _stalled(plan_dsn, node_b) for _ in range(2)]
        pids = [conn.info.backend_pid for conn in stalled]
        assert await rounds(3) == 2
        assert warned() == [2]
        await stalled[1].close()
        await _until_gone(plan_dsn, {pids[1]})
        assert await rounds(2) == 1
        assert warned() == [2, 1]
        await stalled[0].close()
        await _until_gone(plan_dsn, {pids[0]})
        assert await rounds(2) == 0
        assert warned() == [2, 1]  # nothing more to say
        assert metrics.registry.get_sample_value("cronwheel_overrun_sessions_ended_total") == 0
    finally:
        for conn in stalled:
            await conn.close()
        await db.close()
