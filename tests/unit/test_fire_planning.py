"""The firer's batch planning (cluster/firing/planning.py) is pure: due wheel entries and parsed
schedules in, statements and FireBatchParams out. Time is the FakeClock's; no database, no loop."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from cronwheel.clock import FakeClock
from cronwheel.cluster.firing.planning import Item, plan_batch, plan_herd, plan_misfires
from cronwheel.cluster.firing.schedule_cache import SchedInfo, ScheduleCache
from cronwheel.storage import DueSchedule, ScheduleAdvance, Tick

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a minute boundary, where cron ticks meet
MINUTE = 60.0


def schedule(cache: ScheduleCache, p: int, cron: str = "* * * * *", overlap: str = "allow", misfire: str = "skip",
             jitter_s: float = 0, version: int = 3, next_run_at: datetime = T0) -> tuple[SchedInfo, DueSchedule]:
    row = DueSchedule(uuid.uuid4(), cron, "UTC", "shift", None, next_run_at, None, misfire, 10, overlap, jitter_s,
                      version)
    info = cache.put(p, row)
    assert info is not None
    return info, row


def entries(partitions: dict[int, int], at: float) -> list[Item]:
    return [(p, "s", uuid.uuid4(), at) for p, n in partitions.items() for _ in range(n)]


# ------------------------------------------------------------------ plan_herd


def test_a_small_herd_over_many_partitions_is_one_statement() -> None:
    due = entries({p: 3 for p in range(64)}, T0.timestamp())
    groups = plan_herd(due, batch_size=5000, herd_ticks_per_statement=500, parallel_batches=4)
    assert len(groups) == 1
    assert sorted(p for p, _ in groups[0]) == list(range(64))


def test_a_big_herd_is_shared_among_the_batch_slots_but_never_cut_below_the_floor() -> None:
    due = entries({p: 250 for p in range(64)}, T0.timestamp())  # 16,000 ticks, 4 slots: ~4,000 each
    groups = plan_herd(due, batch_size=5000, herd_ticks_per_statement=500, parallel_batches=4)
    sizes = [sum(len(c) for _, c in g) for g in groups]
    assert len(groups) == 4 and all(s == 4000 for s in sizes)
    floor = plan_herd(entries({p: 10 for p in range(64)}, 0.0), 5000, 500, 4)  # 640 ticks: 500 + 140
    assert [sum(len(c) for _, c in g) for g in floor] == [500, 140]


def test_a_partitions_overflow_is_cut_at_batch_size_and_dealt_round_robin() -> None:
    due = entries({7: 2500, 8: 10}, T0.timestamp())
    groups = plan_herd(due, batch_size=1000, herd_ticks_per_statement=500, parallel_batches=4)
    chunks_of_7 = [len(c) for g in groups for p, c in g if p == 7]
    assert chunks_of_7 == [1000, 1000, 500]
    # The first round deals one chunk of each partition: 8's ticks do not wait behind all of 7's.
    assert [p for p, _ in groups[0]] == [7] and [p for p, _ in groups[1]] == [8]


@given(st.dictionaries(st.integers(0, 20), st.integers(1, 300), min_size=1, max_size=12),
       st.integers(1, 400), st.integers(1, 200), st.integers(1, 8))
def test_every_due_entry_goes_into_exactly_one_statement_of_distinct_partitions(
        partitions: dict[int, int], batch_size: int, floor: int, slots: int) -> None:
    due = entries(partitions, T0.timestamp())
    groups = plan_herd(due, batch_size, floor, slots)
    taken = [it for g in groups for _, chunk in g for it in chunk]
    assert Counter(taken) == Counter(due)
    cap = min(batch_size, max(floor, -(-len(due) // slots)))
    for g in groups:
        assert len({p for p, _ in g}) == len(g), "a partition twice in one statement"
        assert all(len(chunk) <= batch_size and all(it[0] == p for it in chunk) for p, chunk in g)
        assert len(g) == 1 or sum(len(c) for _, c in g) <= cap


# ------------------------------------------------------------------ plan_batch


def test_plain_ticks_and_one_offs_go_as_columns_for_the_one_statement_path() -> None:
    clock, cache = FakeClock(T0.timestamp()), ScheduleCache()
    a, _ = schedule(cache, 5)
    b, _ = schedule(cache, 5, cron="*/5 * * * *", jitter_s=30, version=8)
    job = uuid.uuid4()
    tick = T0.timestamp()
    chunk: list[Item] = [(5, "s", a.id, tick), (5, "o", job, tick + 0.5), (5, "s", b.id, tick)]
    clock.advance(0.25)
    params, nexts = plan_batch(5, 41, chunk, cache.get, clock.now())
    assert (params.partition, params.epoch, params.now) == (5, 41, T0 + timedelta(seconds=0.25))
    assert params.only_plain and not params.ticks and not params.advances
    plain = params.plain
    assert plain is not None
    assert plain.schedule_ids == [a.id, b.id] and plain.ticks == [tick, tick] and plain.oneoffs == [job]
    assert plain.run_ats == [tick, b.run_at(tick)] and tick < b.run_at(tick) < tick + 30
    assert plain.nexts == [tick + MINUTE, tick + 5 * MINUTE] and plain.versions == [a.version, 8]
    assert nexts == {a.id: (a, tick + MINUTE), b.id: (b, tick + 5 * MINUTE)}


def test_a_policed_tick_is_a_record_that_moves_its_cursor_only_from_itself() -> None:
    cache = ScheduleCache()
    info, _ = schedule(cache, 2, overlap="forbid", version=4)
    params, nexts = plan_batch(2, 9, [(2, "s", info.id, T0.timestamp())], cache.get, T0)
    assert not params.only_plain
    assert params.ticks == [Tick(info.id, T0, T0, version=4, cursor=T0)]
    assert params.advances == [ScheduleAdvance(info.id, T0 + timedelta(minutes=1), T0, 4, cursor=T0)]
    assert params.plain is not None and params.plain.schedule_ids == []
    assert nexts == {info.id: (info, T0.timestamp() + MINUTE)}


def test_a_schedule_gone_since_it_was_loaded_is_left_out() -> None:
    cache = ScheduleCache()
    kept, _ = schedule(cache, 1)
    gone, _ = schedule(cache, 1)
    cache.forget(gone.id)  # deleted or paused since it was armed
    params, nexts = plan_batch(1, 1, [(1, "s", gone.id, T0.timestamp()), (1, "s", kept.id, T0.timestamp())],
                               cache.get, T0)
    assert params.plain is not None and params.plain.schedule_ids == [kept.id]
    assert list(nexts) == [kept.id]


# ------------------------------------------------------------------ plan_misfires


def test_run_once_after_an_outage_fires_the_latest_missed_tick_and_records_the_rest() -> None:
    clock, cache = FakeClock(T0.timestamp()), ScheduleCache()
    info, row = schedule(cache, 3, misfire="run_once", version=2)
    clock.advance(5 * MINUTE + 30)  # down for ticks 00:00 .. 00:05; 00:06 is not due yet
    cutoff = clock.now() - timedelta(seconds=10)
    params, nexts = plan_misfires(3, 7, [(info, row)], cutoff, clock.now())
    ticks = [T0 + timedelta(minutes=m) for m in range(6)]
    assert (params.partition, params.epoch, params.now) == (3, 7, clock.now())
    fired = [t for t in params.ticks if t.state == "queued"]
    skipped = [t for t in params.ticks if t.state == "skipped"]
    assert [t.scheduled_for for t in fired] == [ticks[-1]] and fired[0].trigger == "catch_up"
    assert [t.scheduled_for for t in skipped] == ticks[:-1]
    assert all(t.cursor == T0 and t.version == 2 for t in params.ticks), "every record names the cursor it began at"
    assert params.advances == [ScheduleAdvance(info.id, T0 + timedelta(minutes=6), ticks[-1], 2, cursor=T0)]
    [event] = params.events
    assert (event.kind, event.schedule_id, event.data["skipped"], event.data["fired"]) == (
        "misfire_skipped", info.id, 5, 1)
    assert nexts == [(info, (T0 + timedelta(minutes=6)).timestamp())]


def test_a_tick_no_longer_overdue_at_planning_is_armed_not_recorded() -> None:
    cache = ScheduleCache()
    info, row = schedule(cache, 3, misfire="run_once")
    params, nexts = plan_misfires(3, 7, [(info, row)], cutoff=T0 - timedelta(seconds=1), now=T0)
    assert not params.ticks and not params.advances and not params.events
    assert nexts == [(info, T0.timestamp())]
