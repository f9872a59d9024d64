"""Loading owned partitions into the wheel, and following changes.

    gain p  -> load schedules with next_run_at <= horizon and one-off jobs with run_at <= horizon;
               schedules whose run_at (tick + jitter) is older than the misfire grace get their
               misfire policy (one fenced transaction, planned by `planning.plan_misfires`), the
               rest go into the wheel at run_at
    extend  -> every extend_every_s, one read finds the partitions with anything due in
               (loaded_until, now + horizon]; load that window of those, move the others' on
    change  -> `reload(p, kind, id)` re-reads one schedule or job (NOTIFY from the API);
               `add_oneoffs` arms a submit group's jobs with no lookup; `resync` reloads everything

A preload is retried on the injected clock while PostgreSQL is away; nothing fires for a partition
before its first load. A partition's lock is held across each load, so no fire of it interleaves.
"""

from __future__ import annotations

import asyncio
import uuid

from cronwheel.backoff import backoff_s
from cronwheel.cluster.firing.planning import plan_misfires, utc
from cronwheel.cluster.firing.schedule_cache import SchedInfo
from cronwheel.cluster.firing.state import PartitionState, log
from cronwheel.cluster.firing.writing import WriteOutcome, Writing
from cronwheel.errors import Unavailable
from cronwheel.storage import DueSchedule

RETRY_MAX_S = 5.0  # the longest pause between a load's or a misfire write's tries (cronwheel/backoff.py)


class Loading(Writing):
    """The firer's loading layer. Not thread-safe: the node's event loop only."""

    async def _initial_load(self, p: int, st: PartitionState) -> None:
        failures = 0
        while self.parts.get(p) is st:
            try:
                async with st.lock:
                    if self.parts.get(p) is st:
                        await self._load(p, st, self.clock.now_ts() + self.config.horizon_s, full=True)
                self.signals.loaded.set()
                return
            except Unavailable as exc:
                log.warning("preload deferred", extra={"event": "preload_deferred", "partition": p,
                                                       "error": str(exc)})
                failures += 1
                await self.clock.sleep(backoff_s(failures, self.config.retry_after_s, RETRY_MAX_S))

    async def _load(self, p: int, st: PartitionState, horizon: float, full: bool) -> None:
        after = None if full else utc(st.loaded_until)
        misfired: list[tuple[SchedInfo, DueSchedule]] = []
        # Streamed in chunks, yielding between them: a big preload must not starve the lease.
        async for rows in self.firing.due_schedules(p, utc(horizon), after):
            if self.parts.get(p) is not st:
                return
            cutoff = self.clock.now_ts() - self.config.misfire_grace_s
            for r in rows:
                info = self.schedules.put(p, r)
                if info is None or r.next_run_at is None:
                    continue
                tick = r.next_run_at.timestamp()
                if info.overdue(tick, cutoff):
                    misfired.append((info, r))
                else:
                    self._arm_tick(st, p, info, tick)
            await asyncio.sleep(0)
        async for oneoffs in self.firing.due_oneoffs(p, utc(horizon), after):
            if self.parts.get(p) is not st:
                return
            for o in oneoffs:
                ts = o.run_at.timestamp()
                self._arm_oneoff(st, p, o.id, ts)
            await asyncio.sleep(0)
        st.loaded_until = max(st.loaded_until, horizon)
        for i in range(0, len(misfired), self.config.batch_size):
            await self._apply_misfires(p, st, misfired[i:i + self.config.batch_size], self.clock.now_ts())

    async def _apply_misfires(self, p: int, st: PartitionState, misfired: list[tuple[SchedInfo, DueSchedule]],
                              now: float) -> None:
        """Schedules whose tick's run_at passed while nobody owned them (`SchedInfo.overdue`):
        each gets its misfire policy on its overdue ticks (`planning.plan_misfires`), written
        before the next tick is armed."""
        params, nexts = plan_misfires(p, st.epoch, misfired, utc(now - self.config.misfire_grace_s),
                                      self.clock.now())
        failures = 0
        # The misfire records must land before the next tick is armed (and the database refuses
        # to advance the cursor from anything but `first`, so the next tick could not skip them).
        while (outcome := await self._write(p, st, params)) is WriteOutcome.RETRY:
            if self.parts.get(p) is not st:
                return
            failures += 1
            await self.clock.sleep(backoff_s(failures, self.config.retry_after_s, RETRY_MAX_S))
        if outcome is WriteOutcome.WRITTEN and self.parts.get(p) is st:
            for info, nxt in nexts:
                if nxt <= st.loaded_until:
                    self._arm_tick(st, p, info, nxt)

    async def reload(self, p: int, kind: str, ident: uuid.UUID) -> None:
        """A schedule or job changed (created, updated, paused, resumed, deleted, cancelled)."""
        st = self.parts.get(p)
        if st is None:
            return
        async with st.lock:
            h = st.handles.pop(ident, None)
            if h is not None:
                self.wheel.cancel(h)
            if kind == "s":
                self.schedules.forget(ident)
                r = await self.firing.schedule_for_fire(ident)
                if r is None or r.next_run_at is None or self.parts.get(p) is not st:
                    return
                info = self.schedules.put(p, r)
                tick = r.next_run_at.timestamp()
                if info is not None and tick <= st.loaded_until:
                    if info.overdue(tick, self.clock.now_ts() - self.config.misfire_grace_s):
                        await self._apply_misfires(p, st, [(info, r)], self.clock.now_ts())
                    else:
                        self._arm_tick(st, p, info, tick)
            else:
                o = await self.firing.oneoff_for_fire(ident)
                if o is not None and self.parts.get(p) is st and o.run_at.timestamp() <= st.loaded_until:
                    ts = o.run_at.timestamp()
                    self._arm_oneoff(st, p, ident, ts)

    async def add_oneoffs(self, entries: list[tuple[int, uuid.UUID, float]]) -> None:
        """New scheduled one-off jobs (partition, id, run_at) from a submit group's notification:
        armed with no lookup when this node owns the partition and run_at is within what is
        loaded (later ones come with the horizon). A job cancelled meanwhile is refused by the
        fire statement itself (it queues only `scheduled` rows)."""
        by_p: dict[int, list[tuple[uuid.UUID, float]]] = {}
        for p, ident, ts in entries:
            by_p.setdefault(p, []).append((ident, ts))
        for p, items in by_p.items():
            st = self.parts.get(p)
            if st is None:
                continue
            async with st.lock:
                if self.parts.get(p) is not st:
                    continue
                for ident, ts in items:
                    if ts <= st.loaded_until:
                        self._arm_oneoff(st, p, ident, ts)

    async def resync(self) -> None:
        """After a missed notification: reload every owned partition from scratch."""
        for p, st in list(self.parts.items()):
            async with st.lock:
                for h in st.handles.values():
                    self.wheel.cancel(h)
                st.handles.clear()
                self.schedules.drop_partition(p)
                st.loaded_until = self.clock.now_ts() - 1e9
                await self._load(p, st, self.clock.now_ts() + self.config.horizon_s, full=True)

    async def _extend_loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.extend_every_s)
            horizon = self.clock.now_ts() + self.config.horizon_s
            try:
                due = await self._extend_quiet(horizon)
            except Unavailable as exc:
                log.warning("preload deferred", extra={"event": "preload_deferred", "error": str(exc)})
                continue
            for p, st in list(self.parts.items()):
                if p not in due:
                    continue
                try:
                    async with st.lock:
                        if self.parts.get(p) is st:
                            await self._load(p, st, horizon, full=False)
                except Unavailable as exc:
                    log.warning("preload deferred", extra={"event": "preload_deferred", "partition": p,
                                                           "error": str(exc)})
            self.signals.extended.set()

    async def _extend_quiet(self, horizon: float) -> set[int]:
        """Move the window of every owned partition with nothing due in (loaded_until, horizon]
        to `horizon` after one read for all of them; the partitions that do have something are
        returned, to be loaded. A partition's lock is held across the read and the move, so no
        fire, reload or submit of it can commit a due time into the window unseen; only free locks
        are taken (a partition busy with a preload is returned as due: loaded the usual way), so
        this never waits while holding a lock and never holds a partition up behind another."""
        held: list[PartitionState] = []
        busy: set[int] = set()
        try:
            live = []
            for p, st in sorted(self.parts.items()):
                if st.lock.locked():
                    busy.add(p)
                    continue
                await st.lock.acquire()  # free: returns at once
                held.append(st)
                live.append((p, st))
            due = await self.firing.extend_due_partitions([(p, utc(st.loaded_until)) for p, st in live],
                                                          utc(horizon))
            for p, st in live:
                if p not in due and self.parts.get(p) is st:
                    st.loaded_until = max(st.loaded_until, horizon)
            return due | busy
        finally:
            for st in held:
                st.lock.release()
