"""What the firing path keeps per loaded schedule: its parsed cron (shared between schedules
with the same expression, zone and policy unless `H` fields make it per-id) and its policies.

Memory matters at a million schedules: SchedInfo is slotted, and CronSchedule objects are
shared through a bounded parse cache.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cronwheel.cron import CronSchedule, DstPolicy, jitter_offset_s, parse_dst_policy, parse_schedule, uses_hash
from cronwheel.errors import InvalidArgument


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


class ScheduleCache:
    """schedule id -> SchedInfo for the schedules in the wheel. Not task-safe (firer only)."""

    def __init__(self) -> None:
        self._by_id: dict[uuid.UUID, SchedInfo] = {}

    def put(self, partition: int, row: dict[str, Any]) -> SchedInfo | None:
        try:
            cron = cron_for(row["cron"], row["timezone"], row["dst_gap"], row["dst_repeated"], row["id"])
        except InvalidArgument:
            # Validated at the API; a row edited by hand into nonsense is skipped, not fatal.
            return None
        info = SchedInfo(row["id"], partition, cron, float(row["jitter_s"] or 0), row["misfire_policy"],
                         int(row["max_catch_up"]), row["overlap_policy"], int(row["version"]))
        self._by_id[info.id] = info
        return info

    def get(self, sid: uuid.UUID) -> SchedInfo | None:
        return self._by_id.get(sid)

    def forget(self, sid: uuid.UUID) -> None:
        self._by_id.pop(sid, None)

    def drop_partition(self, partition: int) -> None:
        for sid in [s for s, i in self._by_id.items() if i.partition == partition]:
            del self._by_id[sid]

    def __len__(self) -> int:
        return len(self._by_id)
