"""SubmitJobs (bulk, all or nothing) and SubmitJob's group commit, against real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from cronwheel.clock import SystemClock
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands.submit_batcher import SubmitBatcher
from cronwheel.cluster.commands.unique import UniqueSpec
from cronwheel.cluster.commands.values import QuotaExceeded
from cronwheel.errors import Internal, InvalidArgument
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


async def test_while_a_group_is_in_flight_calls_join_until_none_arrives_for_quiet_s(store: PgStore, dsn: str) -> None:
    """Group commit under load: with a group in flight, the next group keeps collecting while
    calls keep arriving (each within quiet_s of the last) and goes once quiet_s passes with none,
    or at window_s. A 1 ms window let each call of 64 busy callers commit on its own (groups of
    1-4, 660 jobs/s, the node's CPU spent on transactions). Fails without the quiet rule: the
    old batcher holds b and c for its whole window (1 s here) although nobody else comes."""
    import psycopg

    from cronwheel.clock import FakeClock

    clock = FakeClock()
    batcher = SubmitBatcher(store, clock, window_s=1.0, quiet_s=0.1)
    async with await psycopg.AsyncConnection.connect(dsn) as holder:  # holds group 1 on its key
        await holder.execute(
            "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger,"
            " idempotency_key) VALUES (gen_random_uuid(), 'acme', 't', 0, now(), now(), 'queued', 'submit', 'hold')")
        try:
            first = asyncio.create_task(batcher.submit(prep([job(0, key="hold")], clock.now())[0]))
            await wait_until_in_flight(batcher, store)
            b = asyncio.create_task(batcher.submit(prep([job(1)], clock.now())[0]))
            await settle()
            clock.advance(0.06)
            c = asyncio.create_task(batcher.submit(prep([job(2)], clock.now())[0]))  # within quiet_s of b
            await settle()
            clock.advance(0.06)  # 0.12 s after b, 0.06 s after c: still collecting
            await settle()
            assert not b.done() and not c.done() and batcher.groups_written == 0
            clock.advance(0.11)  # a whole quiet_s period (0.12-0.22) with no arrival: the group goes
            await asyncio.wait_for(asyncio.gather(b, c), 10)
            assert (batcher.groups_written, batcher.largest_group) == (1, 2), "b and c shared one transaction"
            await holder.rollback()
            await asyncio.wait_for(first, 10)
            # window_s caps it: calls arriving every 0.09 s still go once 1 s has passed.
            await holder.execute(
                "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger,"
                " idempotency_key) VALUES (gen_random_uuid(), 'acme', 't', 0, now(), now(), 'queued', 'submit',"
                " 'hold2')")
            held = asyncio.create_task(batcher.submit(prep([job(3, key="hold2")], clock.now())[0]))
            await wait_until_in_flight(batcher, store)
            calls = []
            for i in range(15):  # arrivals at 0, 0.09, ... 1.26 s: never a quiet period
                calls.append(asyncio.create_task(batcher.submit(prep([job(10 + i)], clock.now())[0])))
                await settle()
                clock.advance(0.09)
                await settle()  # the batcher sees the time before the next call arrives
            await asyncio.wait_for(asyncio.gather(*calls[:12]), 10)  # the ones before the 1 s window
            assert batcher.largest_group == 12, "the window cut the group while calls still arrived"
            await holder.rollback()
            clock.advance(5)
            await asyncio.wait_for(asyncio.gather(held, *calls), 10)
        finally:
            await holder.rollback()  # a failed assertion must not leave close() waiting on the held key
            await batcher.close()


async def wait_until_in_flight(batcher: SubmitBatcher, store: PgStore) -> None:
    """Until the held group is in flight and its insert waits on the held key (a lock wait seen
    in pg_stat_activity: a signal, not a sleep)."""
    from tests.e2e.helpers import wait_until_async

    from .test_fencing import lock_waiters

    await wait_until_async(lambda: lock_waiters(store, "%Many one-off jobs from SubmitJobs%"), 10,
                           "the held group's insert to wait on the held idempotency key")
    assert batcher._in_flight


async def settle() -> None:
    """Let every runnable task run (the fake clock does not move)."""
    for _ in range(50):
        await asyncio.sleep(0)


# ------------------------------------------------------------- a large call, written chunk by chunk


def chunks(jobs: list, size: int = runs.SUBMIT_CHUNK, fail_after: int | None = None):  # type: ignore[no-untyped-def]
    """`jobs` as runs.submit_jobs' lazy chunks; with `fail_after`, drawing the chunk after that
    many raises as SubmitJobs' validation of a bad job does."""
    for n, lo in enumerate(range(0, len(jobs), size)):
        if fail_after is not None and n == fail_after:
            raise InvalidArgument(f"jobs[{lo}].payload_json", "invalid JSON")
        yield jobs[lo:lo + size]


async def test_a_bad_job_drawn_after_chunks_were_written_stores_nothing(store: PgStore) -> None:
    jobs = prep([job(i, key=f"c{i}") for i in range(1000)])
    with pytest.raises(InvalidArgument, match=r"jobs\[750\]"):
        await runs.submit_jobs(store, chunks(jobs, fail_after=3), NOW)
    assert await count(store) == 0  # three chunks were sent to PostgreSQL, and rolled back
    got = await runs.submit_jobs(store, chunks(jobs), NOW)  # the pool's connections are sound
    assert len(got) == 1000 and not any(d for _, d in got)
    assert await count(store) == 1000


async def test_chunks_answer_as_one_list_does(store: PgStore) -> None:
    await runs.submit_jobs(store, prep([job(0, key="taken")]), NOW)
    specs = ([job(i, key=f"k{i}") for i in range(600)] + [job(600, key="taken"), job(601, key="k5")]
             + [job(602 + i) for i in range(100)] + [job(702, key="k599")])
    got = await runs.submit_jobs(store, chunks(prep(specs)), NOW)
    assert len(got) == len(specs)
    for i in range(600):
        row, dedup = got[i]
        assert (row["idempotency_key"], dedup) == (f"k{i}", False)
    assert got[600][1] is True and got[600][0]["idempotency_key"] == "taken"
    assert got[601] == (got[5][0], True)  # a key repeated in a later chunk is the earlier job
    assert got[702] == (got[599][0], True)
    assert not any(d for _, d in got[602:702])
    assert await count(store) == 1 + 600 + 100


async def test_chunks_over_a_daily_quota_take_the_counted_path(store: PgStore) -> None:
    await set_quota(store, "acme", 700)
    with pytest.raises(QuotaExceeded):
        await runs.submit_jobs(store, chunks(prep([job(i) for i in range(701)])), NOW)
    assert await count(store) == 0  # the fast path's chunks rolled back, the counted path refused
    got = await runs.submit_jobs(store, chunks(prep([job(i) for i in range(700)])), NOW)
    assert len(got) == 700
    assert await count(store) == 700


async def test_a_quota_on_a_tenant_of_a_later_chunk_counts_too(store: PgStore) -> None:
    await set_quota(store, "other", 10)
    jobs = prep([job(i) for i in range(500)] + [job(500 + i, tenant="other") for i in range(11)])
    with pytest.raises(QuotaExceeded):
        await runs.submit_jobs(store, chunks(jobs), NOW)
    assert await count(store) == 0 and await count(store, "other") == 0


async def test_a_chunk_may_not_hold_a_unique_job(store: PgStore) -> None:
    jobs = prep([job(i) for i in range(300)] + [job(300, unique=UniqueSpec(period_s=60))])
    with pytest.raises(ValueError, match="unique"):
        await runs.submit_jobs(store, chunks(jobs), NOW)
    assert await count(store) == 0


async def test_a_refused_commit_of_chunks_reaches_the_caller_and_stores_nothing(store: PgStore) -> None:
    """The COMMIT of the chunked path ends a pipeline, as the claim's does: a refusal there comes
    back as the server's error (or Internal saying the driver lost it, storage.errors.commit_error),
    never as psycopg's IndexError or a busy connection, and the store stays usable."""
    async with store.connection() as conn:
        await conn.execute("CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                           "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$")
        await conn.execute("CREATE CONSTRAINT TRIGGER test_refuse AFTER INSERT ON executions "
                           "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.type = 'doomed') "
                           "EXECUTE FUNCTION test_refuse()")
    for n in range(20):
        jobs = prep([job(i) for i in range(599)] + [runs.JobSpec(tenant="acme", type="doomed", payload={})])
        with pytest.raises(Internal, match="refused at commit|the driver lost its error"):
            await runs.submit_jobs(store, chunks(jobs), NOW)
        assert await count(store) == 0, n
    got = await runs.submit_jobs(store, chunks(prep([job(i) for i in range(600)])), NOW)
    assert len(got) == 600 and await count(store) == 600


async def test_a_job_due_within_queued_at_submit_within_is_stored_queued_and_announced_for_its_run_at(
        store: PgStore) -> None:
    """A one-off job due within QUEUED_AT_SUBMIT_WITHIN is written `queued` with its run_at (no
    fire: no owner is told of it), announced as claimable from the soonest such run_at (`at:`),
    not now; one due now wakes the dispatchers now (its priority), one further out is scheduled
    and announced to its owner. Fails without the rule (the first two would be scheduled)."""
    from cronwheel.cluster.commands.values import QUEUED_AT_SUBMIT_WITHIN
    from cronwheel.storage.notifications import Listener, parse_oneoff_batch, parse_queued_at

    soon, later = NOW + timedelta(seconds=2), NOW + timedelta(seconds=3)
    far = NOW + QUEUED_AT_SUBMIT_WITHIN + timedelta(seconds=1)
    async with Listener(store.config.dsn) as notes:
        got = await runs.submit_jobs(store, prep([job(0, run_at=later), job(1, run_at=soon), job(2, run_at=far),
                                                  job(3)]), NOW)
        it = notes.__aiter__()
        queued: set[str] = set()
        due: list = []
        while len(queued) < 2 or not due:
            n = await asyncio.wait_for(it.__anext__(), 10)
            if n.channel == "cronwheel_queued":
                queued.add(n.payload)
            else:
                due += parse_oneoff_batch(n.payload) or []
    assert [(r["state"], r["run_at"]) for r, _ in got] == [("queued", later), ("queued", soon), ("scheduled", far),
                                                          ("queued", NOW)]
    assert {parse_queued_at(p) for p in queued} == {None, soon.timestamp()}  # now (job 3), and at `soon`
    assert [(p, i) for p, i, _ in due] == [(got[2][0]["partition"], got[2][0]["id"])]


# ------------------------------------------------------------- SubmitJobs' brief rows


def brief_mix(n: int) -> list[runs.JobSpec]:
    """Queued now, queued at a sub-second run_at within QUEUED_AT_SUBMIT_WITHIN, and scheduled at
    a sub-second run_at given in another zone; every other job with an idempotency key."""
    east = timezone(timedelta(hours=2))
    specs = []
    for i in range(n):
        run_at = (None, NOW + timedelta(seconds=2, microseconds=137 * i + 1),
                  (NOW + timedelta(hours=1, microseconds=7919 * i + 3)).astimezone(east))[i % 3]
        specs.append(job(i, key=f"b{i}" if i % 2 else None, run_at=run_at,
                         priority=("default", "critical", "bulk", "default")[i % 4]))
    return specs


@pytest.mark.parametrize("path", ["list", "chunks", "counted"])
async def test_brief_rows_equal_the_stored_rows_column_by_column(store: PgStore, path: str) -> None:
    """SubmitJobs' storage path (`brief`): the node builds the rows of new jobs from the jobs it
    sent, PostgreSQL saying only which were inserted; they must be what a SELECT of BRIEF_COLUMNS
    reads, value and type. Jobs whose key a committed row holds come back deduplicated, whole."""
    from psycopg.rows import dict_row

    from cronwheel.storage.executions import BRIEF_COLUMNS

    columns = [c.strip() for c in BRIEF_COLUMNS.split(",")]
    n = 2 * runs.SUBMIT_CHUNK + 17
    specs = brief_mix(n)
    taken = [1, 7, runs.SUBMIT_CHUNK + 1, n - 2]  # in the first, second and last chunk
    first = {r["idempotency_key"]: r["id"] for r, _ in
             await runs.submit_jobs(store, prep([job(1000 + i, key=f"b{i}") for i in taken]), NOW)}
    if path == "counted":
        await set_quota(store, "acme", 10 * n)
        assert await store.executions.insert_unless_quota(prep(specs[:3]), NOW, brief=True) is None  # nothing written
        assert await count(store) == len(taken)

    async def submit(specs: list[runs.JobSpec]) -> list:
        jobs = prep(specs)
        return await runs.submit_jobs(store, chunks(jobs) if path == "chunks" else jobs, NOW, brief=True)

    got = await submit(specs)
    assert len(got) == n
    async with store.connection() as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute("SELECT " + BRIEF_COLUMNS + " FROM executions WHERE tenant = 'acme'")
        stored = {r["id"]: r for r in await cur.fetchall()}
    assert len(stored) == n
    states = set()
    for i, (row, dedup) in enumerate(got):
        if i in taken:
            assert dedup and row["id"] == first[f"b{i}"] and set(columns) < set(row), i  # the existing row, whole
            continue
        assert not dedup and list(row) == columns, i
        want = stored[row["id"]]
        for c in columns:
            assert row[c] == want[c] and type(row[c]) is type(want[c]), (i, c, row[c], want[c])
        assert row["run_at"].utcoffset() is not None
        states.add((row["state"], row["run_at"].microsecond != 0))
    assert states == {("queued", False), ("queued", True), ("scheduled", True)}

    again = await submit(specs)  # every key taken (every job left out of a statement, or none has a key)
    keyed = [i for i in range(n) if specs[i].idempotency_key is not None]
    assert all(again[i][1] and again[i][0]["id"] == got[i][0]["id"] for i in keyed)
    assert await count(store) == n + (n - len(keyed))
