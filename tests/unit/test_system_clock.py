"""SystemClock.wait, the real clock's wait on an event (every waiting lease call's hold): a
cancellation is never lost."""

from __future__ import annotations

import asyncio

import pytest

from cronwheel.clock import SystemClock


@pytest.mark.parametrize("turns", range(6))
def test_a_wait_cancelled_as_its_event_is_set_ends_cancelled(turns: int) -> None:
    """The node cancels a waiting call's task when its client goes away. When that came just
    after the call's event was set (a mass cancellation: the oldest call leaves and promotes the
    next, whose cancellation follows), asyncio.wait_for (Python 3.11) returned True and dropped
    the cancellation: the call went back to waiting, held its place in its tenant's cap for the
    rest of its wait_timeout (bench.long_polls: 999 held of 1,000). `turns`: loop turns between
    the set and the cancel (each interleaving)."""

    async def scenario() -> None:
        event = asyncio.Event()
        task = asyncio.create_task(SystemClock().wait(event, 30.0))
        await asyncio.sleep(0)  # the task waits
        event.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        if task.done():  # it returned before the cancel: nothing to lose
            assert task.result() is True
            return
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
