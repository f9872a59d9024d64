"""Micro-benchmark of the next-fire computation: `python -m bench.cron`.

Prints next_after calls per second (median of REPS runs) for:

- uncached: the DST-aware core (`next_after_uncached`), random instants in 2026;
- memo miss: `next_after` on instants never seen before (core + LRU bookkeeping);
- memo hit: the top of the hour, many schedules sharing a handful of expressions, one instant;
- croniter: `croniter(expr, start).get_next(datetime)` on the same instants, the baseline.

Same process, same instants, same expressions (croniter gets the H-free ones in their
classic form, and aware local start times so it works in the same zone).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from cronwheel.cron import CronSchedule, parse_schedule
from cronwheel.cron.schedule import clear_memo

ZONE = "Europe/London"
EXPRESSIONS = ("*/5 * * * *", "0 * * * *", "30 2 * * 1-5", "0 9 1 * *", "15,45 8-18 * * MON-FRI")
N = 20_000
REPS = 5


def _rate(fn: Callable[[], int]) -> float:
    runs = []
    for _ in range(REPS):
        start = time.perf_counter()
        calls = fn()
        runs.append(calls / (time.perf_counter() - start))
    return statistics.median(runs)


def main() -> None:
    rng = random.Random(7)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    instants = [base + timedelta(seconds=rng.randrange(365 * 86400)) for _ in range(N)]
    schedules = [parse_schedule(e, ZONE) for e in EXPRESSIONS]
    pairs = [(schedules[i % len(schedules)], t) for i, t in enumerate(instants)]
    zone = ZoneInfo(ZONE)
    local_pairs = [(EXPRESSIONS[i % len(EXPRESSIONS)], t.astimezone(zone))
                   for i, t in enumerate(instants)]

    def uncached() -> int:
        for s, t in pairs:
            s.next_after_uncached(t)
        return len(pairs)

    def memo_miss() -> int:
        clear_memo()
        for s, t in pairs:
            s.next_after(t)
        return len(pairs)

    # Top of the hour: 20 000 schedules (4 000 per expression, distinct ids), one instant.
    top = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    fleet: list[CronSchedule] = [parse_schedule(e, ZONE, schedule_id=f"s{i}")
                                 for i in range(N // len(EXPRESSIONS)) for e in EXPRESSIONS]
    for s in schedules:
        s.next_after(top)

    def memo_hit() -> int:
        for s in fleet:
            s.next_after(top)
        return len(fleet)

    def baseline() -> int:
        for expr, t in local_pairs:
            croniter(expr, t).get_next(datetime)
        return len(local_pairs)

    # Sanity: the compared computations agree away from DST days.
    for (s, t), (expr, lt) in list(zip(pairs, local_pairs, strict=True))[:200]:
        assert s.next_after_uncached(t) == croniter(expr, lt).get_next(datetime), (expr, t)

    figures = {
        "uncached (core)": _rate(uncached),
        "memo miss": _rate(memo_miss),
        "memo hit (top of hour)": _rate(memo_hit),
        "croniter get_next": _rate(baseline),
    }
    print(f"next_after/s, median of {REPS} runs of {N} calls, zone {ZONE}, "
          f"{len(EXPRESSIONS)} expressions")
    for name, rate in figures.items():
        print(f"  {name:<24} {rate:>12,.0f}/s  {1e6 / rate:8.2f} us/call")
    cron_rate = figures["croniter get_next"]
    print(f"  uncached / croniter      {figures['uncached (core)'] / cron_rate:8.1f}x")
    print(f"  memo hit / croniter      {figures['memo hit (top of hour)'] / cron_rate:8.1f}x")
    print(f"  memo hit / uncached      "
          f"{figures['memo hit (top of hour)'] / figures['uncached (core)']:8.1f}x")


if __name__ == "__main__":
    main()
