"""Group commit for SubmitJob: concurrent calls on one node share one transaction.

A caller hands `submit()` a job it has already validated (`runs.prepare_job`: a bad call fails
alone, before it joins a group). With no group being written, a call is written at once (a lone
caller pays no window); while groups are being written, the batcher collects calls until a
whole `quiet_s` (2 ms) passes with none arriving, `window_s` (10 ms) has passed, or `max_batch`
wait, whichever comes first. So a busy node, whose calls keep arriving, writes them in large
groups and pays the per-transaction cost (about 2.6 ms of the node's CPU) once for many callers,
while a second caller of a quiet node waits at most a few ms. (A fixed 1 ms window gave 64
closed-loop callers groups of 1-4 and 660 jobs/s; this rule about 1,500 jobs/s, see docs/perf-log.md.)
Then it writes them with `runs.write_jobs`, the same single insert
statement as SubmitJobs, and answers each caller with its own result or its own error (a repeated idempotency
key is deduplicated for that caller alone, a tenant over its daily quota fails only its calls).
An error of the transaction itself (database down) fails every call of that group, none of which
was stored. A caller is answered only after its group committed: acknowledged = durable.

Up to `max_in_flight` groups are written at once (each on its own pooled connection), so a group
forms while the previous ones commit. Time is the injected clock's (the window). One batcher per
node, used from the node's event loop; not thread-safe. `close()` ends the runner (groups already
taken are finished; calls still waiting fail with Unavailable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from cronwheel.clock import Clock
from cronwheel.cluster.commands.runs import Submitted, write_jobs
from cronwheel.errors import Unavailable
from cronwheel.storage import PgStore
from cronwheel.storage.executions import SubmittedJob

log = logging.getLogger("cronwheel.cluster.submit_batcher")

_Waiting = tuple[SubmittedJob, "asyncio.Future[Submitted]"]


class SubmitBatcher:
    def __init__(self, store: PgStore, clock: Clock, window_s: float = 0.01, max_batch: int = 512,
                 max_in_flight: int = 2, quiet_s: float = 0.002) -> None:
        if not 0 <= window_s <= 1:
            raise ValueError(f"window_s must be in 0..1, got {window_s}")
        if not 0 <= quiet_s <= window_s:
            raise ValueError(f"quiet_s must be in 0..window_s, got {quiet_s}")
        if not 1 <= max_batch <= 10_000:
            raise ValueError(f"max_batch must be in 1..10000, got {max_batch}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.store = store
        self.clock = clock
        self.window_s = window_s
        self.quiet_s = quiet_s
        self.max_batch = max_batch
        self._slots = asyncio.Semaphore(max_in_flight)
        self._waiting: list[_Waiting] = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()  # max_batch calls wait: stop collecting
        self._runner: asyncio.Task[None] | None = None
        self._groups: set[asyncio.Task[None]] = set()
        self._closed = False
        self._in_flight = 0  # groups being written
        self.groups_written = 0  # observability and tests: how many transactions
        self.largest_group = 0

    async def submit(self, job: SubmittedJob) -> Submitted:
        """(execution, deduplicated) once the job's group committed, or the job's own error."""
        if self._closed:
            raise Unavailable("the node is shutting down")
        fut: asyncio.Future[Submitted] = asyncio.get_running_loop().create_future()
        self._waiting.append((job, fut))
        self._arrived.set()
        if len(self._waiting) >= self.max_batch:
            self._full.set()
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="submit-batcher")
        # The group is written whether or not this caller still waits (it may have been
        # cancelled): shield so a cancelled call does not leave a future nobody resolves.
        return await asyncio.shield(fut)

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            if self._in_flight and self.window_s > 0:
                await self._collect()
            await self._slots.acquire()
            group, self._waiting = self._waiting[:self.max_batch], self._waiting[self.max_batch:]
            if not self._waiting:
                self._arrived.clear()
            if len(self._waiting) < self.max_batch:
                self._full.clear()
            if not group:
                self._slots.release()
                continue
            self._in_flight += 1
            task = asyncio.create_task(self._write(group), name="submit-group")
            self._groups.add(task)
            task.add_done_callback(self._groups.discard)

    async def _collect(self) -> None:
        """While a group is in flight: let calls join until a whole `quiet_s` period passes with
        none arriving (so a group goes quiet_s to 2 x quiet_s after its last call), `window_s`
        has passed, or max_batch wait."""
        deadline = self.clock.monotonic() + self.window_s
        while len(self._waiting) < self.max_batch:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return
            n = len(self._waiting)
            if await self.clock.wait(self._full, min(self.quiet_s, left)) or len(self._waiting) == n:
                return

    async def _write(self, group: list[_Waiting]) -> None:
        try:
            results = await write_jobs(self.store, [job for job, _ in group], self.clock.now(), all_or_nothing=False)
        except Exception as exc:  # noqa: BLE001 - the group's transaction failed: every caller gets it
            for _, fut in group:
                if not fut.done():
                    fut.set_exception(exc)
            return
        finally:
            self._in_flight -= 1  # before any caller is answered: its next call must not wait a window
            self._slots.release()
        self.groups_written += 1
        self.largest_group = max(self.largest_group, len(group))
        for (_, fut), got in zip(group, results, strict=True):
            if fut.done():
                continue
            if isinstance(got, Exception):
                fut.set_exception(got)
            else:
                fut.set_result(got)

    async def close(self) -> None:
        self._closed = True
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        if self._groups:
            await asyncio.gather(*self._groups, return_exceptions=True)
        waiting, self._waiting = self._waiting, []
        for _, fut in waiting:
            if not fut.done():
                fut.set_exception(Unavailable("the node is shutting down"))
