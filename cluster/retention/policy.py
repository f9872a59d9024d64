"""Retention policy values: the limits a schedule's settings must meet (the API's validation and
the node config both call these) and the node's config (cluster default and job-type windows).
Pure: no I/O, no clock."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cronwheel.errors import InvalidArgument
from cronwheel.storage.retention import TypeWindows, Windows

DAY_S = 86400.0
DEFAULT_SUCCEEDED_S = 7 * DAY_S  # succeeded, skipped, cancelled
DEFAULT_FAILED_S = 30 * DAY_S  # failed, dead
KEEP_FOR_MIN_S = 60.0
KEEP_FOR_MAX_S = 3650 * DAY_S
KEEP_LAST_MAX = 100_000

_DUR = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S, None: 1.0}


def keep_for(fieldname: str, value: float | None) -> float | None:
    """A retention window in seconds (None: inherit, or forever at the cluster level)."""
    if value is None:
        return None
    if not KEEP_FOR_MIN_S <= value <= KEEP_FOR_MAX_S:
        raise InvalidArgument(fieldname, f"must be in {KEEP_FOR_MIN_S:g}..{KEEP_FOR_MAX_S:g} seconds "
                                         f"(1 minute to 10 years), got {value:g}")
    return float(value)


def keep_last(fieldname: str, value: int | None) -> int | None:
    """How many finished runs a schedule keeps at least (None: no count limit)."""
    if value is None:
        return None
    if not 0 <= value <= KEEP_LAST_MAX:
        raise InvalidArgument(fieldname, f"must be in 0..{KEEP_LAST_MAX}, got {value}")
    return int(value)


def parse_window(fieldname: str, text: str) -> float | None:
    """`7d`, `12h`, `90m`, `3600` (seconds) or `forever` (None)."""
    t = text.strip().lower()
    if t == "forever":
        return None
    m = _DUR.match(t)
    if not m:
        raise InvalidArgument(fieldname, f"expected a duration like 90m, 12h, 7d or 'forever', got {text!r}")
    return keep_for(fieldname, float(m.group(1)) * _UNIT_S[m.group(2)])


def parse_type_windows(fieldname: str, text: str) -> TypeWindows:
    """`TYPE=SUCCEEDED[,FAILED]`, e.g. `report=2d,14d` (FAILED defaults to SUCCEEDED)."""
    job_type, eq, windows = text.partition("=")
    if not eq or not job_type.strip() or not windows.strip():
        raise InvalidArgument(fieldname, f"expected TYPE=SUCCEEDED[,FAILED] like report=2d,14d, got {text!r}")
    ok, _, failed = windows.partition(",")
    ok_s = parse_window(fieldname, ok)
    return TypeWindows(job_type.strip(), ok_s, parse_window(fieldname, failed) if failed else ok_s)


MAX_BATCH_ROWS = 100_000  # --retention-batch's upper bound (one prune transaction)
MIN_BATCH_ROWS = 20  # a batch sized to a rest of the fire loop never has fewer rows (pruning never starves)


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """The node's retention: cluster default windows (None: kept forever by time), job types'
    own windows, and how the pruner paces itself."""

    succeeded_s: float | None = DEFAULT_SUCCEEDED_S
    failed_s: float | None = DEFAULT_FAILED_S
    by_type: tuple[TypeWindows, ...] = ()
    enabled: bool = True
    batch_rows: int = 1000  # rows per batch (one short transaction)
    keep_last_schedules: int = 200  # keep_last schedules looked at per batch
    pause_s: float = 0.01  # after a batch that deleted, before the next one waits for a rest of the fire loop
    idle_s: float = 30.0  # between passes once a pass found nothing more to prune
    # Beside a fire loop (the node), a batch starts when the loop goes to rest and is sized, at
    # the rate batches were measured to go, to take at most `gap_share` of that rest (never more
    # than batch_rows, never fewer than MIN_BATCH_ROWS); after `yield_wait_s` without a rest it
    # goes anyway (cluster/retention/pruner.py).
    gap_share: float = 0.8
    yield_wait_s: float = 1.0

    def validate(self) -> RetentionConfig:
        keep_for("--retention-succeeded", self.succeeded_s)
        keep_for("--retention-failed", self.failed_s)
        seen: set[str] = set()
        for t in self.by_type:
            if t.job_type in seen:
                raise InvalidArgument("--retention-job-type", f"job type {t.job_type!r} given twice")
            seen.add(t.job_type)
            keep_for("--retention-job-type", t.succeeded_s)
            keep_for("--retention-job-type", t.failed_s)
        if not 1 <= self.batch_rows <= MAX_BATCH_ROWS:
            raise InvalidArgument("--retention-batch", f"must be in 1..{MAX_BATCH_ROWS}, got {self.batch_rows}")
        if not 1 <= self.keep_last_schedules <= 10_000:
            raise InvalidArgument("keep_last_schedules", f"must be in 1..10000, got {self.keep_last_schedules}")
        if not 0 < self.gap_share <= 1:
            raise InvalidArgument("--retention-gap-share", f"must be in (0, 1], got {self.gap_share:g}")
        if self.yield_wait_s < 0:
            raise InvalidArgument("yield_wait_s", f"must be >= 0, got {self.yield_wait_s:g}")
        if self.pause_s < 0:
            raise InvalidArgument("--retention-pause", f"must be >= 0 seconds, got {self.pause_s:g}")
        if self.idle_s <= 0:
            raise InvalidArgument("--retention-idle", f"must be > 0 seconds, got {self.idle_s:g}")
        return self

    def windows(self) -> Windows:
        return Windows(self.succeeded_s, self.failed_s, self.by_type)
