"""The fencing rule against a real PostgreSQL: old epochs are refused, in the same transaction."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.errors import Internal, StaleEpoch, Unavailable
from cronwheel.storage import FireBatchParams, PgStore, PlainTicks, StoreConfig, Tick
from cronwheel.storage.queries import all_queries, q
from tests.e2e.helpers import wait_until_async

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def make_schedule(store: PgStore, partition: int) -> uuid.UUID:
    sid = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute(
            q("insert_schedule"),
            {
                "id": sid, "tenant": "t1", "name": f"s-{sid}", "cron": "* * * * *",
                "timezone": "UTC", "dst_gap": "shift", "dst_repeated": None, "job_type": "noop",
                "payload": "{}", "priority": "default", "retry_initial_s": 30,
                "retry_multiplier": 4, "retry_max_s": 21600, "max_attempts": 5,
                "timeout_s": None, "misfire_policy": "skip", "max_catch_up": 10,
                "overlap_policy": "allow", "jitter_s": 0, "paused": False,
                "partition": partition, "next_run_at": T0, "alert_if_no_success_within_s": None,
            "keep_last": None, "keep_succeeded_for_s": None, "keep_failed_for_s": None,
                "now": T0, "target": None, "queue": "default", "required_capabilities": "",
            },
        )
    return sid


async def test_stale_epoch_write_is_rejected(store: PgStore) -> None:
    sid = await make_schedule(store, 3)
    assert await store.partitions.record_epoch(3, 100, "node-a")
    assert await store.partitions.record_epoch(3, 200, "node-b")
    tick = Tick(sid, T0, T0)
    with pytest.raises(StaleEpoch) as ei:
        await store.firing.fire(FireBatchParams(partition=3, epoch=100, ticks=[tick]))
    assert ei.value.current == 200
    assert await store.executions.get(sid) is None
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM executions")
        assert await cur.fetchone() == (0,)
    # The current owner's write lands.
    res = await store.firing.fire(FireBatchParams(partition=3, epoch=200, ticks=[tick]))
    assert len(res.fired) == 1 and res.duplicates == 0


async def test_epoch_only_moves_forward(store: PgStore) -> None:
    assert await store.partitions.record_epoch(1, 50, "a")
    assert not await store.partitions.record_epoch(1, 50, "b"), "same epoch twice is refused"
    assert not await store.partitions.record_epoch(1, 49, "b"), "an older epoch is refused"
    assert await store.partitions.current_epoch(1) == (50, "a")


async def lock_waiters(store: PgStore, query_like: str) -> int:
    """Backends of this database blocked on a lock while running a statement LIKE `query_like`."""
    async with store.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE %s", (query_like,))
        row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def test_epoch_bump_waits_for_in_flight_fenced_batch(store: PgStore) -> None:
    """The acquisition update conflicts with the fence's share lock: a new owner cannot slip
    its epoch in between the old owner's check and its writes."""
    sid = await make_schedule(store, 2)
    assert await store.partitions.record_epoch(2, 10, "old")
    entered = asyncio.Event()
    release = asyncio.Event()

    async def old_owner_batch() -> None:
        async with store.fenced(2, 10) as conn:
            entered.set()
            await release.wait()
            await conn.execute(
                "INSERT INTO events (kind, partition) VALUES ('probe', 2)"
            )

    task = asyncio.create_task(old_owner_batch())
    await entered.wait()
    bump = asyncio.create_task(store.partitions.record_epoch(2, 11, "new"))
    # The bump must be blocked on the row lock, not done: wait until PostgreSQL shows it waiting.
    await wait_until_async(lambda: lock_waiters(store, "%UPDATE partitions%"), 10,
                           "the epoch bump to wait on the fenced batch's row lock")
    assert not bump.done()
    release.set()
    await task
    assert await bump
    with pytest.raises(StaleEpoch):
        async with store.fenced(2, 10):
            pass
    _ = sid


async def test_concurrent_epoch_bumps_leave_exactly_one_winner(dsn: str) -> None:
    stores = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2)) for _ in range(2)]
    for s in stores:
        await s.open()
    try:
        for round_ in range(50):
            epoch = 1000 + round_
            results = await asyncio.gather(
                stores[0].partitions.record_epoch(5, epoch, "a"), stores[1].partitions.record_epoch(5, epoch, "b")
            )
            assert sorted(results) == [False, True], f"round {round_}: {results}"
            current, owner = await stores[0].partitions.current_epoch(5)
            assert current == epoch
            assert owner == ("a" if results[0] else "b")
    finally:
        for s in stores:
            await s.close()


def test_every_fenced_query_names_the_epoch() -> None:
    fenced = [n for n, body in all_queries().items() if "%(epoch)s" in body]
    assert {"fire_executions", "advance_schedules", "check_fence"} <= set(fenced)
    # A write to a partition-scoped table by an owner-path query must carry the epoch.
    owner_writes = {"fire_executions", "advance_schedules", "insert_partition_event"}
    for name in owner_writes:
        assert "%(epoch)s" in q(name), name
    # The cross-partition hot path (plain ticks and due one-off jobs) names one epoch per
    # partition (its fence) instead.
    assert "%(epochs)s" in q("fire_ticks_fenced")


async def test_fire_batch_after_loss_changes_nothing(store: PgStore) -> None:
    sid = await make_schedule(store, 4)
    assert await store.partitions.record_epoch(4, 7, "a")
    ok = await store.firing.fire(FireBatchParams(
        partition=4, epoch=7, ticks=[Tick(sid, T0, T0)],
    ))
    assert len(ok.fired) == 1
    assert await store.partitions.record_epoch(4, 8, "b")
    t1 = T0 + timedelta(minutes=1)
    with pytest.raises(StaleEpoch):
        from cronwheel.storage import ScheduleAdvance

        await store.firing.fire(FireBatchParams(
            partition=4, epoch=7, ticks=[Tick(sid, t1, t1)],
            advances=[ScheduleAdvance(sid, t1 + timedelta(minutes=1), t1)],
        ))
    row = await store.schedules.get(sid)
    assert row is not None and row["next_run_at"] == T0 and row["last_scheduled_for"] is None


def _plain(sid: uuid.UUID, tick: datetime, version: int = 1) -> PlainTicks:
    ts = tick.timestamp()
    return PlainTicks([sid], [ts], [ts], [ts + 60], [version])


async def test_fire_plain_is_fenced_in_its_one_statement(store: PgStore) -> None:
    """The hot path's single-statement transaction refuses a stale epoch and writes nothing."""
    sid = await make_schedule(store, 6)
    row = await store.schedules.get(sid)
    assert row is not None
    assert await store.partitions.record_epoch(6, 30, "a")
    assert await store.partitions.record_epoch(6, 31, "b")
    with pytest.raises(StaleEpoch) as ei:
        await store.firing.fire_plain(6, 30, _plain(sid, T0, row["version"]))
    assert ei.value.current == 31
    after = await store.schedules.get(sid)
    assert after is not None and after["next_run_at"] == T0 and after["last_scheduled_for"] is None
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM executions WHERE schedule_id = %s", (sid,))
        assert await cur.fetchone() == (0,)
    res = await store.firing.fire_plain(6, 31, _plain(sid, T0, row["version"]))
    assert (res.plain_inserted, res.advanced, res.duplicates) == (1, 1, 0)
    stale_version = await store.firing.fire_plain(6, 31, _plain(sid, T0 + timedelta(minutes=1), row["version"] + 1))
    assert (stale_version.plain_inserted, stale_version.plain_stale) == (0, 1), "edited since loaded: not fired"


async def test_fire_plain_queued_behind_an_epoch_bump_is_refused(store: PgStore, dsn: str) -> None:
    """A batch that reaches the partition row while a new owner's bump is uncommitted waits for
    it, then sees the new epoch and writes nothing (READ COMMITTED re-checks the locked row)."""
    import psycopg

    sid = await make_schedule(store, 7)
    row = await store.schedules.get(sid)
    assert row is not None
    assert await store.partitions.record_epoch(7, 40, "old")
    async with await psycopg.AsyncConnection.connect(dsn) as bumper:
        await bumper.execute("UPDATE partitions SET epoch = 41, owner = 'new' WHERE id = 7")
        fire = asyncio.create_task(store.firing.fire_plain(7, 40, _plain(sid, T0, row["version"])))
        await wait_until_async(lambda: lock_waiters(store, "%fence AS (%"), 5,
                               "the batch to wait on the partition row (the bump's row lock)")
        assert not fire.done()
        await bumper.commit()
    with pytest.raises(StaleEpoch):
        await fire
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM executions WHERE schedule_id = %s", (sid,))
        assert await cur.fetchone() == (0,)


async def test_fired_executions_get_time_ordered_v7_ids(store: PgStore) -> None:
    """The fire statement's ids come from cronwheel_uuid7(): version 7, the RFC variant, and
    the database clock's milliseconds first (so the primary key is appended to, not split)."""
    sid = await make_schedule(store, 7)
    row = await store.schedules.get(sid)
    assert row is not None and await store.partitions.record_epoch(7, 5, "a")
    await store.firing.fire_plain(7, 5, _plain(sid, T0, row["version"]))
    async with store.connection() as conn:
        cur = await conn.execute("SELECT id, fired_at FROM executions WHERE schedule_id = %s", (sid,))
        eid, fired_at = await cur.fetchone()  # type: ignore[misc]
        cur = await conn.execute("SELECT array_agg(cronwheel_uuid7()) FROM generate_series(1, 2000)")
        many = (await cur.fetchone())[0]  # type: ignore[index]
    assert eid.version == 7 and eid.variant == uuid.RFC_4122
    assert abs(int.from_bytes(eid.bytes[:6], "big") - fired_at.timestamp() * 1000) < 1000
    assert len(set(many)) == 2000 and all(u.version == 7 and u.variant == uuid.RFC_4122 for u in many)
    stamps = [int.from_bytes(u.bytes[:6], "big") for u in many]
    assert stamps == sorted(stamps)


async def executions_of(store: PgStore, sid: uuid.UUID) -> list[tuple[datetime, int]]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT scheduled_for, fired_epoch FROM executions WHERE schedule_id = %s", (sid,))
        return [(r[0], int(r[1])) for r in await cur.fetchall()]


async def test_a_fire_across_partitions_refuses_only_the_ticks_of_the_stale_partition(store: PgStore) -> None:
    """One statement for three partitions, one of whose epochs is stale: its tick is refused (no
    execution, cursor where it was) and the other two are written and committed, each under its
    own partition's epoch."""
    sids = {p: await make_schedule(store, p) for p in (1, 2, 3)}
    for p in sids:
        assert await store.partitions.record_epoch(p, 50 + p, "a")
    assert await store.partitions.record_epoch(2, 99, "b")  # another node took 2
    res = await store.firing.fire_plain_many([(p, 50 + p, _plain(sid, T0)) for p, sid in sids.items()])
    stale = res[2]
    assert isinstance(stale, StaleEpoch) and (stale.partition, stale.epoch, stale.current) == (2, 52, 99)
    for p in (1, 3):
        ok = res[p]
        assert not isinstance(ok, StaleEpoch) and (ok.plain_inserted, ok.advanced) == (1, 1), p
        assert await executions_of(store, sids[p]) == [(T0, 50 + p)], "fired under its own partition's epoch"
    assert await executions_of(store, sids[2]) == []
    row = await store.schedules.get(sids[2])
    assert row is not None and row["next_run_at"] == T0 and row["last_scheduled_for"] is None


async def test_a_fire_across_partitions_queued_behind_one_partitions_epoch_bump_writes_the_others(
        store: PgStore, dsn: str) -> None:
    """The bump of one partition is uncommitted when the statement reaches its row: the statement
    waits for it, re-checks that row (READ COMMITTED), refuses that partition's tick and writes
    the others'."""
    import psycopg

    sids = {p: await make_schedule(store, p) for p in (4, 5)}
    for p in sids:
        assert await store.partitions.record_epoch(p, 70, "old")
    async with await psycopg.AsyncConnection.connect(dsn) as bumper:
        await bumper.execute("UPDATE partitions SET epoch = 71, owner = 'new' WHERE id = 5")
        fire = asyncio.create_task(store.firing.fire_plain_many([(p, 70, _plain(sid, T0)) for p, sid in sids.items()]))
        await wait_until_async(lambda: lock_waiters(store, "%fence AS (%"), 5,
                               "the statement to wait on partition 5's row (the bump's row lock)")
        assert not fire.done()
        await bumper.commit()
    res = await fire
    assert isinstance(res[5], StaleEpoch) and res[5].current == 71
    assert not isinstance(res[4], StaleEpoch) and res[4].plain_inserted == 1
    assert await executions_of(store, sids[4]) == [(T0, 70)]
    assert await executions_of(store, sids[5]) == []


async def test_a_fire_across_partitions_takes_one_batch_per_partition(store: PgStore) -> None:
    sid = await make_schedule(store, 6)
    with pytest.raises(ValueError, match="one batch per partition"):
        await store.firing.fire_plain_many([(6, 1, _plain(sid, T0)), (6, 1, _plain(sid, T0))])


async def make_oneoff(store: PgStore, partition: int, state: str = "scheduled") -> uuid.UUID:
    ident = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
            " VALUES (%s, 't1', 'noop', %s, %s, %s, %s, 'submit')", (ident, partition, T0, T0, state))
    return ident


async def oneoff_state(store: PgStore, ident: uuid.UUID) -> tuple[str, int | None]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT state, fired_epoch FROM executions WHERE id = %s", (ident,))
        row = await cur.fetchone()
        assert row is not None
        return row[0], row[1]


async def test_due_oneoffs_of_many_partitions_are_queued_by_one_statement_fenced_per_partition(
        store: PgStore) -> None:
    """Due one-off jobs ride the cross-partition hot path with plain ticks (they were a fenced
    transaction per partition, which held W2's 2,000 delayed jobs/s to about 450/s): each is
    queued under its own partition's epoch, a stale partition's jobs and ticks stay as they were,
    and a job cancelled before the fire is left alone."""
    sids = {p: await make_schedule(store, p) for p in (1, 2)}
    jobs = {p: await make_oneoff(store, p) for p in (1, 2, 3)}
    cancelled = await make_oneoff(store, 3, state="cancelled")
    for p in (1, 2, 3):
        assert await store.partitions.record_epoch(p, 60 + p, "a")
    assert await store.partitions.record_epoch(2, 99, "b")  # another node took 2
    batches = [(1, 61, dataclasses.replace(_plain(sids[1], T0), oneoffs=[jobs[1]])),
               (2, 62, dataclasses.replace(_plain(sids[2], T0), oneoffs=[jobs[2]])),
               (3, 63, PlainTicks([], [], [], [], [], [jobs[3], cancelled]))]
    res = await store.firing.fire_plain_many(batches)
    assert isinstance(res[2], StaleEpoch) and res[2].current == 99
    one, three = res[1], res[3]
    assert not isinstance(one, StaleEpoch) and not isinstance(three, StaleEpoch)
    assert (one.plain_inserted, [f.id for f in one.fired]) == (1, [jobs[1]])
    assert [(f.id, f.state, f.run_at, f.schedule_id) for f in three.fired] == [(jobs[3], "queued", T0, None)]
    assert await oneoff_state(store, jobs[1]) == ("queued", 61)
    assert await oneoff_state(store, jobs[3]) == ("queued", 63)
    assert await oneoff_state(store, jobs[2]) == ("scheduled", None)
    assert await oneoff_state(store, cancelled) == ("cancelled", None)
    assert await executions_of(store, sids[2]) == []
    again = await store.firing.fire_plain_many([(3, 63, PlainTicks([], [], [], [], [], [jobs[3]]))])
    assert not isinstance(again[3], StaleEpoch) and again[3].fired == (), "a queued job is not queued twice"


async def test_a_due_oneoff_is_found_by_its_id_however_many_jobs_its_partition_holds(store: PgStore) -> None:
    """The fire statement queues a due one-off by its primary key. It also names the job's
    partition, and with no statistics (a new or truncated table) PostgreSQL chose the partial
    due index on (partition, run_at) for it, filtering by id: every job read every scheduled job
    of its partition, so 20,000 jobs due at one instant read 3.6M index entries and fired 0.6 s
    late, and a backlog of jobs scheduled for later slowed every fire. Fails without the fix
    (the plan scans executions_due)."""
    from cronwheel.storage import firing

    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
            " SELECT cronwheel_uuid7(), 't1', 'noop', 0, %s, %s, 'scheduled', 'submit' FROM generate_series(1, 3000)",
            (T0 + timedelta(hours=1), T0 + timedelta(hours=1)))
    jobs = [await make_oneoff(store, 0) for _ in range(20)]
    assert await store.partitions.record_epoch(0, 900, "a")
    sent: list[tuple[str, dict[str, object]]] = []

    class Recorder:  # the statement and parameters the fire path sends, sent on as they are
        def __init__(self, conn: object) -> None:
            self.conn = conn

        async def execute(self, query: str, params: dict[str, object]) -> object:
            sent.append((query, params))
            return await self.conn.execute(query, params)  # type: ignore[attr-defined]

    async with store.connection() as conn:
        got = await firing._fire_ticks(Recorder(conn), [(0, 900, PlainTicks([], [], [], [], [], jobs))], None)  # type: ignore[arg-type]
    assert len(got[0][2]) == 20, "every job queued"
    query, params = sent[0]
    async with store.connection() as conn:
        for ident in jobs:  # back to scheduled, so the plan is made for the same rows
            await conn.execute("UPDATE executions SET state = 'scheduled' WHERE id = %s", (ident,))
        cur = await conn.execute("EXPLAIN (FORMAT JSON) " + query, params)  # type: ignore[arg-type]
        plan = str((await cur.fetchone())[0])  # type: ignore[index]
    assert "executions_due" not in plan and "executions_pkey" in plan


async def test_a_fenced_write_whose_commit_is_refused_is_unavailable_not_internal(store: PgStore) -> None:
    """A COMMIT refused after the body ran wrote nothing: Unavailable (the firer retries the
    batch), not Internal (which ended the firer's task group, and the node: chaos seed 3, stop
    48, under the refuse-commits failpoint). An error in the body stays what it was."""
    sid = await make_schedule(store, 5)
    assert await store.partitions.record_epoch(5, 10, "node-a")
    async with store.connection() as conn:
        await conn.execute("CREATE OR REPLACE FUNCTION test_refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
                           "BEGIN RAISE EXCEPTION 'commit refused (test)'; END $$")
        await conn.execute("CREATE CONSTRAINT TRIGGER test_refuse_commit AFTER UPDATE ON schedules "
                           "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_refuse_commit()")
    try:
        with pytest.raises(Unavailable, match="COMMIT refused"):
            async with store.fenced(5, 10) as conn:
                await conn.execute("UPDATE schedules SET name = name || '-x' WHERE id = %s", (sid,))
        async with store.connection() as conn:
            cur = await conn.execute("SELECT name FROM schedules WHERE id = %s", (sid,))
            assert await cur.fetchone() == (f"s-{sid}",), "the refused transaction wrote nothing"
        with pytest.raises(Unavailable, match="COMMIT refused"):  # the rule is transaction()'s, for every caller
            async with store.transaction() as conn:
                await conn.execute("UPDATE schedules SET name = name || '-y' WHERE id = %s", (sid,))
        with pytest.raises(Internal):  # an error of the body itself is not a refused COMMIT
            async with store.fenced(5, 10) as conn:
                await conn.execute("SELECT 1 / 0")
    finally:
        async with store.connection() as conn:
            await conn.execute("DROP TRIGGER IF EXISTS test_refuse_commit ON schedules")
            await conn.execute("DROP FUNCTION IF EXISTS test_refuse_commit()")
