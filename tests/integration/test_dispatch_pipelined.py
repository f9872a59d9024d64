"""The claim and the completion batch run as pipelined transactions (`Database.pipelined_transaction`:
BEGIN travels with the first statement, COMMIT with the last): against a real PostgreSQL, a
claim whose COMMIT fails hands out no run, a completion batch whose COMMIT fails leaves its runs
running, and completing a cron run releases the run buffered behind it and wakes the
dispatchers (the release statement notifies by itself, so its result need not be read before
the COMMIT)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.errors import Internal
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.storage.dispatch import ClaimParams, claim_args
from cronwheel.storage.notifications import QUEUED_CHANNEL
from cronwheel.storage.queries import q
from tests.integration.execution_rows import execution_row, insert_execution
from tests.integration.wire import WireCounter

pytestmark = pytest.mark.integration


@pytest.fixture
def dsn(plan_dsn: str) -> str:
    """Every test here runs on the tests' PostgreSQL and on PostgreSQL 15 (conftest.plan_dsn): most
    of them are about plans, and planners differ by version."""
    return plan_dsn


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# A COMMIT refused by the server reaches the caller as the server's error (Internal, as any
# other server error), or, where psycopg 3.3 lost it, as Internal saying so
# (storage.errors.commit_error); never as psycopg's IndexError or "cannot exit pipeline mode".
COMMIT_FAILED = Internal
REFUSED = ("refused at commit", "the driver lost its error")


async def fail_commit_when(store: PgStore, condition: str) -> None:
    """A deferred constraint trigger: the COMMIT of a transaction that updated an execution to
    satisfy `condition` (on NEW) fails, after every statement of it succeeded."""
    async with store.connection() as conn:
        await conn.execute("CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                           "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$")
        await conn.execute("CREATE CONSTRAINT TRIGGER test_refuse AFTER UPDATE ON executions "
                           f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({condition}) "
                           "EXECUTE FUNCTION test_refuse()")


async def test_a_claim_whose_commit_fails_hands_out_no_run(store: PgStore) -> None:
    ident = await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
    await fail_commit_when(store, "NEW.lease_owner = 'doomed'")
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    with pytest.raises(COMMIT_FAILED, match="|".join(REFUSED)):
        await d.lease("doomed", ["job"], 10, 30.0, 0.0)
    row = await execution_row(store, ident)
    assert (row["state"], row["attempt"], row["lease_owner"]) == ("queued", 0, None)
    [got] = await d.lease("w2", ["job"], 10, 30.0, 0.0)
    assert (got.id, got.attempt) == (str(ident), 1)


async def test_a_completion_batch_whose_commit_fails_leaves_its_runs_running(store: PgStore) -> None:
    a = await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
    b = await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    leased = await d.lease("w1", ["job"], 10, 30.0, 0.0)
    assert {r.id for r in leased} == {str(a), str(b)}
    await fail_commit_when(store, f"NEW.state = 'succeeded' AND NEW.id = '{b}'")
    with pytest.raises(COMMIT_FAILED, match="|".join(REFUSED)):
        await d.complete_many("w1", [(uuid.UUID(r.id), r.fencing_token, "{}") for r in leased])
    assert {(await execution_row(store, i))["state"] for i in (a, b)} == {"running"}


async def test_every_refused_commit_reaches_the_caller_as_the_refusal(store: PgStore) -> None:
    """The CI flake of stop 30: psycopg 3.3 keeps one result slot for a pipeline's Sync and
    mis-reads the two results a COMMIT error brings. Of 300 refused completion batches, about one
    in six raised IndexError (no cronwheel error: the completion would have answered an
    unmapped exception) and the rest Unavailable "cannot exit pipeline mode while busy", which
    hid the server's error. Fails without the fix (storage.db.pipelined_transaction) in nearly
    every run: the first wrong error ends it. Each refused transaction's runs stay as they were,
    and the next call on the store works (a connection left busy is closed, not reused)."""
    await fail_commit_when(store, "NEW.state = 'succeeded' OR NEW.lease_owner = 'doomed'")
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    seen: set[str] = set()
    for _ in range(40):
        ident = await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
        with pytest.raises(COMMIT_FAILED, match="|".join(REFUSED)) as refused:
            await d.lease("doomed", ["job"], 10, 30.0, 0.0)
        seen.add(str(refused.value))
        [run] = await d.lease("w1", ["job"], 10, 30.0, 0.0)
        with pytest.raises(COMMIT_FAILED, match="|".join(REFUSED)) as refused:
            await d.complete_many("w1", [(ident, run.fencing_token, "{}")])
        seen.add(str(refused.value))
        row = await execution_row(store, ident)
        assert (row["state"], row["attempt"], row["lease_owner"]) == ("running", 1, "w1")
        async with store.connection() as conn:
            await conn.execute("DELETE FROM executions")
    assert any(REFUSED[0] in m for m in seen), seen  # the server's own words reach the caller


@pytest.mark.parametrize("batch", [True, False], ids=["CompleteExecutions", "CompleteExecution"])
async def test_completing_a_cron_run_releases_its_buffered_run_and_wakes_dispatchers(store: PgStore, dsn: str,
                                                                                    batch: bool) -> None:
    """Both completion paths release the buffered run and wake the dispatchers: the wake is in the
    release statement itself (release_buffered and release_buffered_many), not left to callers."""
    sid = uuid.uuid4()
    ahead = await insert_execution(store, partition=1, schedule_id=sid, scheduled_for=T0, run_at=T0,
                                   state="queued", trigger="cron")
    later = T0.replace(minute=1)
    buffered = await insert_execution(store, partition=1, schedule_id=sid, scheduled_for=later, run_at=later,
                                      state="scheduled", state_reason="buffered", trigger="cron")
    d = Dispatcher(store, FakeClock(start_ts=later.timestamp()))
    [run] = await d.lease("w1", ["job"], 10, 30.0, 0.0)
    assert run.id == str(ahead)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute(f"LISTEN {QUEUED_CHANNEL}")
        if batch:
            [out] = await d.complete_many("w1", [(ahead, run.fencing_token, "{}")])
        else:
            out = await d.complete(ahead, run.fencing_token, "w1", "{}")
        assert not isinstance(out, Exception) and out.state == "succeeded"
        note = await asyncio.wait_for(anext(aiter(listener.notifies())), timeout=10)
    assert (note.channel, note.payload) == (QUEUED_CHANNEL, "buffered")
    row = await execution_row(store, buffered)
    assert (row["state"], row["state_reason"]) == ("queued", None)
    [nxt] = await d.lease("w1", ["job"], 10, 30.0, 0.0)
    assert nxt.id == str(buffered)


def plan_nodes(n: dict[str, Any]) -> list[dict[str, Any]]:
    return [n] + [m for c in n.get("Plans", []) for m in plan_nodes(c)]


def below_executions_update(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan nodes under a statement's UPDATE of executions (EXPLAIN (FORMAT JSON)'s "Plan")."""
    [update] = [n for n in plan_nodes(plan) if n["Node Type"] == "ModifyTable" and n["Relation Name"] == "executions"]
    return plan_nodes(update)[1:]


async def executions_rows_read(conn: psycopg.AsyncConnection[Any], *counters: str) -> int:
    """Rows of executions read so far, the sum of the given pg_stat_user_tables counters (e.g.
    "seq_tup_read"), counting `conn`'s own reads: a backend reports its counts late unless told
    to now, on the connection that did the reading."""
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    total = " + ".join(f"coalesce({c}, 0)" for c in counters)
    cur = await conn.execute(f"SELECT {total} FROM pg_stat_user_tables WHERE relname = 'executions'")
    return int((await cur.fetchone())[0])  # type: ignore[index]


async def test_a_completion_batch_finds_its_runs_by_id_however_many_the_worker_holds(store: PgStore) -> None:
    """The completion batch finds its runs by id, with no join to the listed runs. Joined, and with
    no statistics (a new or truncated table), PostgreSQL read every running run of the worker
    through a partial running index and compared each with every listed run: in bench.e2e's W1
    (20,000 jobs at one instant, the Worker holding up to a few thousand) a batch of 250 spent 85
    of its 97 ms in that join, and completions were the largest share of PostgreSQL's time in the
    drain. Fails without the fix (the plan joins over a running index)."""
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger,"
            " lease_owner, lease_expires, fencing_token)"
            " SELECT cronwheel_uuid7(), 't', 'job', 1, %s, %s, 'running', 'submit', 'w1', %s, 1"
            " FROM generate_series(1, 3000)", (T0, T0, T0))
        cur = await conn.execute("SELECT id FROM executions ORDER BY id LIMIT 100")
        ids = [r[0] for r in await cur.fetchall()]
    params = {"worker": "w1", "tenant": None, "ids": ids, "tokens": [1] * len(ids),
              "results": [None] * len(ids), "now": T0}
    async with store.connection() as conn:
        cur = await conn.execute("EXPLAIN (FORMAT JSON) " + q("complete_batch"), params)
        plan = (await cur.fetchone())[0][0]["Plan"]  # type: ignore[index]
    below = below_executions_update(plan)
    assert not any("Join" in n["Node Type"] or n["Node Type"] == "Nested Loop" for n in below), below
    assert not any(n.get("Index Name", "").startswith("executions_running") for n in below), below
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    done = await d.complete_many("w1", [(i, 1, "{}") for i in ids])
    assert len(done) == 100 and {(await execution_row(store, i))["state"] for i in ids} == {"succeeded"}


async def test_a_completion_batch_planned_on_an_empty_table_reads_only_its_runs_once_it_fills(dsn: str) -> None:
    """The pool's connections keep PostgreSQL's `auto` plan mode: psycopg prepares the completion
    batch at its 6th run on a connection and PostgreSQL keeps a generic plan from the 11th, made
    for the table as it was then. On PostgreSQL 15 one made on a nearly empty table was a
    sequential scan, kept while thousands of runs were running and the table had no statistics
    (a new or truncated table, until autovacuum's ANALYZE): 27 ms for a batch of 250 beside
    20,000 running runs, 7.5 ms by id (stop 39; README Known gaps had it at 34.7 ms since stop
    30). The batch is now planned with sequential scans priced out. PostgreSQL 18 happens to
    choose the index here by itself; the warm-up runs with index reads made dear
    (random_page_cost 100) so the kept plan is a scan without the fix on both. Counted as rows
    read sequentially by one batch of 250 beside 5,000 running runs, on the one connection that
    kept the plan, autovacuum off for the table. Fails without the fix (5,032 rows read)."""
    store = PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=1))
    await store.open()
    try:
        d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))

        async def running(n: int) -> list[uuid.UUID]:
            async with store.connection() as conn:
                cur = await conn.execute(
                    "INSERT INTO executions (id, tenant, type, trigger, partition, scheduled_for, run_at, state,"
                    " lease_owner, fencing_token, attempt)"
                    " SELECT gen_random_uuid(), 't', 'job', 'submit', g %% 8, %s, %s, 'running', 'w1', 1, 1"
                    " FROM generate_series(1, %s) g RETURNING id", (T0, T0, n))
                return [r[0] for r in await cur.fetchall()]

        async def seq_read() -> int:
            async with store.connection() as conn:  # the pool's one connection: the batch's
                return await executions_rows_read(conn, "seq_tup_read")

        async with store.connection() as conn:
            await conn.execute("ALTER TABLE executions SET (autovacuum_enabled = false)")
            await conn.execute("SET random_page_cost = 100")
        for _ in range(16):
            ids = await running(2)
            assert len(await d.complete_many("w1", [(i, 1, "{}") for i in ids])) == 2
        async with store.connection() as conn:
            cur = await conn.execute("SELECT generic_plans FROM pg_prepared_statements"
                                     " WHERE statement LIKE '%Succeed every listed run%'")
            [(generic,)] = await cur.fetchall()
        assert generic > 0  # the plan made on the nearly empty table is the one kept
        ids = await running(5_000)
        before = await seq_read()
        assert len(await d.complete_many("w1", [(i, 1, "{}") for i in ids[:250]])) == 250
        assert await seq_read() - before == 0
    finally:
        await store.close()


def claim_params(limit: int = 100) -> ClaimParams:
    return ClaimParams(worker="w1", priorities=["default"], types=None, limit=limit, lease_s=30.0, tenant=None,
                       now=T0, fair_tau_s=1.0)


async def test_a_claim_leases_its_picked_runs_by_id_when_the_table_is_mostly_queue(store: PgStore) -> None:
    """The claim's UPDATE finds the runs it picked by primary key. Joined to them, and with
    statistics saying the table is mostly queued runs (a burst of jobs, analyzed), PostgreSQL
    hashed every queued run to find the picked ones: 4.7 ms of a 9.1 ms claim of 250 out of
    20,000 queued (plan read with EXPLAIN ANALYZE, stop 38). Planned here on a connection with
    the server's settings: the statement's own shape must keep the scan out (the claim connection
    also prices sequential scans out, see below). Fails without the fix (the plan scans
    executions under the UPDATE)."""
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, trigger, partition, scheduled_for, run_at, state)"
            " SELECT cronwheel_uuid7(), 't', 'job', 'submit', g %% 64, %s, %s, 'queued'"
            " FROM generate_series(1, 5000) g", (T0, T0))
        await conn.execute("ANALYZE executions")
        async with conn.transaction():
            await store.dispatch.lock_claim_tenants(conn, None)
            cur = await conn.execute("EXPLAIN (FORMAT JSON) " + q("claim"), claim_args(claim_params(250)))
            plan = (await cur.fetchone())[0][0]["Plan"]  # type: ignore[index]
    below = below_executions_update(plan)
    assert not any(n["Node Type"] == "Seq Scan" for n in below), below
    assert {n["Index Name"] for n in below if "Index Name" in n} == {"executions_pkey"}, below
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    assert len(await d.lease("w1", [], 250, 30.0, 0.0)) == 250


async def test_the_claim_connection_plans_the_claim_once_with_sequential_scans_priced_out(store: PgStore) -> None:
    """On the claim connection the claim is planned once and the plan kept (force_generic_plan:
    planned per call it spent 1.0-1.5 ms planning, a quarter of PostgreSQL's time under W2's
    single calls), with sequential scans priced out so the kept plan reads through indexes
    whatever the table was when it was made (see the next test). The settings are the claim
    connection's only: the pool's connections keep the server's. Fails without
    CLAIM_SESSION_SETTINGS (custom plans counted)."""
    for _ in range(12):
        await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    for _ in range(12):
        assert len(await d.lease("w1", [], 1, 30.0, 0.0)) == 1
    async with store.claim_connection() as conn:
        cur = await conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                                 " WHERE statement LIKE '%Lease up to%'")
        [(generic, custom)] = await cur.fetchall()
        cur = await conn.execute("SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')")
        claim_settings = await cur.fetchone()
        cur = await conn.execute("SHOW jit")  # SESSION_SETTINGS, as on every node connection
        claim_jit = await cur.fetchone()
    async with store.connection() as conn:
        cur = await conn.execute("SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')")
        pool_settings = await cur.fetchone()
    assert generic == 12 and custom == 0, (generic, custom)
    assert claim_settings == ("force_generic_plan", "off")
    assert claim_jit == ("off",)
    assert pool_settings == ("auto", "on")


async def test_a_claim_stays_cheap_when_the_queue_grows_after_its_connection_first_claimed(store: PgStore) -> None:
    """The claim connection keeps the plan it made when it first ran the claim, while executions
    was nearly empty; it must still read only what the claim takes when a backlog comes. In stop
    29 such a plan read the whole queue once per leased run (650 ms for 250 runs out of 20,000
    queued, against 5 ms). Counted here as rows read (sequentially or through indexes) by one claim
    of 100 out of 5,000 queued. Fails with sequential scans allowed on the claim connection."""
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    for _ in range(8):  # the claim connection makes its plan at the first, with one run queued
        await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
        assert len(await d.lease("w1", [], 1, 30.0, 0.0)) == 1
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, trigger, partition, scheduled_for, run_at, state)"
            " SELECT gen_random_uuid(), 't', 'job', 'submit', g %% 64, %s, %s, 'queued'"
            " FROM generate_series(1, 5000) g", (T0, T0))

    async def read() -> int:
        async with store.claim_connection() as conn:  # the claim's own reads
            return await executions_rows_read(conn, "idx_tup_fetch", "seq_tup_read")

    before = await read()
    assert len(await d.lease("w1", [], 100, 30.0, 0.0)) == 100
    after = await read()
    assert after - before < 1_000, after - before


async def test_a_nodes_claims_run_on_one_connection_prepared_from_the_first(store: PgStore) -> None:
    """Taken in turn from the shared pool (psycopg_pool hands out the connection idle longest),
    the claims of a herd each met a connection that had not run the claim yet: 6-7 ms of
    planning a claim on a fresh backend, against 1.3 ms on a warm one, 40 ms in one 1,000-run W3
    herd of six claims. Now every claim of a node runs on its claim connection, prepared
    (parsed once) from the first. Fails without the fix: the claim connection would have run
    none (or, without prepare=True, 7 of the 12, psycopg preparing a statement at its 6th run)."""
    for _ in range(12):
        await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    for _ in range(12):
        assert len(await d.lease("w1", [], 1, 30.0, 0.0)) == 1
        async with store.connection():  # the shared pool's turn moves on between claims
            pass
    async with store.claim_connection() as conn:
        cur = await conn.execute("SELECT generic_plans + custom_plans FROM pg_prepared_statements"
                                 " WHERE statement LIKE '%Lease up to%'")
        assert await cur.fetchall() == [(12,)]


async def test_a_claim_takes_only_from_the_tenants_its_own_lock_statement_locked(store: PgStore) -> None:
    """The claim reads the tenants to take from where `claim_lock_tenants` left them in the same
    transaction (so the two go in one round trip, the claim not waiting for the lock's answer).
    Sent alone, a claim takes nothing; a tenant whose work was queued after the locks were taken
    waits for the next claim (its counts were not read under its lock)."""
    await insert_execution(store, tenant="a", partition=1, scheduled_for=T0, run_at=T0, state="queued")
    async with store.connection() as conn:
        async with store.pipelined_transaction(conn):
            alone = await store.dispatch.claim(conn, claim_params())
        assert await alone.result() == []
        async with conn.transaction():
            await store.dispatch.lock_claim_tenants(conn, None)
            late = await insert_execution(store, tenant="b", partition=2, scheduled_for=T0, run_at=T0, state="queued")
            claim = await store.dispatch.claim(conn, claim_params())
            leased = await claim.result()
    assert [r.tenant for r in leased] == ["a"]
    assert (await execution_row(store, late))["state"] == "queued"


async def test_a_busy_nodes_claim_is_one_round_trip_and_an_idle_ones_sends_no_claim_for_nothing(dsn: str) -> None:
    """Read on the wire: while the node's last claim found queued work, a claim sends the locks,
    the claim and the COMMIT before it asks for any answer ("EES"). With the lock statement's
    answer read before the claim was sent, a claim took two round trips (1.5-7 ms of a 250-run
    claim's 17 ms in a 1,000-run herd went to the first). An idle node reads the locks' answer
    first and sends no claim when nothing is queued ("EHS"): its waiting polls, one claim per
    fallback_poll_s each, cost the lock statement only, not the claim's planning. Fails without
    the change (a busy claim "EHES")."""
    async with WireCounter(dsn) as wire, PgStore(StoreConfig(dsn=wire.dsn, min_connections=1,
                                                             max_connections=2)) as store:
        d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
        assert await d.lease("w1", [], 1, 30.0, 0.0) == []  # connects the claim connection
        wire.reset()
        assert await d.lease("w1", [], 1, 30.0, 0.0) == []
        assert wire.marks.rstrip("H") == "EHS", wire.marks  # idle, nothing queued: no claim sent
        for _ in range(3):
            await insert_execution(store, partition=1, scheduled_for=T0, run_at=T0, state="queued")
        wire.reset()
        assert len(await d.lease("w1", [], 1, 30.0, 0.0)) == 1
        assert wire.marks.rstrip("H") == "EHES", wire.marks  # idle before: locks first, then the claim
        wire.reset()
        assert len(await d.lease("w1", [], 1, 30.0, 0.0)) == 1
        assert wire.marks.rstrip("H") == "EES", wire.marks  # busy: one round trip
