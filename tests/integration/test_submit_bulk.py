"""SubmitJobs (bulk, all or nothing) and SubmitJob's group commit, against real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.clock import SystemClock
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands.submit_batcher import SubmitBatcher
from cronwheel.cluster.commands.values import QuotaExceeded
from cronwheel.errors import InvalidArgument
from cronwheel.storage import PgStore

from .conftest import TEST_PARTITIONS

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def job(i: int, tenant: str = "acme", key: str | None = None, **kw: object) -> runs.JobSpec:
    return runs.JobSpec(tenant=tenant, type="t", payload={"i": i}, idempotency_key=key, **kw)  # type: ignore[arg-type]


def prep(specs: list[runs.JobSpec], now: datetime = NOW) -> list:
    return [runs.prepare_job(s, now, TEST_PARTITIONS) for s in specs]


async def count(store: PgStore, tenant: str = "acme") -> int:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*), count(DISTINCT id) FROM executions WHERE tenant = %s", (tenant,))
        n, distinct = await cur.fetchone()
    assert n == distinct
    return int(n)


async def set_quota(store: PgStore, tenant: str, limit: int) -> None:
    async with store.connection() as conn:
        await conn.execute("INSERT INTO tenants (id, max_executions_per_day) VALUES (%s, %s) "
                           "ON CONFLICT (id) DO UPDATE SET max_executions_per_day = excluded.max_executions_per_day",
                           (tenant, limit))


async def test_25000_jobs_in_three_calls_are_each_stored_once(store: PgStore) -> None:
    ids: set = set()
    for size in (10_000, 10_000, 5_000):
        got = await runs.submit_jobs(store, prep([job(i) for i in range(size)]), NOW)
        assert len(got) == size and not any(d for _, d in got)
        ids |= {r["id"] for r, _ in got}
    assert len(ids) == 25_000
    assert await count(store) == 25_000


async def test_more_than_10000_jobs_is_invalid_argument_naming_jobs(store: PgStore) -> None:
    with pytest.raises(InvalidArgument) as err:
        await runs.submit_jobs(store, prep([job(i) for i in range(10_001)]), NOW)
    assert err.value.field == "jobs"
    assert await count(store) == 0


async def test_a_repeated_key_returns_the_existing_execution_per_item(store: PgStore) -> None:
    first = await runs.submit_jobs(store, prep([job(0, key="k0"), job(1, key="k1")]), NOW)
    got = await runs.submit_jobs(store, prep([job(2, key="k1"), job(3, key="new"), job(4, key="new"),
                                              job(5)]), NOW)
    assert got[0] == (first[1][0], True)
    assert got[1][1] is False
    assert got[2] == (got[1][0], True)  # a key repeated inside one call is one job
    assert got[3][1] is False
    assert await count(store) == 4


async def test_bulk_over_quota_stores_nothing_and_deduplicated_items_do_not_count(store: PgStore) -> None:
    await set_quota(store, "acme", 3)
    await runs.submit_jobs(store, prep([job(0, key="a"), job(1)]), NOW)
    with pytest.raises(QuotaExceeded):
        await runs.submit_jobs(store, prep([job(2), job(3)]), NOW)
    assert await count(store) == 2
    got = await runs.submit_jobs(store, prep([job(4, key="a"), job(5)]), NOW)
    assert [d for _, d in got] == [True, False]
    assert await count(store) == 3


async def test_group_commit_answers_every_caller_with_its_own_result(store: PgStore) -> None:
    await runs.submit_jobs(store, prep([job(0, key="taken")]), NOW)
    batcher = SubmitBatcher(store, SystemClock(), window_s=0.05, max_batch=512)
    now = datetime.now(UTC)
    specs = [job(i, key=f"k{i}") for i in range(60)] + [job(60, key="taken"), job(61, key="k5")]
    try:
        got = await asyncio.gather(*(batcher.submit(j) for j in prep(specs, now)))
    finally:
        await batcher.close()
    assert batcher.groups_written < len(specs)  # they shared transactions
    for i in range(60):
        row, dedup = got[i]
        assert (row["idempotency_key"], dedup) == (f"k{i}", False)
    assert got[60][1] is True and got[60][0]["idempotency_key"] == "taken"
    assert got[61] == (got[5][0], True)
    assert await count(store) == 61


async def test_an_invalid_call_is_refused_before_it_joins_a_group() -> None:
    with pytest.raises(InvalidArgument) as err:
        runs.prepare_job(job(0, run_at=NOW + timedelta(days=3660 * 2)), NOW, TEST_PARTITIONS)
    assert err.value.field == "run_at"


async def test_group_commit_keeps_the_daily_quota_exact_under_concurrency(store: PgStore) -> None:
    await set_quota(store, "acme", 17)
    batchers = [SubmitBatcher(store, SystemClock(), window_s=0.002, max_batch=8) for _ in range(3)]
    now = datetime.now(UTC)
    jobs = prep([job(i) for i in range(60)], now)
    try:
        got = await asyncio.gather(*(batchers[i % 3].submit(j) for i, j in enumerate(jobs)),
                                   return_exceptions=True)
    finally:
        for b in batchers:
            await b.close()
    accepted = [g for g in got if isinstance(g, tuple)]
    refused = [g for g in got if isinstance(g, QuotaExceeded)]
    assert (len(accepted), len(refused)) == (17, 43)
    assert await count(store) == 17


async def test_scheduled_jobs_are_announced_with_their_run_at_in_one_notification(store: PgStore) -> None:
    from cronwheel.storage.notifications import Listener, parse_oneoff_batch

    later = NOW + timedelta(seconds=30)
    async with Listener(store.config.dsn) as notes:
        got = await runs.submit_jobs(store, prep([job(i, run_at=later) for i in range(300)]), NOW)
        it = notes.__aiter__()
        entries: list = []
        while len(entries) < 300:
            n = await asyncio.wait_for(it.__anext__(), 10)
            if n.channel == "cronwheel_due":
                batch = parse_oneoff_batch(n.payload)
                assert batch is not None
                entries += batch
    assert {(p, i) for p, i, _ in entries} == {(r["partition"], r["id"]) for r, _ in got}
    assert {ts for _, _, ts in entries} == {later.timestamp()}


async def test_a_lone_caller_never_waits_for_the_collection_window(store: PgStore) -> None:
    from cronwheel.clock import FakeClock

    clock = FakeClock()  # never advanced: a call that waited for the window would never be written
    batcher = SubmitBatcher(store, clock, window_s=0.5)
    try:
        for i in range(20):  # one after the other: each finds the previous group done
            row, dedup = await asyncio.wait_for(batcher.submit(prep([job(i)], clock.now())[0]), 10)
            assert not dedup
    finally:
        await batcher.close()
    assert batcher.groups_written == 20
