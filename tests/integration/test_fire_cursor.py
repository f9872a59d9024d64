"""The fire cursor against a real PostgreSQL: a schedule's `next_run_at` only moves past a tick
that the same transaction recorded (compare-and-set), and a pause, delete or edit committed
before a fire is refused by the database for every kind of tick (one fire guard).

The Firer tests run the whole fire loop on a FakeClock: time moves only when the test says, and
the test waits on the firer's signals, never on a sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.firing.firer import Firer, FiringConfig
from cronwheel.storage import FireBatchParams, PgStore, PlainTicks, ScheduleAdvance, Tick
from cronwheel.storage.queries import q

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SIGNAL_TIMEOUT_S = 10.0  # real seconds a signal may take (database round trips), never waited out


async def make_schedule(store: PgStore, partition: int, overlap: str = "allow") -> uuid.UUID:
    """An every-minute UTC schedule whose cursor is at T0, version 1."""
    sid = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute(q("insert_schedule"), {
            "id": sid, "tenant": "t1", "name": f"s-{sid}", "cron": "* * * * *",
            "timezone": "UTC", "dst_gap": "shift", "dst_repeated": None, "job_type": "noop",
            "payload": "{}", "priority": "default", "retry_initial_s": 30,
            "retry_multiplier": 4, "retry_max_s": 21600, "max_attempts": 5,
            "timeout_s": None, "misfire_policy": "catch_up", "max_catch_up": 10,
            "overlap_policy": overlap, "jitter_s": 0, "paused": False,
            "partition": partition, "next_run_at": T0, "alert_if_no_success_within_s": None,
            "keep_last": None, "keep_succeeded_for_s": None, "keep_failed_for_s": None, "now": T0, "target": None,
            "queue": "default", "required_capabilities": "",
        })
    return sid


async def cursor(store: PgStore, sid: uuid.UUID) -> tuple[datetime | None, datetime | None]:
    async with store.connection() as conn:
        cur = await conn.execute(
            "SELECT next_run_at, last_scheduled_for FROM schedule_due WHERE schedule_id = %s", (sid,))
        row = await cur.fetchone()
    assert row is not None
    return row[0], row[1]


async def fired_ticks(store: PgStore, sid: uuid.UUID) -> list[tuple[datetime, str]]:
    async with store.connection() as conn:
        cur = await conn.execute(
            "SELECT scheduled_for, state FROM executions WHERE schedule_id = %s ORDER BY scheduled_for", (sid,))
        return [(r[0], r[1]) for r in await cur.fetchall()]


# ---------------------------------------------------------------------- storage: the cursor is a CAS

async def test_plain_fire_from_a_stale_expected_tick_is_refused(store: PgStore) -> None:
    sid = await make_schedule(store, 1)
    assert await store.partitions.record_epoch(1, 10, "a")
    later = (T0 + MINUTE).timestamp()
    res = await store.firing.fire_plain(1, 10, PlainTicks([sid], [later], [later], [later + 60], [1]))
    assert (res.advanced, res.plain_inserted, res.plain_stale) == (0, 0, 1)
    assert await cursor(store, sid) == (T0, None), "the cursor must not skip T0, which was never recorded"
    assert await fired_ticks(store, sid) == []


async def test_advance_from_a_stale_expected_tick_is_refused(store: PgStore) -> None:
    sid = await make_schedule(store, 1)
    assert await store.partitions.record_epoch(1, 10, "a")
    t1 = T0 + MINUTE
    res = await store.firing.fire(FireBatchParams(
        1, 10, ticks=[Tick(sid, t1, t1, cursor=t1)], advances=[ScheduleAdvance(sid, t1 + MINUTE, t1, cursor=t1)]))
    assert (res.fired, res.advanced) == ((), 0)
    assert await cursor(store, sid) == (T0, None)
    assert await fired_ticks(store, sid) == []
    # From the right cursor the same batch shape lands.
    ok = await store.firing.fire(FireBatchParams(
        1, 10, ticks=[Tick(sid, T0, T0, cursor=T0)], advances=[ScheduleAdvance(sid, t1, T0, cursor=T0)]))
    assert (len(ok.fired), ok.advanced) == (1, 1)
    assert await cursor(store, sid) == (t1, T0)


# ---------------------------------------------------------------------- storage: one guard, every tick

CHANGES = {
    "paused": "UPDATE schedules SET paused = true WHERE id = %s",
    "deleted": "UPDATE schedules SET deleted_at = now() WHERE id = %s",
    "edited": "UPDATE schedules SET version = version + 1 WHERE id = %s",
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("kind", ["overlap_tick", "skipped_record", "catch_up", "buffered", "plain"])
async def test_a_change_committed_before_the_fire_is_refused_for_every_kind_of_tick(
        store: PgStore, change: str, kind: str) -> None:
    """Only the schedules row changes (the cursor stays at T0), so each guard predicate is
    exercised alone: the database, not the firer's cache, refuses the write."""
    sid = await make_schedule(store, 2, overlap="forbid")
    assert await store.partitions.record_epoch(2, 20, "a")
    async with store.connection() as conn:
        await conn.execute(CHANGES[change], (sid,))  # type: ignore[arg-type]
    t1, t2 = T0 + MINUTE, T0 + 2 * MINUTE
    adv = ScheduleAdvance(sid, t2, t1 if kind in ("skipped_record", "catch_up") else T0, version=1, cursor=T0)
    ticks = {
        "overlap_tick": [Tick(sid, T0, T0, version=1, cursor=T0)],
        "skipped_record": [Tick(sid, T0, T0, "skipped", "misfire:skip", version=1, cursor=T0),
                           Tick(sid, t1, t1, "skipped", "misfire:skip", version=1, cursor=T0)],
        "catch_up": [Tick(sid, T0, T0, trigger="catch_up", version=1, cursor=T0),
                     Tick(sid, t1, t1, trigger="catch_up", version=1, cursor=T0)],
        "buffered": [Tick(sid, T0, T0, "scheduled", "buffered", version=1, cursor=T0)],
        "plain": [],
    }[kind]
    if kind == "plain":
        res = await store.firing.fire_plain(2, 20, PlainTicks([sid], [T0.timestamp()], [T0.timestamp()],
                                                              [t1.timestamp()], [1]))
        assert res.plain_inserted == 0
    else:
        res = await store.firing.fire(FireBatchParams(2, 20, ticks=ticks, advances=[adv]))
        assert res.fired == ()
    assert res.advanced == 0
    assert await fired_ticks(store, sid) == []
    assert await cursor(store, sid) == (T0, None)


async def running_run(store: PgStore, sid: uuid.UUID, partition: int) -> uuid.UUID:
    eid = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at, state)"
            " VALUES (%s, %s, 't1', 'noop', %s, %s, %s, 'running')", (eid, sid, partition, T0 - MINUTE, T0 - MINUTE))
    return eid


async def cancel_requested(store: PgStore, eid: uuid.UUID) -> bool:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT cancel_requested FROM executions WHERE id = %s", (eid,))
        row = await cur.fetchone()
    assert row is not None
    return bool(row[0])


def replace_batch(sid: uuid.UUID) -> FireBatchParams:
    return FireBatchParams(2, 20, ticks=[Tick(sid, T0, T0, version=1, cursor=T0)],
                           advances=[ScheduleAdvance(sid, T0 + MINUTE, T0, version=1, cursor=T0)],
                           replace_schedule_ids=[sid])


async def test_a_replace_tick_of_a_paused_schedule_leaves_its_running_run_alone(store: PgStore) -> None:
    sid = await make_schedule(store, 2, overlap="replace")
    eid = await running_run(store, sid, 2)
    assert await store.partitions.record_epoch(2, 20, "a")
    async with store.connection() as conn:
        await conn.execute(CHANGES["paused"], (sid,))  # type: ignore[arg-type]
    res = await store.firing.fire(replace_batch(sid))
    assert (res.fired, res.advanced) == ((), 0)
    assert not await cancel_requested(store, eid)
    assert await fired_ticks(store, sid) == [(T0 - MINUTE, "running")]


async def test_a_replace_tick_stops_the_running_run_and_queues_its_own(store: PgStore) -> None:
    sid = await make_schedule(store, 2, overlap="replace")
    eid = await running_run(store, sid, 2)
    assert await store.partitions.record_epoch(2, 20, "a")
    res = await store.firing.fire(replace_batch(sid))
    assert [(f.scheduled_for, f.state) for f in res.fired] == [(T0, "queued")] and res.advanced == 1
    assert await cancel_requested(store, eid)
    assert await fired_ticks(store, sid) == [(T0 - MINUTE, "running"), (T0, "queued")]



async def test_a_replace_tick_reports_the_runs_it_cancelled_for_the_state_counters(store: PgStore) -> None:
    """FireBatchResult.replaced: the job type of each run the tick cancelled (a queued one), not
    of a running one it asked to stop; the firer counts them `cancelled` (fails without it)."""
    sid = await make_schedule(store, 2, overlap="replace")
    await running_run(store, sid, 2)
    queued = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at, state)"
            " VALUES (%s, %s, 't1', 'noop', 2, %s, %s, 'queued')", (queued, sid, T0 - MINUTE / 2, T0 - MINUTE / 2))
    assert await store.partitions.record_epoch(2, 20, "a")
    res = await store.firing.fire(replace_batch(sid))
    assert [(f.scheduled_for, f.state) for f in res.fired] == [(T0, "queued")]
    assert res.replaced == ("noop",)


# ---------------------------------------------------------------------- the Firer on a FakeClock

class Trust:
    """A controllable `epoch_if_trusted`: answers the epoch, except for the next `lapses` calls,
    which find the trust window lapsed (no keepalive answered in time) and answer None."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.lapses = 0

    def __call__(self, partition: int) -> int | None:
        if self.lapses:
            self.lapses -= 1
            return None
        return self.epoch


@pytest.fixture
async def firing(store: PgStore) -> AsyncIterator[Callable[..., Any]]:
    """Start a Firer on a FakeClock (at T0 - 5 s unless told) owning partition `p`."""
    tasks: list[asyncio.Task[None]] = []

    async def start(p: int, trust: Trust, start_ts: float = T0.timestamp() - 5,
                    wait_loaded: bool = True) -> tuple[Firer, FakeClock]:
        clock = FakeClock(start_ts=start_ts)
        assert await store.partitions.record_epoch(p, trust.epoch, "node-a")
        firer = Firer(store.firing, clock, FiringConfig(), epoch_if_trusted=trust,
                      on_stale=lambda part, epoch: None)
        tasks.append(asyncio.create_task(firer.run(), name="firer-under-test"))
        await firer.partition_gained(p, trust.epoch)
        if wait_loaded:
            await asyncio.wait_for(firer.signals.loaded.wait(), SIGNAL_TIMEOUT_S)
        return firer, clock

    yield start
    for t in tasks:
        t.cancel()
    for t in tasks:
        with pytest.raises(asyncio.CancelledError):
            await t


async def advance_until(clock: FakeClock, event: asyncio.Event, seconds: float) -> None:
    """Move the fake clock by `seconds`, then wait for the firer to signal `event`."""
    event.clear()
    clock.advance(seconds)
    await asyncio.wait_for(event.wait(), SIGNAL_TIMEOUT_S)


async def test_a_tick_whose_batch_met_a_lapsed_trust_is_fired_once_trust_returns(
        store: PgStore, firing: Callable[..., Any]) -> None:
    sid = await make_schedule(store, 3)
    trust = Trust(epoch=1)
    firer, clock = await firing(3, trust)
    trust.lapses = 1  # the batch of T0 finds the trust window lapsed; the next keepalive restores it
    await advance_until(clock, firer.signals.retry, 5)
    assert await cursor(store, sid) == (T0, None), "nothing written, nothing advanced"
    await advance_until(clock, firer.signals.written, firer.config.retry_after_s)
    assert await fired_ticks(store, sid) == [(T0, "queued")]
    assert await cursor(store, sid) == (T0 + MINUTE, T0)
    await advance_until(clock, firer.signals.written, 60)
    assert await fired_ticks(store, sid) == [(T0, "queued"), (T0 + MINUTE, "queued")]
    assert await cursor(store, sid) == (T0 + 2 * MINUTE, T0 + MINUTE)


async def test_misfire_records_whose_write_met_a_lapsed_trust_are_written_once_trust_returns(
        store: PgStore, firing: Callable[..., Any]) -> None:
    """The node gains the partition 5 minutes after T0, less 5 s (catch_up): the preload's
    misfire batch finds the trust lapsed, waits, and writes the records once trust is back."""
    sid = await make_schedule(store, 6)
    trust = Trust(epoch=1)
    trust.lapses = 1
    firer, clock = await firing(6, trust, start_ts=(T0 + 5 * MINUTE).timestamp() - 5,
                                wait_loaded=False)
    await asyncio.wait_for(firer.signals.retry.wait(), SIGNAL_TIMEOUT_S)
    assert await cursor(store, sid) == (T0, None)
    await advance_until(clock, firer.signals.loaded, firer.config.retry_after_s)
    assert await fired_ticks(store, sid) == [(T0 + i * MINUTE, "queued") for i in range(5)]
    assert await cursor(store, sid) == (T0 + 5 * MINUTE, T0 + 4 * MINUTE)
    await advance_until(clock, firer.signals.written, 5)  # and the next tick follows on from there
    assert await cursor(store, sid) == (T0 + 6 * MINUTE, T0 + 5 * MINUTE)


async def test_a_forbid_schedule_paused_after_loading_is_not_fired_and_keeps_its_cursor(
        store: PgStore, firing: Callable[..., Any]) -> None:
    sid = await make_schedule(store, 4, overlap="forbid")
    firer, clock = await firing(4, Trust(epoch=1))
    async with store.connection() as conn:  # committed before the tick; no notification reaches the firer
        await conn.execute("UPDATE schedules SET paused = true WHERE id = %s", (sid,))
    await advance_until(clock, firer.signals.written, 5)
    assert await fired_ticks(store, sid) == []
    assert await cursor(store, sid) == (T0, None)


async def test_the_queued_time_of_a_fired_tick_is_the_firers_clock(
        store: PgStore, firing: Callable[..., Any]) -> None:
    sid = await make_schedule(store, 5)
    firer, clock = await firing(5, Trust(epoch=1))
    await advance_until(clock, firer.signals.written, 5)
    async with store.connection() as conn:
        cur = await conn.execute("SELECT queued_at FROM executions WHERE schedule_id = %s", (sid,))
        assert await cur.fetchone() == (T0,)


async def test_a_delayed_oneoff_is_queued_queue_ahead_s_before_its_run_at_and_not_sooner(
        store: PgStore, firing: Callable[..., Any]) -> None:
    """A scheduled one-off job's fire (scheduled -> queued) is done `queue_ahead_s` before its
    run_at, so the row update is not between its run_at and its claim (the claim takes it only
    from its run_at). Fails without the change (queued at its run_at: nothing written 0.9 s
    before it)."""
    ident = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute("INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
                           " VALUES (%s, 't1', 'noop', 7, %s, %s, 'scheduled', 'submit')", (ident, T0, T0))

    async def state() -> tuple[str, datetime | None]:
        async with store.connection() as conn:
            cur = await conn.execute("SELECT state, queued_at FROM executions WHERE id = %s", (ident,))
            row = await cur.fetchone()
            assert row is not None
            return row[0], row[1]

    firer, clock = await firing(7, Trust(epoch=1))
    ahead = firer.config.queue_ahead_s
    assert ahead > 0.2
    clock.advance(5 - ahead - 0.1)  # T0 - ahead - 0.1 s: the loop wakes for nothing, and rests
    assert await firer.next_rest(SIGNAL_TIMEOUT_S)
    assert await state() == ("scheduled", None)
    await advance_until(clock, firer.signals.written, 0.2)  # T0 - ahead + 0.1 s
    assert await state() == ("queued", T0 - timedelta(seconds=ahead - 0.1))


async def test_an_allow_tick_is_queued_queue_ahead_s_before_its_run_at_a_policed_one_at_it(
        store: PgStore, firing: Callable[..., Any]) -> None:
    """A cron tick of an overlap-allow schedule needs no decision at its time: it is queued
    `queue_ahead_s` before its run_at (claimed only from it), so 1,000 ticks of one boundary are
    written before it, not between it and their claims. A policed tick (forbid) is decided at its
    time. Fails without the change (the allow tick queued at T0: nothing 0.9 s before it)."""
    allow = await make_schedule(store, 7)
    forbid = await make_schedule(store, 7, overlap="forbid")
    firer, clock = await firing(7, Trust(epoch=1))
    ahead = firer.config.queue_ahead_s
    assert ahead > 0.2
    clock.advance(5 - ahead - 0.1)
    assert await firer.next_rest(SIGNAL_TIMEOUT_S)
    assert await fired_ticks(store, allow) == []
    await advance_until(clock, firer.signals.written, 0.2)  # T0 - ahead + 0.1 s
    assert await fired_ticks(store, allow) == [(T0, "queued")]
    assert await fired_ticks(store, forbid) == []
    async with store.connection() as conn:
        cur = await conn.execute("SELECT run_at, queued_at, trigger FROM executions WHERE schedule_id = %s",
                                 (allow,))
        # claimable from T0; trigger 'cron', what an edit's api_unfire_ahead takes back (test_unfire_ahead
        # writes such rows by hand)
        assert await cur.fetchall() == [(T0, T0 - timedelta(seconds=ahead - 0.1), "cron")]
    await advance_until(clock, firer.signals.written, ahead)
    assert await fired_ticks(store, forbid) == [(T0, "queued")]


async def test_a_oneoff_queued_ahead_is_announced_with_its_run_at_not_as_claimable_now(
        store: PgStore, firing: Callable[..., Any]) -> None:
    """The fire of a job queued ahead tells other nodes (NOTIFY cronwheel_queued 'at:<run_at>')
    and this node's dispatcher (on_fired) when it becomes claimable, so neither wakes its
    waiting calls to claim nothing. Fails if it is announced as claimable now."""
    from cronwheel.storage.notifications import QUEUED_CHANNEL, Listener, parse_queued_at

    async with store.connection() as conn:
        await conn.execute("INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
                           " VALUES (%s, 't1', 'noop', 7, %s, %s, 'scheduled', 'submit')", (uuid.uuid4(), T0, T0))
    woken: list[float | None] = []
    async with Listener(store.config.dsn) as notes:
        firer, clock = await firing(7, Trust(epoch=1))
        firer.on_fired = woken.append
        await advance_until(clock, firer.signals.written, 5 - firer.config.queue_ahead_s + 0.1)
        it = notes.__aiter__()
        note = await asyncio.wait_for(it.__anext__(), SIGNAL_TIMEOUT_S)
        while note.channel != QUEUED_CHANNEL:
            note = await asyncio.wait_for(it.__anext__(), SIGNAL_TIMEOUT_S)
    assert parse_queued_at(note.payload) == T0.timestamp()
    assert woken == [T0.timestamp()]


async def gain_all(firer: Firer, partitions: Any) -> None:
    """The firer gains each partition at epoch 1, one after the other, each loaded before the next."""
    for p in partitions:
        firer.signals.loaded.clear()
        await firer.partition_gained(p, 1)
        await asyncio.wait_for(firer.signals.loaded.wait(), SIGNAL_TIMEOUT_S)


class CountingFiring:
    """The real FiringPort, recording which partitions each cross-partition statement carried."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.statements: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)

    async def fire_plain_many(self, batches: Any, now: Any = None) -> Any:
        self.statements.append(sorted(b[0] for b in getattr(batches, "batches", batches)))
        return await self.port.fire_plain_many(batches, now)


async def test_ticks_of_several_partitions_due_at_one_instant_go_as_one_statement_fenced_per_partition(
        store: PgStore) -> None:
    """Three partitions' ticks at T0: one statement. Partition 5 was taken by another node meanwhile
    (its epoch in the database moved on; this node has not heard yet): its tick is refused, the
    partition is dropped and reported stale, and the other two are written and go on firing."""
    sids = {p: await make_schedule(store, p) for p in (3, 4, 5)}
    for p in sids:
        assert await store.partitions.record_epoch(p, 1, "node-a")
    port = CountingFiring(store.firing)
    stale: list[tuple[int, int]] = []
    clock = FakeClock(start_ts=T0.timestamp() - 5)
    # No horizon extension within the test (it holds each partition's lock in turn, and a
    # partition whose lock is busy at fire time goes in a statement of its own).
    config = FiringConfig(horizon_s=600, extend_every_s=500)
    firer = Firer(port, clock, config, epoch_if_trusted=lambda p: 1,  # type: ignore[arg-type]
                  on_stale=lambda p, e: stale.append((p, e)))
    run = asyncio.create_task(firer.run())
    try:
        await gain_all(firer, sids)
        assert await store.partitions.record_epoch(5, 2, "node-b")
        firer.signals.lost.clear()
        await advance_until(clock, firer.signals.written, 5)
        await asyncio.wait_for(firer.signals.lost.wait(), SIGNAL_TIMEOUT_S)
        assert port.statements == [[3, 4, 5]]
        assert stale == [(5, 1)] and sorted(firer.owned()) == [3, 4]
        for p in (3, 4):
            assert await fired_ticks(store, sids[p]) == [(T0, "queued")]
            assert await cursor(store, sids[p]) == (T0 + MINUTE, T0)
        assert await fired_ticks(store, sids[5]) == []
        assert await cursor(store, sids[5]) == (T0, None), "left for its new owner"
        await advance_until(clock, firer.signals.written, 60)
        assert port.statements == [[3, 4, 5], [3, 4]]
        for p in (3, 4):
            assert await fired_ticks(store, sids[p]) == [(T0, "queued"), (T0 + MINUTE, "queued")]
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run


class ExtendSpy:
    """The real FiringPort, recording the partitions whose window the extender loads; `during`
    runs right after the extender's cross-partition read, before it moves any window."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.loads: list[int] = []
        self.during: Callable[[], Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)

    def due_schedules(self, partition: int, horizon: Any, after: Any, chunk: int = 5000) -> Any:
        if after is not None:  # an extension, not a first load
            self.loads.append(partition)
        return self.port.due_schedules(partition, horizon, after, chunk)

    async def extend_due_partitions(self, windows: Any, horizon: Any) -> set[int]:
        due: set[int] = await self.port.extend_due_partitions(windows, horizon)
        if self.during is not None:
            await self.during()
        return due


async def start_spied(store: PgStore, parts: tuple[int, ...]) -> tuple[Firer, FakeClock, ExtendSpy, Any]:
    for p in parts:
        assert await store.partitions.record_epoch(p, 1, "node-a")
    spy = ExtendSpy(store.firing)
    clock = FakeClock(start_ts=T0.timestamp() - 5)  # first horizon: T0 + 115 s
    firer = Firer(spy, clock, FiringConfig(horizon_s=120, extend_every_s=30),  # type: ignore[arg-type]
                  epoch_if_trusted=lambda p: 1, on_stale=lambda p, e: None)
    run = asyncio.create_task(firer.run())
    for p in parts:
        firer.signals.loaded.clear()
        await firer.partition_gained(p, 1)
        await asyncio.wait_for(firer.signals.loaded.wait(), SIGNAL_TIMEOUT_S)
    return firer, clock, spy, run


async def stop(run: Any) -> None:
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def move_cursor(store: PgStore, sid: uuid.UUID, to: datetime) -> None:
    async with store.connection() as conn:
        await conn.execute("UPDATE schedule_due SET next_run_at = %s WHERE schedule_id = %s", (to, sid))


async def test_the_extender_reads_once_and_loads_only_the_partitions_with_a_tick_in_their_window(
        store: PgStore) -> None:
    """Two streamed reads per owned partition every extend_every_s held each partition's lock
    in turn on the fire path's loop; one read now says which partitions have anything new."""
    later = {p: await make_schedule(store, p) for p in (3, 4, 5)}
    await move_cursor(store, later[3], T0 + 2 * MINUTE)  # in the first extension's window
    await move_cursor(store, later[4], T0 + 60 * MINUTE)  # in no window of this test
    await move_cursor(store, later[5], T0 + 60 * MINUTE)
    firer, clock, spy, run = await start_spied(store, (3, 4, 5))
    try:
        await advance_until(clock, firer.signals.extended, 30)  # horizon T0 + 145 s
        assert spy.loads == [3]
        await advance_until(clock, firer.signals.written, 95)  # T0 + 2 min: it fires
        assert await fired_ticks(store, later[3]) == [(T0 + 2 * MINUTE, "queued")]
    finally:
        await stop(run)


async def test_a_tick_committed_into_the_window_while_the_extender_decides_is_armed(store: PgStore) -> None:
    """A schedule created after the extender's read (its notification's reload comes before the
    window moves) would be judged "beyond what is loaded" by the reload and "nothing new" by the
    extender, and never armed: the extender holds the partition's lock from its read to the move,
    so the reload sees the moved window. Fails without the lock (the reload runs in between)."""
    firer, clock, spy, run = await start_spied(store, (3,))
    try:
        sid: list[uuid.UUID] = []

        async def create_and_notify() -> None:
            spy.during = None
            sid.append(await make_schedule(store, 3))
            await move_cursor(store, sid[0], T0 + 2 * MINUTE)
            reload = asyncio.create_task(firer.reload(3, "s", sid[0]))
            await asyncio.wait({reload}, timeout=1.0)  # done at once unless it waits for the lock

        spy.during = create_and_notify
        await advance_until(clock, firer.signals.extended, 30)
        await advance_until(clock, firer.signals.written, 95)
        assert await fired_ticks(store, sid[0]) == [(T0 + 2 * MINUTE, "queued")]
    finally:
        await stop(run)


class SendClock(CountingFiring):
    """The real FiringPort, recording when (the firer's clock) each statement was sent, and its `now`."""

    def __init__(self, port: Any, clock: FakeClock) -> None:
        super().__init__(port)
        self.clock = clock
        self.sent: list[tuple[float, datetime | None]] = []

    async def fire_plain_many(self, batches: Any, now: Any = None) -> Any:
        self.sent.append((self.clock.now_ts(), now))
        return await super().fire_plain_many(batches, now)


async def test_a_whole_second_is_prepared_ahead_and_sent_at_its_instant_never_before(store: PgStore) -> None:
    """prepare_ahead_s: the entries of a whole second are taken and their statement built that
    early, but it is sent at the instant, with the instant as its `now`; whether each partition may
    be written is decided then, not when it was prepared (partition 5's trust lapsed meanwhile:
    not written, retried)."""
    sids = {p: await make_schedule(store, p) for p in (3, 4, 5)}
    for p in sids:
        assert await store.partitions.record_epoch(p, 1, "node-a")
    clock = FakeClock(start_ts=T0.timestamp() - 5)
    port = SendClock(store.firing, clock)
    trusted = {3: 1, 4: 1, 5: 1}
    # queue_ahead_s=0: the ticks' instant is T0 itself (queued ahead, the instant held is T0 - 1 s)
    config = FiringConfig(horizon_s=600, extend_every_s=500, prepare_ahead_s=0.05, queue_ahead_s=0)
    firer = Firer(port, clock, config, epoch_if_trusted=trusted.get,  # type: ignore[arg-type]
                  on_stale=lambda p, e: None)
    run = asyncio.create_task(firer.run())
    try:
        await gain_all(firer, sids)
        clock.advance(5 - 0.04)  # 40 ms before T0: within prepare_ahead_s, the loop takes T0's entries
        await clock.until_asleep()
        for _ in range(50):
            await asyncio.sleep(0)
        assert port.sent == [], "prepared, not sent"
        assert firer.wheel.now == T0.timestamp(), "T0's entries were taken ahead"
        trusted[5] = None  # partition 5's trust lapses while T0 is held
        firer.signals.written.clear()
        firer.signals.retry.clear()
        await advance_until(clock, firer.signals.written, 0.04)
        await asyncio.wait_for(firer.signals.retry.wait(), SIGNAL_TIMEOUT_S)
        assert port.sent == [(T0.timestamp(), T0)] and port.statements == [[3, 4]]
        for p in (3, 4):
            assert await fired_ticks(store, sids[p]) == [(T0, "queued")]
        assert await fired_ticks(store, sids[5]) == [], "decided at the instant: not written"
        async with store.connection() as conn:
            cur = await conn.execute("SELECT DISTINCT queued_at FROM executions")
            assert await cur.fetchall() == [(T0,)]
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run


async def test_a_fire_waiting_on_a_row_lock_holds_up_neither_other_partitions_nor_later_instants(
        store: PgStore) -> None:
    """A replace tick of partition 4 waits on its running run's row, locked by a session that
    stopped mid-transaction (the chaos failpoint `stall-completion`). The ticks of partitions 3
    and 5 (replace: written one after another in the group before) and 6 (allow) due at the same
    instant are written while it waits, and so are their ticks of the next minute: the fire loop
    does not wait for a policed write. Once the lock is let go, partition 4's ticks follow, in
    order. Fails without the change (partitions after 4 in the group, and the loop, waited)."""
    sids = {p: await make_schedule(store, p, overlap="allow" if p == 6 else "replace") for p in (3, 4, 5, 6)}
    runs = {p: await running_run(store, sids[p], p) for p in (3, 4, 5)}
    for p in sids:
        assert await store.partitions.record_epoch(p, 1, "node-a")
    clock = FakeClock(start_ts=T0.timestamp() - 5)
    firer = Firer(store.firing, clock, FiringConfig(horizon_s=600, extend_every_s=500),
                  epoch_if_trusted=lambda p: 1, on_stale=lambda p, e: None)
    run = asyncio.create_task(firer.run())

    async def written_at(tick: datetime, parts: Any) -> None:
        """Wait on the firer's `written` signal until each of `parts` has a run of `tick`."""
        while True:
            firer.signals.written.clear()
            if all([tick in [t for t, _ in await fired_ticks(store, sids[p])] for p in parts]):
                return
            await asyncio.wait_for(firer.signals.written.wait(), SIGNAL_TIMEOUT_S)

    try:
        await gain_all(firer, sids)
        async with store.connection() as blocker:
            await blocker.execute("BEGIN")
            await blocker.execute("SELECT 1 FROM executions WHERE id = %s FOR UPDATE", (runs[4],))
            clock.advance(5)  # T0
            await written_at(T0, (3, 5, 6))
            clock.advance(60)  # T0 + 1 min: the loop is not held by partition 4's T0
            await written_at(T0 + MINUTE, (3, 5, 6))
            assert await fired_ticks(store, sids[4]) == [(T0 - MINUTE, "running")]
            await blocker.execute("ROLLBACK")
        await written_at(T0 + MINUTE, (4,))
        assert [t for t, _ in await fired_ticks(store, sids[4])] == [T0 - MINUTE, T0, T0 + MINUTE]
    finally:
        await stop(run)
