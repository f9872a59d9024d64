"""Retention against a real PostgreSQL: the Pruner on a FakeClock prunes exactly what its policy
says (keep_last, the age windows and their precedence), fenced by the partition's epoch, and
never makes a pruned tick due again (the due cursor says what has fired)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.retention.policy import DAY_S, RetentionConfig
from cronwheel.cluster.retention.pruner import Pruner
from cronwheel.errors import StaleEpoch
from cronwheel.storage import PgStore
from cronwheel.storage.retention import PruneExpiredParams, TypeWindows, Windows

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
        self.port, self.batches = port, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)

    async def prune_expired(self, p: Any) -> Any:
        self.batches += 1
        return await self.port.prune_expired(p)

    async def prune_keep_last(self, p: Any) -> Any:
        self.batches += 1
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
