"""The only module that reads clocks.

Everything else takes time as an argument or receives a `Clock`. `SystemClock` reads the real
clocks; `FakeClock` is advanced by tests and refuses to go backwards (like trio's MockClock).
Wall time is an aware UTC `datetime` or a float of Unix seconds; monotonic time is a float of
seconds that only ever increases and is the only time a lease's trust window is computed on.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall time."""
        ...

    def now_ts(self) -> float:
        """Wall time as Unix seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (lease arithmetic only)."""
        ...

    async def sleep_until_ts(self, deadline_ts: float) -> None:
        """Sleep until wall time `deadline_ts` (returns at once if it has passed)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for `seconds` of this clock's time (a loop's pause between rounds)."""
        ...

    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        """Wait until `event` is set (True) or `timeout_s` of this clock's time passed (False)."""
        ...

    def now_ms(self) -> int:
        """Wall time as whole Unix milliseconds (time-ordered ids)."""
        ...


class SystemClock:
    """The real clocks. Task-safe: it holds no state."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def now_ts(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_until_ts(self, deadline_ts: float) -> None:
        delay = deadline_ts - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result and drops a
        # cancellation that comes once the event is set (a waiting lease call whose client left
        # then held its place until its timeout), and it runs the wait as a task of its own.
        if event.is_set():
            return True
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await event.wait()
        except TimeoutError:
            return False
        return True


class FakeClock:
    """A clock tests move by hand. Wall and monotonic time advance together.

    Not task-safe in the sense that `advance()` must be called from the test; sleepers wake
    on the next advance that passes their deadline.
    """

    def __init__(self, start_ts: float = 1_700_000_000.0, start_monotonic: float = 1000.0) -> None:
        self._ts = start_ts
        self._mono = start_monotonic
        self._waiters: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._ts, UTC)

    def now_ts(self) -> float:
        return self._ts

    def monotonic(self) -> float:
        return self._mono

    def now_ms(self) -> int:
        return int(self._ts * 1000)

    @property
    def sleepers(self) -> int:
        """How many tasks are asleep on this clock (a test advances once they all are)."""
        return sum(1 for _, fut in self._waiters if not fut.done())

    async def until_asleep(self, n: int = 1) -> None:
        """Return once `n` tasks sleep on this clock: a test's signal that the tasks it runs
        reached their waits (and so the next `advance` is the one they wait for)."""
        while self.sleepers < n:
            await asyncio.sleep(0)

    def next_deadline(self) -> float | None:
        """The earliest wall time a sleeper waits for, or None."""
        live = [d for d, fut in self._waiters if not fut.done()]
        return min(live) if live else None

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance({seconds!r}))")
        self._ts += seconds
        self._mono += seconds
        still: list[tuple[float, asyncio.Future[None]]] = []
        for deadline, fut in self._waiters:
            if deadline <= self._ts:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((deadline, fut))
        self._waiters = still

    async def sleep_until_ts(self, deadline_ts: float) -> None:
        if deadline_ts <= self._ts:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((deadline_ts, fut))
        await fut

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until_ts(self._ts + max(seconds, 0.0))

    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        """Set event or fake timeout, whichever comes first; nothing here reads a real clock."""
        if event.is_set():
            return True
        waiter = asyncio.ensure_future(event.wait())
        sleeper = asyncio.ensure_future(self.sleep(timeout_s))
        try:
            await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (waiter, sleeper):
                t.cancel()
        return event.is_set()

    async def jump_to_next(self) -> float | None:
        """Let every runnable task run until all sleep, then advance to the earliest deadline
        (trio's autojump, one step). Returns the new time, or None when nobody sleeps."""
        for _ in range(50):
            await asyncio.sleep(0)
        nd = self.next_deadline()
        if nd is None:
            return None
        self.advance(max(nd - self._ts, 0.0))
        return self._ts


def monotonic() -> float:
    """Module-level monotonic read for shells that hold no Clock (CLI progress, local servers)."""
    return time.monotonic()


def wall_ts() -> float:
    """Module-level wall-clock read for shells that hold no Clock."""
    return time.time()
