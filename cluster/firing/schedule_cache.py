"""What the firing path keeps per loaded schedule: its parsed cron (shared between schedules
with the same expression, zone and policy unless `H` fields make it per-id) and its policies.

Memory matters at a million schedules: SchedInfo is slotted, and CronSchedule objects are
shared through a bounded parse cache.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import lru_cache

from cronwheel.cron import CronSchedule, DstPolicy, jitter_offset_s, parse_dst_policy, parse_schedule, uses_hash
from cronwheel.errors import InvalidArgument
from cronwheel.storage import DueSchedule


@lru_cache(maxsize=65536)
def _parse(cron: str, tz: str, gap: str, repeated: str | None, seed: str) -> CronSchedule:
    dst: DstPolicy = parse_dst_policy({"gap": gap, "repeated": repeated})
    return parse_schedule(cron, tz, dst_policy=dst, schedule_id=seed)


def cron_for(cron: str, tz: str, gap: str, repeated: str | None, schedule_id: uuid.UUID) -> CronSchedule:
    seed = str(schedule_id) if uses_hash(cron) else ""
    return _parse(cron, tz, gap, repeated, seed)


@dataclass(slots=True)
class SchedInfo:
    id: uuid.UUID
    partition: int
    cron: CronSchedule
    jitter_s: float
    misfire: str
    max_catch_up: int
    overlap: str
    version: int

    def run_at(self, tick_ts: float) -> float:
        if not self.jitter_s:
            return tick_ts
        from datetime import UTC, datetime

        return tick_ts + jitter_offset_s(str(self.id), datetime.fromtimestamp(tick_ts, UTC), self.jitter_s)

    def overdue(self, tick_ts: float, cutoff_ts: float) -> bool:
        """Is this tick missed by a load at `cutoff_ts` (now minus the misfire grace)? Late by its
        run time, not by its tick: `cron.last_overdue_tick`'s test, on Unix seconds (a preload
        asks it per schedule)."""
        return self.run_at(tick_ts) < cutoff_ts


class ScheduleCache:
    """schedule id -> SchedInfo for the schedules in the wheel, indexed by partition too, so that
    dropping a partition (a trust lapse drops them all) costs that partition's schedules only,
    not a scan of the whole cache per partition. Not task-safe (firer only)."""

    def __init__(self) -> None:
        self._by_id: dict[uuid.UUID, SchedInfo] = {}
        self._by_partition: dict[int, set[uuid.UUID]] = {}

    def put(self, partition: int, row: DueSchedule) -> SchedInfo | None:
        try:
            cron = cron_for(row.cron, row.timezone, row.dst_gap, row.dst_repeated, row.id)
        except InvalidArgument:
            # Validated at the API; a row edited by hand into nonsense is skipped, not fatal.
            self.forget(row.id)
            return None
        info = SchedInfo(row.id, partition, cron, float(row.jitter_s or 0), row.misfire_policy,
                         int(row.max_catch_up), row.overlap_policy, int(row.version))
        # A schedule's partition is fixed (hash of its id), so a re-put never moves it: one dict
        # store and one set add (UUID hashing is Python code: a preload of 1M pays per hash).
        self._by_id[info.id] = info
        ids = self._by_partition.get(partition)
        if ids is None:
            ids = self._by_partition[partition] = set()
        ids.add(info.id)
        return info

    def get(self, sid: uuid.UUID) -> SchedInfo | None:
        return self._by_id.get(sid)

    def forget(self, sid: uuid.UUID) -> None:
        info = self._by_id.pop(sid, None)
        if info is not None:
            self._unindex(info)

    def _unindex(self, info: SchedInfo) -> None:
        ids = self._by_partition.get(info.partition)
        if ids is not None:
            ids.discard(info.id)
            if not ids:
                del self._by_partition[info.partition]

    def drop_partition(self, partition: int) -> None:
        by_id = self._by_id
        for sid in self._by_partition.pop(partition, ()):
            del by_id[sid]

    def partition_size(self, partition: int) -> int:
        return len(self._by_partition.get(partition, ()))

    def __len__(self) -> int:
        return len(self._by_id)
