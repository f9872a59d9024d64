"""Retention's storage port (retention.sql): prune finished executions, one fenced batch at a time.

Each prune method is ONE statement, its own short transaction, fenced in the statement as the
fire path is (it share-locks the partition row at the caller's epoch; StaleEpoch when the partition
moved on, nothing deleted), and deletes at most `limit` rows: one round trip, no lock held for
long, small enough to run between two fires of the node (cluster/retention/pruner.py). Finding
prunable rows walks `executions_finished` (partition, finished time, id) from a keyset cursor the
caller keeps; a batch never rereads what the previous one passed over.

The windows are the caller's (cluster/retention holds the policy); the one precedence rule
(schedule's own window, else the job type's, else the cluster default; None: kept forever by
time) is in the SQL, applied per row. Deleting an execution never makes its tick due again: the
due cursor (`schedule_due.next_run_at`, a compare-and-set) says what has fired. What went is
recorded per schedule (`execution_pruned.pruned_through`) and per tick (`execution_pruned_ticks`,
one row per schedule and batch) for explain, so that a tick never fired stays told apart from a
tick whose run was pruned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwheel.storage.api import Row, row, rows
from cronwheel.storage.db import Database, stale_epoch


@dataclass(frozen=True, slots=True)
class TypeWindows:
    """A job type's own windows (None: kept forever by time)."""

    job_type: str
    succeeded_s: float | None
    failed_s: float | None


@dataclass(frozen=True, slots=True)
class Windows:
    """How long finished runs are kept, by class: `succeeded_s` for succeeded, skipped and
    cancelled runs, `failed_s` for failed and dead ones (None: forever), per job type."""

    succeeded_s: float | None
    failed_s: float | None
    by_type: tuple[TypeWindows, ...] = ()

    def shortest_s(self) -> float | None:
        """The shortest window the node knows of (schedules' own are added by the query)."""
        values = [v for v in (self.succeeded_s, self.failed_s) if v is not None]
        values += [v for t in self.by_type for v in (t.succeeded_s, t.failed_s) if v is not None]
        return min(values) if values else None


@dataclass(frozen=True, slots=True)
class ExpiredCursor:
    """Where the age pass of a partition stands: after (finished time, id). START: the oldest."""

    at: datetime | None = None
    id: uuid.UUID | None = None


START = ExpiredCursor()


@dataclass(frozen=True, slots=True)
class DuePasses:
    """Which passes have anything to look at in a partition now."""

    age: bool  # a finished execution older than the partition's horizon
    keep_last: bool  # a schedule with keep_last


@dataclass(frozen=True, slots=True)
class PruneExpiredParams:
    partition: int
    epoch: int
    windows: Windows
    now: datetime
    after: ExpiredCursor = START
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class PruneExpiredResult:
    scanned: int
    deleted: int
    next: ExpiredCursor  # START again once the pass reached the horizon (scanned < limit)


@dataclass(frozen=True, slots=True)
class PruneKeepLastParams:
    partition: int
    epoch: int
    now: datetime
    after_id: uuid.UUID | None = None
    schedules: int = 200
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class PruneKeepLastResult:
    schedules: int
    deleted: int
    next_after_id: uuid.UUID | None  # where the next batch starts (None: the first schedule)
    done: bool  # the pass reached the partition's last keep_last schedule with nothing left on its page


@dataclass(frozen=True, slots=True)
class PrunedMark:
    through: datetime  # the latest tick of the schedule whose execution was pruned
    pruned: int
    # Ticks up to here may have been pruned without a record of which (pruned before migration
    # 0020 recorded them, `pruned_ticks`); None: every pruned tick is recorded.
    untracked_through: datetime | None = None


class RetentionPort:
    """Task-safe (stateless); the cursors are the caller's."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def due_partitions(self, partitions: list[int], windows: Windows, now: datetime) -> dict[int, DuePasses]:
        """Those of `partitions` with anything for a pass to look at now, and which pass
        (`prune_due_partitions`); a partition with nothing is left out."""
        if not partitions:
            return {}
        async with self.db.connection() as conn:
            got = await rows(conn, "prune_due_partitions",
                             {"partitions": partitions, "now": now, "shortest_s": windows.shortest_s()})
        return {int(r["partition"]): DuePasses(age=bool(r["age"]), keep_last=bool(r["keep_last"])) for r in got}

    async def prune_expired(self, p: PruneExpiredParams) -> PruneExpiredResult:
        w = p.windows
        params = {
            "partition": p.partition, "epoch": p.epoch, "now": p.now, "limit": p.limit,
            "shortest_s": w.shortest_s(), "succeeded_s": w.succeeded_s, "failed_s": w.failed_s,
            "types": [t.job_type for t in w.by_type], "types_succeeded_s": [t.succeeded_s for t in w.by_type],
            "types_failed_s": [t.failed_s for t in w.by_type], "after_at": p.after.at, "after_id": p.after.id,
        }
        r = await self._fenced_batch("prune_expired", p.partition, p.epoch, params)
        deleted = int(r["deleted"])
        done = r["scanned"] < p.limit or r["last_at"] is None
        nxt = START if done else ExpiredCursor(r["last_at"], r["last_id"])
        return PruneExpiredResult(int(r["scanned"]), deleted, nxt)

    async def prune_keep_last(self, p: PruneKeepLastParams) -> PruneKeepLastResult:
        params = {"partition": p.partition, "epoch": p.epoch, "now": p.now, "after_id": p.after_id,
                  "schedules": p.schedules, "limit": p.limit}
        r = await self._fenced_batch("prune_keep_last", p.partition, p.epoch, params)
        deleted = int(r["deleted"])
        if r["doomed"] >= p.limit:  # the page may hold more: the same page again (what went is gone)
            return PruneKeepLastResult(int(r["schedules"]), deleted, p.after_id, done=False)
        if r["schedules"] < p.schedules:
            return PruneKeepLastResult(int(r["schedules"]), deleted, None, done=True)
        return PruneKeepLastResult(int(r["schedules"]), deleted, r["last_id"], done=False)

    async def _fenced_batch(self, name: str, partition: int, epoch: int, params: dict[str, Any]) -> Row:
        """One batch of a pass: ONE statement, its own transaction, that share-locks the partition
        row at `epoch` and deletes through cronwheel_prune_delete (the one write of both passes);
        StaleEpoch (nothing deleted) when the partition moved on."""
        async with self.db.connection() as conn:
            r = await row(conn, name, params)
            assert r is not None
            if not r["fenced"]:
                raise await stale_epoch(conn, partition, epoch)
        return r

    async def pruned_through(self, schedule_id: uuid.UUID) -> PrunedMark | None:
        async with self.db.connection() as conn:
            r = await row(conn, "pruned_through", {"schedule_id": schedule_id})
        return PrunedMark(r["pruned_through"], int(r["pruned"]), r["untracked_through"]) if r else None

    async def pruned_ticks(self, schedule_id: uuid.UUID, start: datetime, end: datetime) -> frozenset[datetime]:
        """The ticks in [start, end] of the schedule whose executions retention removed (explain:
        a tick left without a row and not among these was never fired)."""
        async with self.db.connection() as conn:
            got = await rows(conn, "pruned_ticks", {"schedule_id": schedule_id, "start": start, "end": end})
        return frozenset(r["tick"] for r in got)
