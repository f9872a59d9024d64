"""Writing fire batches and their outcomes. A partition's share of a statement has three outcomes
(`WriteOutcome`), its own even when it shares the statement with other partitions: WRITTEN
(committed: arm the next ticks), RETRY (not written, the partition is still ours: PostgreSQL away,
or the lease's trust window lapsed and may come back; re-arm the same entries) and LOST (the
partition is not ours: drop). Only WRITTEN moves anything forward, and the database refuses to
move a schedule's cursor from any tick but the one the batch recorded (storage/firing.py, the fire
guard), so no tick is lost silently whatever the order of trust lapses, keepalives and drops.

A write the database refuses for a stale epoch drops that partition state (and only that one) and
tells the coordinator (`on_stale`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from cronwheel import tracing
from cronwheel.cluster.firing.announcing import Announcing
from cronwheel.cluster.firing.overlap import apply_overlap
from cronwheel.cluster.firing.planning import Item, Nexts
from cronwheel.cluster.firing.state import PartitionState, log
from cronwheel.errors import StaleEpoch, Unavailable
from cronwheel.storage import FireBatchParams
from cronwheel.storage.firing import StagedFire, stage_fire


@dataclass(slots=True)
class Batch:
    """One partition's share of a fire: the entries taken from the wheel, what to write for them,
    and the next tick of each schedule (armed after WRITTEN)."""

    p: int
    st: PartitionState
    chunk: list[Item]
    params: FireBatchParams
    nexts: Nexts


class WriteOutcome(StrEnum):
    """What became of one fire batch (a decision value: the caller acts on it, never guesses)."""

    WRITTEN = "written"  # committed: the next ticks may be armed
    RETRY = "retry"  # not written, partition still ours: re-arm the same entries
    LOST = "lost"  # not written, partition not ours any more: drop the entries



class Writing(Announcing):
    """The firer's write layer. Not thread-safe: the node's event loop only."""

    def _after(self, b: Batch, outcome: WriteOutcome) -> None:
        """Act on a batch's outcome (its signal is already set)."""
        p, st = b.p, b.st
        if outcome is WriteOutcome.LOST:
            return  # the partition is (being) dropped; its next owner loads the cursors as they are
        if outcome is WriteOutcome.RETRY:
            if self.parts.get(p) is st:  # not written: the same entries again shortly
                retry_at = self.clock.now_ts() + self.config.retry_after_s
                for it in b.chunk:
                    self._insert(st, p, it[2], it[3], retry_at, kind=it[1])
            return
        # Arming every schedule's next tick is safe even where the guard refused the write: that
        # tick fires only if the database's cursor has reached it (compare-and-set).
        for ident, (info, nxt) in b.nexts.items():
            if nxt <= st.loaded_until and self.schedules.get(ident) is info:
                self._arm_tick(st, p, info, nxt)

    def _signal(self, outcome: WriteOutcome) -> WriteOutcome:
        {WriteOutcome.WRITTEN: self.signals.written, WriteOutcome.RETRY: self.signals.retry,
         WriteOutcome.LOST: self.signals.lost}[outcome].set()
        return outcome

    async def _write(self, p: int, st: PartitionState, params: FireBatchParams) -> WriteOutcome:
        return self._signal(await self._try_write(p, st, params))

    async def _write_plain_many(self, batches: list[Batch], at: float | None = None) -> None:
        """Plain-only batches of distinct partitions as ONE statement (`fire_plain_many`), each
        fenced by its own partition's epoch; every batch gets its own outcome: a stale partition
        is LOST (and dropped) while the others are WRITTEN. With `at`, the statement is built
        now and sent at `at` (the checks below are made then)."""
        def staged(bs: list[Batch]) -> StagedFire:
            return stage_fire([(b.p, b.st.epoch, b.params.plain) for b in bs if b.params.plain is not None])

        early = None
        if at is not None and batches:
            early = staged(batches)
            await self._until(at)
        ready: list[Batch] = []
        for b in batches:
            refused = self._refused_before_write(b.p, b.st)
            if refused is not None:
                self._after(b, self._signal(refused))
            else:
                ready.append(b)
        if not ready:
            return
        t0 = tracing.ns(self.clock.now_ts()) if self.traced else 0
        try:
            fire = staged(ready) if early is None or [(b.p, b.st.epoch) for b in ready] != [
                (bp, be) for bp, be, _ in early.batches] else early
            res = await self.firing.fire_plain_many(fire, self.clock.now())
        except Unavailable as exc:
            log.warning("fire deferred", extra={"event": "fire_deferred", "partitions": [b.p for b in ready],
                                                "error": str(exc)})
            for b in ready:
                self._after(b, self._signal(WriteOutcome.RETRY if self.parts.get(b.p) is b.st else WriteOutcome.LOST))
            return
        for b in ready:
            r = res[b.p]
            if isinstance(r, StaleEpoch):
                self._stale(b.p, b.st, r)
                self._after(b, self._signal(WriteOutcome.LOST))
            else:
                if self.traced:
                    await self._trace_fired(b.params, r, t0)
                self._written(b.params, r)
                self._after(b, self._signal(WriteOutcome.WRITTEN))

    def _refused_before_write(self, p: int, st: PartitionState) -> WriteOutcome | None:
        """RETRY or LOST when this node must not write for `p` now; None when it may."""
        epoch = self.epoch_if_trusted(p)
        if epoch is None:
            # Trust lapsed (no keepalive answer within the window). Not written; it may come back
            # before the partition is dropped, and then these same entries must fire.
            return WriteOutcome.RETRY if self.parts.get(p) is st else WriteOutcome.LOST
        if epoch != st.epoch:
            return WriteOutcome.LOST  # held under another epoch now: this state is history
        return None

    def _stale(self, p: int, st: PartitionState, exc: StaleEpoch) -> None:
        """The database refused a write of `st.epoch`: drop that state (and only that one)."""
        self.stats.stale_epoch += 1
        if self.metrics is not None:
            self.metrics.stale_epoch.inc()
        log.warning("stale epoch: write refused", extra={"event": "stale_epoch", "partition": p,
                                                         "epoch": st.epoch, "current": exc.current})
        # Only the state this write was made for: a late refusal of an old epoch must not drop
        # the partition this node has since acquired again under a new one.
        if self.parts.get(p) is st:
            self._drop(p)
            self.on_stale(p, st.epoch)

    async def _try_write(self, p: int, st: PartitionState, params: FireBatchParams) -> WriteOutcome:
        refused = self._refused_before_write(p, st)
        if refused is not None:
            return refused
        t0 = tracing.ns(self.clock.now_ts()) if self.traced else 0
        try:
            if params.only_plain:
                assert params.plain is not None
                res = await self.firing.fire_plain(p, st.epoch, params.plain, params.now)
            else:
                policed = list({t.schedule_id for t in params.ticks
                                if self._overlap_of(t.schedule_id) not in (None, "allow")})
                buffers = [s for s in policed if self._overlap_of(s) in ("buffer_one", "buffer_all")]
                res = await self.firing.fire(params, policed, self._decide_overlap, lock=buffers)
        except StaleEpoch as exc:
            self._stale(p, st, exc)
            return WriteOutcome.LOST
        except Unavailable as exc:
            log.warning("fire deferred", extra={"event": "fire_deferred", "partition": p, "error": str(exc)})
            return WriteOutcome.RETRY if self.parts.get(p) is st else WriteOutcome.LOST
        if self.traced:
            await self._trace_fired(params, res, t0)
        self._written(params, res)
        return WriteOutcome.WRITTEN

    def _decide_overlap(self, params: FireBatchParams, counts: dict[uuid.UUID, tuple[int, int]]) -> FireBatchParams:
        """Inside the fire transaction, from the active runs read under the fence (`apply_overlap`)."""
        params, skipped = apply_overlap(params, counts, self._overlap_of)
        self.stats.skipped_overlap += skipped
        return params

    def _overlap_of(self, sid: uuid.UUID) -> str | None:
        info = self.schedules.get(sid)
        return None if info is None else info.overlap
