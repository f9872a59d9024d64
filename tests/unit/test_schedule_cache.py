"""ScheduleCache: the firer's parsed schedules, indexed by id and by partition."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from cronwheel.cluster.firing.schedule_cache import ScheduleCache
from cronwheel.storage import DueSchedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(sid: uuid.UUID, cron: str = "* * * * *") -> DueSchedule:
    return DueSchedule(sid, cron, "UTC", "shift", None, T0, None, "skip", 10, "allow", 0, 1)


def filled(per_partition: dict[int, int]) -> tuple[ScheduleCache, dict[int, list[uuid.UUID]]]:
    cache = ScheduleCache()
    ids: dict[int, list[uuid.UUID]] = {}
    for p, n in per_partition.items():
        ids[p] = [uuid.uuid4() for _ in range(n)]
        for sid in ids[p]:
            assert cache.put(p, row(sid)) is not None
    return cache, ids


def test_dropping_a_partition_forgets_its_schedules_and_only_those() -> None:
    cache, ids = filled({1: 3, 2: 2})
    cache.drop_partition(1)
    assert all(cache.get(s) is None for s in ids[1])
    assert all(cache.get(s) is not None for s in ids[2])
    assert (len(cache), cache.partition_size(1), cache.partition_size(2)) == (2, 0, 2)


def test_dropping_every_partition_empties_the_cache() -> None:
    cache, _ = filled({p: 5 for p in range(64)})
    for p in range(64):
        cache.drop_partition(p)
    assert len(cache) == 0 and all(cache.partition_size(p) == 0 for p in range(64))


def test_a_forgotten_schedule_leaves_the_index_and_a_reloaded_one_is_indexed_once() -> None:
    cache, ids = filled({1: 2})
    gone, kept = ids[1]
    cache.forget(gone)
    assert cache.partition_size(1) == 1
    cache.put(1, row(kept))  # reloaded after a change: still one entry
    assert (cache.partition_size(1), len(cache)) == (1, 1)
    cache.drop_partition(1)
    assert cache.get(kept) is None and len(cache) == 0


def test_a_row_edited_into_nonsense_is_skipped_and_forgets_the_old_entry() -> None:
    cache, ids = filled({1: 1})
    (sid,) = ids[1]
    assert cache.put(1, row(sid, cron="not a cron")) is None
    assert cache.get(sid) is None and cache.partition_size(1) == 0
