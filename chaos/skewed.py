"""Run `cronwheel` with its wall clock skewed: `python -m chaos.skewed SKEW_S node --dsn ...`.

Clock skew between nodes, injected without touching the scheduler: every wall-clock read of a
node goes through `cronwheel.clock` (ruff bans the others), so shifting `SystemClock`'s wall
readings by SKEW_S seconds (positive: this node's clock runs ahead) skews everything the node
decides by time: when the wheel fires, which ticks count as misfired on load, the horizon.
Monotonic time is left alone, as NTP leaves CLOCK_MONOTONIC alone: the lease trust window is
computed on it and must not care. PostgreSQL's now() (fired_at, leases of workers) stays true.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta


def install(skew_s: float) -> None:
    from cronwheel import clock

    delta = timedelta(seconds=skew_s)

    def now(self: clock.SystemClock) -> datetime:
        return datetime.now(UTC) + delta

    def now_ts(self: clock.SystemClock) -> float:
        return time.time() + skew_s

    async def sleep_until_ts(self: clock.SystemClock, deadline_ts: float) -> None:
        delay = deadline_ts - (time.time() + skew_s)
        if delay > 0:
            await asyncio.sleep(delay)

    clock.SystemClock.now = now  # type: ignore[method-assign]
    clock.SystemClock.now_ts = now_ts  # type: ignore[method-assign]
    clock.SystemClock.sleep_until_ts = sleep_until_ts  # type: ignore[method-assign]
    clock.wall_ts = lambda: time.time() + skew_s


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m chaos.skewed SKEW_S COMMAND [ARGS...]", file=sys.stderr)
        return 2
    install(float(argv[0]))
    from cronwheel.cli import main as cli_main

    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
