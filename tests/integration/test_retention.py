"""Retention against a real PostgreSQL: the Pruner on a FakeClock prunes exactly what its policy
says (keep_last, the age windows and their precedence), fenced by the partition's epoch, and
never makes a pruned tick due again (the due cursor says what has fired)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.retention.policy import DAY_S, MIN_BATCH_ROWS, RetentionConfig
from cronwheel.cluster.retention.pruner import RATE_DOWN, RATE_UP, Pruner
from cronwheel.errors import StaleEpoch
from cronwheel.storage import PgStore
from cronwheel.storage.retention import DuePasses, PruneExpiredParams, TypeWindows, Windows

from .conftest import TEST_PARTITIONS
from .execution_rows import insert_execution
from .test_fire_cursor import cursor, make_schedule

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
MINUTE = timedelta(minutes=1)
P, EPOCH = 3, 30


def clock_at(t: datetime) -> FakeClock:
    return FakeClock(start_ts=t.timestamp())


async def set_retention(store: PgStore, sid: uuid.UUID, **cols: Any) -> None:
    async with store.connection() as conn:
        for k, v in cols.items():
            assert k in ("keep_last", "keep_succeeded_for_s", "keep_failed_for_s")
            await conn.execute(f"UPDATE schedules SET {k} = %s WHERE id = %s", (v, sid))  # type: ignore[arg-type]


async def finished_run(store: PgStore, sid: uuid.UUID | None, tick: datetime, state: str = "succeeded",
                       finished: datetime | None = None, job_type: str = "noop", **cols: Any) -> uuid.UUID:
    return await insert_execution(
        store, schedule_id=sid, partition=P, type=job_type, scheduled_for=tick, run_at=tick, state=state,
        trigger="cron" if sid else "submit",
        finished_at=None if state == "skipped" else (finished or tick + timedelta(seconds=5)), **cols)


async def ticks_of(store: PgStore, sid: uuid.UUID) -> list[datetime]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT scheduled_for FROM executions WHERE schedule_id = %s ORDER BY 1", (sid,))
        return [r[0] for r in await cur.fetchall()]


async def ids_left(store: PgStore) -> set[uuid.UUID]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT id FROM executions")
        return {r[0] for r in await cur.fetchall()}


def pruner(store: PgStore, clock: FakeClock, **config: Any) -> Pruner:
    return Pruner(store.retention, lambda: [(P, EPOCH)], clock=clock, config=RetentionConfig(**config))


@pytest.fixture
async def owned(store: PgStore) -> None:
    assert await store.partitions.record_epoch(P, EPOCH, "n1")


async def test_keep_last_3_keeps_exactly_the_last_3_finished_runs(store: PgStore, owned: None) -> None:
    sid = await make_schedule(store, P)
    await set_retention(store, sid, keep_last=3)
    ticks = [T0 + i * MINUTE for i in range(10)]
    for i, t in enumerate(ticks[:8]):
        await finished_run(store, sid, t, state=("succeeded", "failed", "skipped", "cancelled")[i % 4])
    await finished_run(store, sid, ticks[8], state="running", finished=None)  # unfinished: never pruned
    await finished_run(store, sid, ticks[9], state="queued", finished=None)
    other = await make_schedule(store, P)  # no keep_last: its runs are young, kept
    for t in ticks[:5]:
        await finished_run(store, other, t)
    p = pruner(store, clock_at(T0 + 20 * MINUTE), batch_rows=2)  # tiny batches: the cursor is exercised
    assert await p.drain() == 5
    assert await ticks_of(store, sid) == ticks[5:10]  # the last 3 finished + the running and queued ones
    assert await ticks_of(store, other) == ticks[:5]
    mark = await store.retention.pruned_through(sid)
    assert mark is not None and (mark.through, mark.pruned) == (ticks[4], 5)
    assert p.metrics.pruned.labels("keep_last")._value.get() == 5  # cronwheel_pruned_total{pass="keep_last"}


async def test_a_7_day_policy_prunes_what_is_older_and_nothing_newer(store: PgStore, owned: None) -> None:
    sid = await make_schedule(store, P)
    clock = clock_at(T0)
    # One run finishing every 6 hours over 10 days, succeeded and failed alternately.
    runs = {}
    for i in range(40):
        t = T0 + i * timedelta(hours=6)
        runs[await finished_run(store, sid, t, state="succeeded" if i % 2 else "failed")] = (t, i % 2)
    p = pruner(store, clock, succeeded_s=7 * DAY_S, failed_s=30 * DAY_S, batch_rows=7)
    clock.advance((10 * DAY).total_seconds())  # "ten days later": now = T0 + 10 d
    await p.drain()
    cutoff = clock.now() - 7 * DAY
    expect = {i for i, (t, ok) in runs.items() if not (ok and t + timedelta(seconds=5) < cutoff)}
    assert await ids_left(store) == expect
    assert len(expect) < len(runs)
    clock.advance((20 * DAY).total_seconds())  # now T0 + 30 d: failed runs older than T0 go
    await p.drain()
    assert await ids_left(store) == {i for i, (t, ok) in runs.items() if not ok and t + timedelta(seconds=5) >= T0}
    clock.advance((10 * DAY).total_seconds())  # T0 + 40 d: everything is past its window
    await p.drain()
    assert await ids_left(store) == set()


async def test_a_schedule_window_beats_the_job_type_window_beats_the_default(store: PgStore, owned: None) -> None:
    clock = clock_at(T0 + 3 * DAY)
    own = await make_schedule(store, P)
    await set_retention(store, own, keep_succeeded_for_s=DAY_S)  # 1 day
    plain = await make_schedule(store, P)
    a = await finished_run(store, own, T0, job_type="report")  # schedule: 1 d -> pruned at 3 d
    b = await finished_run(store, plain, T0, job_type="report")  # job type report: 2 d -> pruned
    c = await finished_run(store, plain, T0 + MINUTE, job_type="other")  # default 7 d -> kept
    d = await finished_run(store, None, T0, job_type="forever")  # job type kept forever -> kept
    assert a and b
    p = pruner(store, clock, by_type=(TypeWindows("report", 2 * DAY_S, 2 * DAY_S), TypeWindows("forever", None, None)))
    await p.drain()
    assert await ids_left(store) == {c, d}


async def test_a_prune_under_a_stale_epoch_deletes_nothing(store: PgStore, owned: None) -> None:
    sid = await make_schedule(store, P)
    run = await finished_run(store, sid, T0)
    assert await store.partitions.record_epoch(P, EPOCH + 1, "n2")  # another node took the partition
    with pytest.raises(StaleEpoch):
        await store.retention.prune_expired(PruneExpiredParams(P, EPOCH, Windows(60.0, 60.0), T0 + 30 * DAY))
    p = pruner(store, clock_at(T0 + 30 * DAY))
    await p.drain()  # the stale owner's pruner skips the partition
    assert await ids_left(store) == {run}


async def test_a_pruned_tick_is_not_due_again_the_cursor_says_what_fired(store: PgStore, owned: None) -> None:
    """The row goes, the cursor stays: the next tick the due index hands out is the one after the
    last fired, whatever retention deleted."""
    sid = await make_schedule(store, P)
    for i in range(5):
        await finished_run(store, sid, T0 + i * MINUTE)
    async with store.connection() as conn:
        await conn.execute("UPDATE schedule_due SET next_run_at = %s, last_scheduled_for = %s WHERE schedule_id = %s",
                           (T0 + 5 * MINUTE, T0 + 4 * MINUTE, sid))
    await set_retention(store, sid, keep_last=0)
    assert await pruner(store, clock_at(T0 + DAY)).drain() == 5
    assert await ticks_of(store, sid) == []
    assert await cursor(store, sid) == (T0 + 5 * MINUTE, T0 + 4 * MINUTE)
    due = [d async for chunk in store.firing.due_schedules(P, T0 + DAY, None) for d in chunk]
    assert [(d.id, d.next_run_at) for d in due] == [(sid, T0 + 5 * MINUTE)]


async def test_a_skipped_record_of_an_old_tick_ages_from_when_it_was_recorded(store: PgStore, owned: None) -> None:
    """A skipped record has no finished_at; a backfilled or caught-up tick may be months old.
    Its age counts from when it was written, so it is not pruned the moment it appears."""
    sid = await make_schedule(store, P)
    old_tick = T0 - 60 * DAY
    run = await finished_run(store, sid, old_tick, state="skipped", created_at=T0)
    clock = clock_at(T0 + DAY)
    p = pruner(store, clock)
    await p.drain()
    assert await ids_left(store) == {run}
    clock.advance((7 * DAY).total_seconds())
    await p.drain()
    assert await ids_left(store) == set()


class CountingPort:
    """The real RetentionPort, counting the fenced batches the pruner opens."""

    def __init__(self, port: Any) -> None:
        self.port, self.batches, self.passes = port, 0, list[str]()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)

    async def prune_expired(self, p: Any) -> Any:
        self.batches += 1
        self.passes.append("age")
        return await self.port.prune_expired(p)

    async def prune_keep_last(self, p: Any) -> Any:
        self.batches += 1
        self.passes.append("keep_last")
        return await self.port.prune_keep_last(p)


async def test_a_round_over_partitions_with_nothing_to_prune_opens_no_fenced_batch(store: PgStore) -> None:
    """A node owning 64 partitions used to open two fenced transactions per partition every round
    with nothing to do (128 transactions, on the event loop the fire path shares); one read now
    says which partitions have work. Fails without the pre-check (two per partition)."""
    owned = [(p, 7) for p in range(TEST_PARTITIONS)]  # every partition of the test database
    for p, e in owned:
        assert await store.partitions.record_epoch(p, e, "n1")
    sid = await make_schedule(store, P)
    clock = clock_at(T0)
    recent = await finished_run(store, sid, T0 - timedelta(hours=1))  # inside the 7-day window
    port = CountingPort(store.retention)
    pr = Pruner(port, lambda: owned, clock=clock, config=RetentionConfig(succeeded_s=7 * DAY_S))  # type: ignore[arg-type]
    assert await pr.round() is False
    assert port.batches == 0
    old = await finished_run(store, sid, T0 - 8 * DAY)  # now partition P has something older
    await set_retention(store, sid, keep_last=5)  # and a keep_last schedule
    assert await pr.drain() == 1
    assert port.batches >= 2 and await ids_left(store) == {recent}
    assert old not in await ids_left(store)


class FireLoop:
    """The node's fire loop as the Pruner sees it (Firer.quiet_for / next_rest) on the test's
    FakeClock: it fires (quiet_for 0) until `rest(s)` puts it to sleep for s seconds."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.until, self.rested = clock, float("-inf"), asyncio.Event()

    def quiet_for(self) -> float:
        return max(0.0, self.until - self.clock.now_ts())

    async def next_rest(self, timeout_s: float) -> bool:
        return await self.clock.wait(self.rested, timeout_s)

    def rest(self, seconds: float) -> None:
        self.until = self.clock.now_ts() + seconds
        rested, self.rested = self.rested, asyncio.Event()
        rested.set()


async def old_finished_runs(store: PgStore, n: int) -> None:
    """n succeeded one-off runs of partition P, finished 8 days before T0, one second apart."""
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, trigger, partition, scheduled_for, run_at, state, finished_at)"
            " SELECT gen_random_uuid(), 't', 'job', 'submit', %(p)s, at, at, 'succeeded', at"
            "   FROM generate_series(1, %(n)s) AS g, LATERAL (SELECT %(t)s::timestamptz - make_interval(secs => g))"
            "        AS t(at)", {"p": P, "n": n, "t": T0 - 8 * DAY})


async def test_a_paced_batch_waits_for_the_fire_loop_to_rest_and_fits_in_its_rest(store: PgStore,
                                                                                   owned: None) -> None:
    """Pruning yields to firing: while the fire loop fires, no prune batch starts; when it rests
    for 0.1 s, a batch takes what the rate fits in gap_share of that rest (0.1 s * 0.5 * 10,000
    rows/s = 500 rows), not batch_rows (1000); a batch within its budget raises the rate."""
    await old_finished_runs(store, 3000)
    clock = clock_at(T0)
    port = CountingPort(store.retention)
    loop = FireLoop(clock)
    pr = Pruner(port, lambda: [(P, EPOCH)], clock=clock, fires=loop,  # type: ignore[arg-type]
                config=RetentionConfig(succeeded_s=7 * DAY_S, batch_rows=1000, gap_share=0.5))
    pr.rate = 10_000.0
    step = asyncio.create_task(pr.step(P, EPOCH, pace=True, passes=DuePasses(age=True, keep_last=False)))
    await clock.until_asleep()  # waiting for the loop's rest
    assert port.batches == 0
    loop.rest(0.1 + 1e-6)  # (+1 us: the clock's float arithmetic must not make it 499)
    deleted, more = await step
    assert port.batches == 1
    assert more and deleted == 500 and len(await ids_left(store)) == 2500
    assert pr.rate == pytest.approx(10_000.0 * RATE_UP)


class SlowPort(CountingPort):
    """Each batch takes `seconds` of the test's FakeClock."""

    def __init__(self, port: Any, clock: FakeClock, seconds: float) -> None:
        super().__init__(port)
        self.clock, self.seconds = clock, seconds

    async def prune_expired(self, p: Any) -> Any:
        self.clock.advance(self.seconds)
        return await super().prune_expired(p)


async def test_a_paced_batch_that_overran_its_budget_cuts_the_rate(store: PgStore, owned: None) -> None:
    """A batch that took longer than its budget (gap_share of the rest) would have met the next
    fire: the next batches are sized at half the rate."""
    await old_finished_runs(store, 3000)
    clock = clock_at(T0)
    loop = FireLoop(clock)
    pr = Pruner(SlowPort(store.retention, clock, 0.08), lambda: [(P, EPOCH)], clock=clock,  # type: ignore[arg-type]
                fires=loop, config=RetentionConfig(succeeded_s=7 * DAY_S, batch_rows=1000, gap_share=0.5))
    pr.rate = 10_000.0
    step = asyncio.create_task(pr.step(P, EPOCH, pace=True, passes=DuePasses(age=True, keep_last=False)))
    await clock.until_asleep()
    loop.rest(0.1 + 1e-6)
    deleted, _ = await step
    assert deleted == 500  # its budget was 0.05 s; it took 0.08
    assert pr.rate == pytest.approx(10_000.0 * RATE_DOWN)


async def test_a_paced_batch_with_no_rest_in_yield_wait_goes_with_the_fewest_rows(store: PgStore,
                                                                                   owned: None) -> None:
    """A fire loop that never rests (it fires back to back) slows pruning to MIN_BATCH_ROWS a
    batch after yield_wait_s; it never stops it. A loop resting long enough for a whole batch
    (a quiet node) gets batch_rows at once, without waiting for its next rest."""
    clock = clock_at(T0)
    loop = FireLoop(clock)
    pr = Pruner(store.retention, lambda: [(P, EPOCH)], clock=clock, fires=loop,
                config=RetentionConfig(succeeded_s=7 * DAY_S, batch_rows=1000, yield_wait_s=1.0, gap_share=0.5))
    pr.rate = 10_000.0
    rows = asyncio.create_task(pr.batch_rows(pace=True))
    await clock.until_asleep()
    clock.advance(1.0)
    assert await rows == (MIN_BATCH_ROWS, None)
    loop.rest(1.0)  # 0.5 s of budget fits 5,000 rows
    assert await pr.batch_rows(pace=True) == (1000, 0.5)
    assert await pr.batch_rows(pace=False) == (1000, None)  # unpaced (drain, tests): batch_rows


async def test_a_pass_with_nothing_to_look_at_opens_no_fenced_batch(store: PgStore, owned: None) -> None:
    """A partition with old runs but no keep_last schedule opens only age batches (every round
    used to open a keep_last transaction too, which found nothing, and, paced, waited for a rest
    of the fire loop of its own); one with a keep_last schedule and nothing old, only keep_last
    batches. Fails without the per-pass pre-check."""
    sid = await make_schedule(store, P)
    await finished_run(store, sid, T0 - 8 * DAY)
    clock = clock_at(T0)
    port = CountingPort(store.retention)
    pr = Pruner(port, lambda: [(P, EPOCH)], clock=clock,  # type: ignore[arg-type]
                config=RetentionConfig(succeeded_s=7 * DAY_S))
    assert await pr.drain() == 1
    assert port.passes == ["age"]
    await finished_run(store, sid, T0 - timedelta(hours=2))
    await finished_run(store, sid, T0 - timedelta(hours=1))
    await set_retention(store, sid, keep_last=1)
    port.passes.clear()
    assert await pr.drain() == 1
    assert set(port.passes) == {"keep_last"}


async def test_a_paced_batch_never_takes_more_than_batch_rows_below_the_minimum(store: PgStore,
                                                                                 owned: None) -> None:
    """--retention-batch 5 is an upper bound even under MIN_BATCH_ROWS (20): a rest sized batch
    took max(20, min(fit, 5)) = 20 rows before the fix."""
    clock = clock_at(T0)
    loop = FireLoop(clock)
    pr = Pruner(store.retention, lambda: [(P, EPOCH)], clock=clock, fires=loop,
                config=RetentionConfig(succeeded_s=7 * DAY_S, batch_rows=5, yield_wait_s=1.0))
    pr.rate = 1_000.0  # a 1 ms rest fits 0 rows: the minimum, held to batch_rows
    rows = asyncio.create_task(pr.batch_rows(pace=True))
    await clock.until_asleep()
    loop.rest(0.001)
    assert (await rows)[0] == 5


async def test_explain_after_pruning_shows_a_missed_tick_as_missed_not_pruned(store: PgStore, owned: None) -> None:
    """Issue 47 item 8: keep_last=0 prunes every finished run; explain called every tick up to the
    latest pruned one pruned, so a tick that never fired (minute 3 here: no run) hid among them.
    Retention now records the ticks it removed. Fails without that record (minute 3: pruned)."""
    from cronwheel.cluster.commands.explain import explain, load_facts

    sid = await make_schedule(store, P)
    await set_retention(store, sid, keep_last=0)
    ticks = [T0 + i * MINUTE for i in range(6)]
    for i, t in enumerate(ticks):
        if i != 3:
            await finished_run(store, sid, t)
    p = pruner(store, clock_at(T0 + 20 * MINUTE), batch_rows=2)  # several batches: several records
    assert await p.drain() == 5
    assert await ticks_of(store, sid) == []
    facts = await load_facts(store, sid, None, T0, T0 + 6 * MINUTE)
    got = {e.tick: e.outcome for e in explain(facts, T0, T0 + 6 * MINUTE, T0 + 20 * MINUTE)}
    assert got == {t: "MISSED" if i == 3 else "PRUNED_BY_RETENTION" for i, t in enumerate(ticks)}, got


async def test_explain_reads_the_events_its_window_needs_not_every_event_of_the_schedule(store: PgStore) -> None:
    """Issue 47 item 8: the console polls explain every 3 s and each call read every event of the
    schedule. It reads those of the window, the definition changes and misfire records of its
    ticks after it, and the latest pause or resume before it. Fails without the bound (all 400)."""
    from cronwheel.storage.api import Event

    sid = await make_schedule(store, P)
    start, end = T0 + 10 * DAY, T0 + 10 * DAY + timedelta(hours=1)
    async with store.transaction() as conn:
        for i in range(200):  # before and after the window: not needed
            for at in (T0 + i * MINUTE, end + timedelta(hours=1) + i * MINUTE):
                await store.events.insert(Event("execution_cancelled", "t1", sid, at=at), conn)
        needed = [Event("schedule_paused", "t1", sid, at=start - DAY),  # paused at the window's start
                  Event("no_success_alert", "t1", sid, at=start + MINUTE),  # in it
                  Event("schedule_updated", "t1", sid, at=end + DAY, data={"changes": {}}),  # walked back from
                  Event("misfire_skipped", "t1", sid, at=end + 2 * DAY,  # found later, of the window's ticks
                        data={"policy": "skip", "first_missed": (end - MINUTE).isoformat(),
                              "latest_missed": (end + DAY).isoformat()})]
        for e in [Event("schedule_resumed", "t1", sid, at=start - 2 * DAY),
                  Event("misfire_skipped", "t1", sid, at=end + 3 * DAY,  # of ticks after the window
                        data={"policy": "skip", "first_missed": (end + DAY).isoformat(),
                              "latest_missed": (end + 2 * DAY).isoformat()}), *needed]:
            await store.events.insert(e, conn)
    got = await store.explain.events(sid, start, end)
    assert [(e["kind"], e["at"]) for e in got] == [(e.kind, e.at) for e in needed]
