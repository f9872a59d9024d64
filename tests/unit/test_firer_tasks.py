"""The firer's background work runs in its own TaskGroup, on its injected clock: an expected
failure (PostgreSQL away) is retried on that clock, an unexpected one ends `Firer.run()` (and so
the node) instead of vanishing in an orphan task. No database: a stub port, a FakeClock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.firing.firer import Firer, FiringConfig
from cronwheel.errors import Unavailable
from cronwheel.storage import DueOneoff, DueSchedule

TIMEOUT_S = 5.0


class StubFiring:
    """Answers the preload's two reads; the first `failures` schedule reads raise `error`."""

    def __init__(self, error: Exception | None, failures: int = 1) -> None:
        self.error = error
        self.failures = failures
        self.reads = 0

    async def due_schedules(self, partition: int, horizon: datetime,
                            after: datetime | None) -> AsyncIterator[list[DueSchedule]]:
        self.reads += 1
        if self.error is not None and self.failures:
            self.failures -= 1
            raise self.error
        for rows in ():
            yield rows

    async def due_oneoffs(self, partition: int, horizon: datetime,
                          after: datetime | None) -> AsyncIterator[list[DueOneoff]]:
        for rows in ():
            yield rows


def firer_with(port: StubFiring, clock: FakeClock) -> Firer:
    return Firer(port, clock, FiringConfig(), epoch_if_trusted=lambda p: 1,  # type: ignore[arg-type]
                 on_stale=lambda p, e: None)


async def test_an_unexpected_preload_error_ends_the_firers_run() -> None:
    firer = firer_with(StubFiring(RuntimeError("bug in preload")), FakeClock())
    run = asyncio.create_task(firer.run())
    await firer.partition_gained(3, 1)
    with pytest.raises(ExceptionGroup) as ei:
        await asyncio.wait_for(run, TIMEOUT_S)
    assert ei.group_contains(RuntimeError, match="bug in preload")


async def test_a_preload_gained_before_run_starts_runs_inside_it() -> None:
    firer = firer_with(StubFiring(RuntimeError("bug in preload")), FakeClock())
    await firer.partition_gained(3, 1)  # the coordinator may call before run() is scheduled
    with pytest.raises(ExceptionGroup):
        await asyncio.wait_for(firer.run(), TIMEOUT_S)


async def test_a_preload_that_meets_postgres_away_retries_on_the_injected_clock() -> None:
    clock = FakeClock()
    port = StubFiring(Unavailable("postgres", "restarting"))
    firer = firer_with(port, clock)
    run = asyncio.create_task(firer.run())
    try:
        await firer.partition_gained(3, 1)
        for _ in range(1000):  # let the preload fail and go to sleep on the fake clock
            if port.reads and clock.next_deadline() is not None:
                break
            await asyncio.sleep(0)
        assert not firer.signals.loaded.is_set()
        clock.advance(firer.config.retry_after_s)
        await asyncio.wait_for(firer.signals.loaded.wait(), TIMEOUT_S)
        assert port.reads == 2 and not run.done()
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run


async def test_the_fire_loop_says_when_it_rests_and_for_how_long() -> None:
    """What the pruner yields to: while the fire loop sleeps, quiet_for() is what is left of its
    sleep (0 while it is awake); next_rest() returns when it next goes to sleep."""
    clock = FakeClock()
    firer = firer_with(StubFiring(None), clock)
    assert firer.quiet_for() == 0.0  # awake (not started)
    run = asyncio.create_task(firer.run())
    try:
        assert await asyncio.wait_for(firer.next_rest(10.0), TIMEOUT_S) is True
        assert firer.quiet_for() == pytest.approx(1.0)  # an empty wheel: the loop sleeps 1 s at most
        clock.advance(0.4)
        assert firer.quiet_for() == pytest.approx(0.6)
        rest = asyncio.create_task(firer.next_rest(10.0))
        await asyncio.sleep(0)
        assert not rest.done()
        clock.advance(0.6)  # it wakes, finds nothing due and sleeps again
        assert await asyncio.wait_for(rest, TIMEOUT_S) is True
        assert firer.quiet_for() == pytest.approx(1.0)
    finally:
        run.cancel()
