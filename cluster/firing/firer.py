"""The firing path: preload owned partitions into the timing wheel, fire due entries in fenced
batches, keep the horizon extended, and follow changes. `Firer` is the shell that wires the
layers, each a module of its own:

    planning    pure: which due entries go into which statement (herd grouping), the
                FireBatchParams of a partition's chunk, the misfire records (tested on plain values)
    loading     preload, horizon extender, reload / add_oneoffs / resync, misfire application
    writing     the three write outcomes (WriteOutcome), stale epochs, the multi-partition statement
    announcing  stats, fire-lag metrics, trace spans, the NOTIFY announcer
    state       the partitions, the wheel, the schedule cache; arming the wheel
    firer       (here) ownership hooks, run(), the fire loop and its dispatch of planned statements

    loop    -> sleep until wheel.next_deadline() (or a wake-up), advance, cut what is due into
               per-partition chunks and deal them into statements (`planning.plan_herd`): the
               plain ticks of many partitions go as ONE statement (one transaction, one commit),
               each tick fenced by its own partition's epoch, so a whole second's herd is one or a
               few commits, not one per partition; a partition's other work (one-offs, overlap
               policies) is ONE fenced transaction of its own that inserts the executions (ON
               CONFLICT DO NOTHING), advances next_run_at, queues one-offs, applies overlap
               decisions; after commit the next tick goes into the wheel
    lose p  -> drop its timers at once; release p -> finish its in-flight batch, then drop

Time comes from the injected Clock only (waits, backoff, the extender), so a FakeClock test
drives the whole loop. Background work (preloads, the NOTIFY announcer) runs in the TaskGroup
that `run()` owns: expected errors (Unavailable) are handled where they occur; any other error
ends the group and takes the node down.

Not thread-safe: everything runs on the node's event loop. The wheel is touched only by the
firer's layers. Every decision about ticks is made by cronwheel.cron (pure); the firer executes
them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable

from cronwheel.cluster.firing.config import FiringConfig
from cronwheel.cluster.firing.loading import Loading
from cronwheel.cluster.firing.planning import Item, plan_batch, plan_herd, utc
from cronwheel.cluster.firing.state import FirerSignals, FireStats, PartitionState
from cronwheel.cluster.firing.writing import Batch, WriteOutcome

# Imported from here by the node, the CLI, bench and tests: the firer's public names.
__all__ = ["FireStats", "Firer", "FirerSignals", "FiringConfig", "Item", "PartitionState", "WriteOutcome", "utc"]


class Firer(Loading):
    """The firing shell: ownership hooks, `run()` and the fire loop over the layers it inherits
    (state <- announcing <- writing <- loading). Not thread-safe: the node's event loop only."""

    async def partition_gained(self, partition: int, epoch: int) -> None:
        st = PartitionState(epoch=epoch, loaded_until=self.clock.now_ts() - 1e9)
        self.parts[partition] = st
        # Loaded in the background, retried while PostgreSQL is away: the coordinator is not held
        # up, and nothing fires for the partition before its first load.
        self._spawn(lambda: self._initial_load(partition, st), f"preload-{partition}")

    async def partition_releasing(self, partition: int, epoch: int) -> None:
        st = self.parts.get(partition)
        if st is None:
            return
        async with st.lock:  # the in-flight batch finishes first
            self._drop(partition)

    def partition_lost(self, partition: int, epoch: int, reason: str) -> None:
        self._drop(partition)

    async def run(self) -> None:
        """The fire loop, the horizon extender and every background task of the firer, in one
        TaskGroup: a failure of any of them ends run() (and the node) instead of vanishing."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                pending, self._pending = self._pending, []
                for start, name in pending:
                    tg.create_task(start(), name=name)
                tg.create_task(self._fire_loop(), name="fire-loop")
                tg.create_task(self._extend_loop(), name="horizon-extender")
        finally:
            self._tg = None

    async def _fire_loop(self) -> None:
        tick = self.config.tick_s
        while True:
            self._wake.clear()
            due = self.wheel.advance(max(self.clock.now_ts(), self.wheel.now))
            if due:
                await self._fire_due(due)
                continue
            nd = self.wheel.next_deadline()
            now = self.clock.now_ts()
            ahead = self.config.prepare_ahead_s if nd is not None and nd == int(nd) else 0.0
            if ahead and nd is not None and nd - now <= ahead:
                await self._fire_due(self.wheel.advance(nd), at=nd)
                # Whatever came of it, the loop goes on at the instant, not before: the wheel
                # stands at `at` now, and what was inserted meanwhile at or before it comes with
                # the next advance.
                await self._until(nd)
                continue
            delay = 1.0 if nd is None else min(1.0, max(nd - now - ahead, tick / 2))
            self._sleeping_until = now + delay
            rested, self._resting = self._resting, asyncio.Event()
            rested.set()
            await self.clock.wait(self._wake, delay)
            self._sleeping_until = float("-inf")  # awake: the loop advances the wheel next anyway

    def quiet_for(self) -> float:
        """Seconds from now until the fire loop next wakes (0 while it fires): how long a
        background writer may hold the database without meeting a fire statement of this node.
        A new job due earlier than that wakes the loop sooner."""
        return max(0.0, self._sleeping_until - self.clock.now_ts())

    async def next_rest(self, timeout_s: float) -> bool:
        """Wait until the fire loop next goes to sleep (its fire done), at most timeout_s."""
        return await self.clock.wait(self._resting, timeout_s)

    async def _fire_due(self, due: list[Item], at: float | None = None) -> None:
        """Everything due at one instant, across partitions, as the statements `plan_herd` deals it
        into; with `at`, an instant prepared ahead: the statements are built now and sent at `at`,
        never before."""
        c = self.config
        groups = plan_herd(due, c.batch_size, c.herd_ticks_per_statement, c.parallel_batches)
        await asyncio.gather(*(self._fire_group(g, at) for g in groups))

    async def _fire_group(self, group: list[tuple[int, list[Item]]], at: float | None = None) -> None:
        """One statement's worth of chunks. A partition's lock is taken only if it is free right
        now (a preload or reload holding it must not hold up the other partitions' ticks); a
        busy partition's chunk goes on its own once its lock is free (`_fire_partition`). Taking
        only free locks, never waiting while holding one, cannot deadlock. The plain batches go
        as one statement; each batch with a policed tick then goes on its own, in the background,
        its partition's lock held from its preparation to its write (released by
        `_write_policed`): one waiting on a row lock holds up no other partition, nor the loop."""
        deferred: list[tuple[int, list[Item]]] = []
        policed: list[Batch] = []
        async with self._sem:
            held: list[tuple[int, PartitionState, list[Item]]] = []
            try:
                for p, items in group:
                    st = self.parts.get(p)
                    if st is None:
                        continue
                    if st.lock.locked():
                        deferred.append((p, items))
                        continue
                    await st.lock.acquire()
                    held.append((p, st, items))
                batches: list[Batch] = []
                for p, st, items in held:
                    if self.parts.get(p) is not st:
                        continue
                    for it in items:  # advance() returned it, so it is the live handle for its id
                        st.handles.pop(it[2], None)
                    batches.append(self._prepare(p, st, items))
                policed = [b for b in batches if not b.params.only_plain]
                await self._write_plain_many([b for b in batches if b.params.only_plain], at)
            except BaseException:
                policed = []
                raise
            finally:
                handed = {b.p for b in policed}  # released by _write_policed
                for p, st, _items in held:
                    if p not in handed:
                        st.lock.release()
        # Not awaited by the fire loop (which waits for the plain statement only): a policed
        # write can wait on a row lock (a session stopped mid-transaction: the chaos failpoint
        # `stall-completion`), and a deferred chunk on its partition's lock. Each holds up only
        # its own partition, whose later chunks queue behind it on that lock, in order.
        later = [self._write_policed(b, at) for b in policed] + [
            self._fire_partition(p, items, at) for p, items in deferred]
        if self._tg is None:  # not under run()
            await asyncio.gather(*later)
            return
        for coro in later:
            self._task(coro, "fire-later")  # None once the firer is stopping: the coroutine is closed

    async def _write_policed(self, b: Batch, at: float | None) -> None:
        """A batch with a policed tick (the general fire path), whose partition's lock the caller
        took and hands over: released here, once the batch is written or given up."""
        try:
            async with self._sem:
                await self._until(at)
                params = b.params if at is None else dataclasses.replace(b.params, now=self.clock.now())
                self._after(b, await self._write(b.p, b.st, params))
        finally:
            b.st.lock.release()

    async def _fire_partition(self, p: int, items: list[Item], at: float | None = None) -> None:
        await self._until(at)
        st = self.parts.get(p)
        if st is None:
            return
        for i in range(0, len(items), self.config.batch_size):
            chunk = items[i:i + self.config.batch_size]
            async with st.lock, self._sem:  # lock, then slot, as _write_policed: no cycle
                if self.parts.get(p) is not st:
                    return
                for it in chunk:  # advance() returned it, so it is the live handle for its id
                    st.handles.pop(it[2], None)
                b = self._prepare(p, st, chunk)
                if b.params.only_plain:
                    await self._write_plain_many([b])
                else:
                    self._after(b, await self._write(p, st, b.params))

    def _prepare(self, p: int, st: PartitionState, chunk: list[Item]) -> Batch:
        params, nexts = plan_batch(p, st.epoch, chunk, self.schedules.get, self.clock.now())
        return Batch(p, st, chunk, params, nexts)

    def wheel_size(self) -> int:
        return len(self.wheel)

    def owned(self) -> Iterable[int]:
        return self.parts.keys()
