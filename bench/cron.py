"""Micro-benchmark of the next-fire computation: `python -m bench.cron`.

Prints next_after calls per second (median of REPS runs) for:

- uncached: the DST-aware core (`next_after_uncached`), random instants in 2026;
- memo miss: `next_after` on instants never seen before (core + LRU bookkeeping);
- memo hit: the top of the hour, many schedules sharing a handful of expressions, one instant;
- croniter: `croniter(expr, start).get_next(datetime)` on the same instants, the baseline.

Same process, same instants, same expressions (croniter gets the H-free ones in their
classic form, and aware local start times so it works in the same zone).

Then, per kind of spec (issue 54), next-fire computations per CPU second on fresh instants with
an empty memo (median of KIND_REPS), each next to plain 5-field cron measured in the same run
on the same instants: L, W, # (the plain expressions with a Quartz day field), intervals,
unions of 2 plain expressions, and plain expressions with exclusions (a list of holidays and
a cron spec). The issue asks each kind to reach 0.5x plain. A memo-hit line shows that the
top-of-the-hour memo works for the new kinds too.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from cronwheel.cron import (
    CronSchedule,
    DateExclusion,
    ExcludingSpec,
    Spec,
    SpecExclusion,
    UnionSpec,
    load_zone,
    parse_every,
    parse_schedule,
)
from cronwheel.cron.schedule import clear_memo

ZONE = "Europe/London"
EXPRESSIONS = ("*/5 * * * *", "0 * * * *", "30 2 * * 1-5", "0 9 1 * *", "15,45 8-18 * * MON-FRI")
N = 20_000
REPS = 5
KIND_REPS = 3
# The plain expressions again, with a Quartz day field in place of their day-of-month or
# day-of-week (the minute and hour fields kept, so the comparison is like for like).
KIND_EXPRESSIONS = {
    "L": ("*/5 * L * *", "0 * L * *", "30 2 L * *", "0 9 L * *", "15,45 8-18 L * *"),
    "W": ("*/5 * 15W * *", "0 * LW * *", "30 2 LW * *", "0 9 1W * *", "15,45 8-18 15W * *"),
    "#": ("*/5 * * * 1#2", "0 * * * 5#3", "30 2 * * 1#1", "0 9 * * 2#2", "15,45 8-18 * * 4#4"),
}
INTERVALS = ("90s", "5m", "1h30m", "45s", "2h")
HOLIDAYS = ("2026-01-01", "2026-04-03", "2026-04-06", "2026-05-04", "2026-05-25", "2026-08-31",
            "2026-12-25", "2026-12-28")  # England and Wales, 2026


def _rate(fn: Callable[[], int]) -> float:
    runs = []
    for _ in range(REPS):
        start = time.perf_counter()
        calls = fn()
        runs.append(calls / (time.perf_counter() - start))
    return statistics.median(runs)


def _kind_rate(specs: list[Spec], instants: list[datetime]) -> float:
    pairs = [(specs[i % len(specs)], t) for i, t in enumerate(instants)]
    clear_memo()
    start = time.process_time()  # CPU time: other processes on a shared machine do not count
    for s, t in pairs:
        s.next_after(t)
    return len(pairs) / (time.process_time() - start)


def kinds(instants: list[datetime]) -> None:
    """Per-kind next_after/s with an empty memo, and the ratio to plain cron (issue 54)."""
    plain = [parse_schedule(e, ZONE) for e in EXPRESSIONS]
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    holidays = DateExclusion(frozenset(datetime.fromisoformat(d).date() for d in HOLIDAYS),
                             ZONE, load_zone(ZONE))
    christmas_eve = SpecExclusion(parse_schedule("* * 24 12 *", ZONE))
    specs: dict[str, list[Spec]] = {"plain 5-field": list(plain)}
    for kind, exprs in KIND_EXPRESSIONS.items():
        specs[kind] = [parse_schedule(e, ZONE) for e in exprs]
    specs["interval"] = [parse_every(d, anchor) for d in INTERVALS]
    specs["union of 2"] = [UnionSpec((plain[i], plain[(i + 2) % len(plain)]))
                           for i in range(len(plain))]
    specs["with exclusions"] = [ExcludingSpec(p, (holidays, christmas_eve)) for p in plain]
    # Each kind runs right after a plain run and its ratio is taken against that run, so that
    # a load change on a shared machine moves a kind and its baseline together.
    runs: dict[str, list[float]] = {kind: [] for kind in specs}
    ratios: dict[str, list[float]] = {kind: [] for kind in specs}
    for _ in range(KIND_REPS):
        for kind, ss in specs.items():
            plain_rate = _kind_rate(specs["plain 5-field"], instants)
            rate = plain_rate if kind == "plain 5-field" else _kind_rate(ss, instants)
            runs[kind].append(rate)
            ratios[kind].append(rate / plain_rate)
    print(f"per kind, next_after/s on fresh instants, empty memo, median of {KIND_REPS} rounds "
          f"of {len(instants)} calls (ratio: median of the per-round ratios)")
    for kind in specs:
        rate, ratio = statistics.median(runs[kind]), statistics.median(ratios[kind])
        verdict = "" if kind == "plain 5-field" else ("  ok" if ratio >= 0.5 else "  BELOW 0.5x")
        print(f"  {kind:<24} {rate:>12,.0f}/s  {ratio:6.2f}x plain{verdict}")
    top = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    fleet = [parse_schedule(e, ZONE, schedule_id=f"s{i}") for i in range(len(instants) // 5)
             for e in KIND_EXPRESSIONS["L"]]
    clear_memo()
    for s in fleet[:5]:
        s.next_after(top)
    start = time.process_time()
    for s in fleet:
        s.next_after(top)
    print(f"  L memo hit (top of hour) {len(fleet) / (time.process_time() - start):>12,.0f}/s")


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
    kinds(instants)


if __name__ == "__main__":
    main()
