"""Benchmark: the hierarchical timing wheel against a heapq scheduler doing the same work.

Run ``python -m bench.wheel`` (about 1 minute on 2 cores) or ``python -m bench.wheel --quick``.

The baseline is the idiomatic heapq scheduler of the Python docs' "priority queue
implementation notes": a heap of ``[deadline, seq, item]`` entries, the entry itself is the
handle, cancel marks it removed (lazy deletion) and pop skips removed entries. Both sides are
driven by the same pre-generated deadlines, and the mixed workload checks that both returned
the same items. Timed sections run with the cyclic GC off (as ``timeit`` does) and each figure
is the median of several repetitions. Targets are computed from the measurements.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cronwheel.wheel import Handle, TimingWheel

NOW = 1_700_000_000.0
HORIZON_S = 120.0
STEP_S = 0.01
_REMOVED = object()


class Scheduler(Protocol):
    def insert(self, deadline: float, item: Any) -> Any: ...
    def cancel(self, handle: Any) -> bool: ...
    def advance(self, now: float) -> list[Any]: ...


class HeapScheduler:
    """heapq baseline: [deadline, seq, item] entries, lazy-deletion cancel via a marker."""

    __slots__ = ("_heap", "_seq")

    def __init__(self, start: float) -> None:
        self._heap: list[list[Any]] = []
        self._seq = 0

    def insert(self, deadline: float, item: Any) -> list[Any]:
        entry = [deadline, self._seq, item]
        self._seq += 1
        heapq.heappush(self._heap, entry)
        return entry

    def cancel(self, entry: list[Any]) -> bool:
        if entry[2] is _REMOVED:
            return False
        entry[2] = _REMOVED
        return True

    def advance(self, now: float) -> list[Any]:
        heap, out, pop = self._heap, [], heapq.heappop
        while heap and heap[0][0] <= now:
            entry = pop(heap)
            item = entry[2]
            if item is not _REMOVED:
                entry[2] = _REMOVED  # so that a later cancel() answers False
                out.append(item)
        return out


Factory = Callable[[float], Scheduler]
SIDES: dict[str, Factory] = {"wheel": TimingWheel, "heapq": HeapScheduler}


def _timed(fn: Callable[..., Any], *args: Any, collect: bool = True) -> tuple[float, Any]:
    """(seconds, result) of fn(*args), with the cyclic GC off while it runs (and run first,
    unless ``collect`` is False: a collection walks every object and so evicts the cache)."""
    if collect:
        gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        result = fn(*args)
        return time.perf_counter() - t0, result
    finally:
        gc.enable()


def _insert_all(s: Scheduler, deadlines: Sequence[float], items: Sequence[Any]) -> None:
    ins = s.insert
    for d, x in zip(deadlines, items, strict=True):
        ins(d, x)


def _cancel_all(s: Scheduler, handles: Sequence[Any]) -> None:
    cancel = s.cancel
    for h in handles:
        cancel(h)


def _spread(rng: random.Random, n: int, base: float = NOW) -> list[float]:
    return [base + rng.random() * HORIZON_S for _ in range(n)]


def _fill(s: Scheduler, deadlines: Sequence[float], items: Sequence[Any]) -> list[Any]:
    ins = s.insert
    return [ins(d, x) for d, x in zip(deadlines, items, strict=True)]


# -- the measurements ------------------------------------------------------------------------


def bench_insert(n: int, reps: int) -> dict[str, float]:
    """Inserts per second: n timers spread over the next 2 minutes, in random order."""
    deadlines, items = _spread(random.Random(1), n), list(range(n))
    out = {}
    for name, make in SIDES.items():
        times = []
        for _ in range(reps):
            times.append(_timed(_insert_all, make(NOW), deadlines, items)[0])
        out[name] = n / statistics.median(times)
    return out


def bench_mixed(n: int, steps: int, reps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Steady state: n live timers over the next 2 minutes; every 10 ms step inserts as many
    new ones (2 minutes ahead, random) as fall due and advances. Returns (ops/s, worst step s).
    """
    rng = random.Random(2)
    preload = _spread(rng, n)
    per_step = max(1, round(n * STEP_S / HORIZON_S))
    fresh = [
        _spread(rng, per_step, NOW + (i + 1) * STEP_S) for i in range(steps)
    ]  # pre-generated so both sides do identical work
    rate: dict[str, float] = {}
    worst: dict[str, float] = {}
    fired_by: dict[str, int] = {}
    for name, make in SIDES.items():
        times, worsts = [], []
        for _ in range(reps):
            s = make(NOW)
            _fill(s, preload, range(n))
            fired = [0]
            pauses = [0.0]

            def run(s: Scheduler = s, fired: list[int] = fired, pauses: list[float] = pauses) -> None:
                ins, adv, clock = s.insert, s.advance, time.perf_counter
                item = n
                for i, batch in enumerate(fresh):
                    for d in batch:
                        ins(d, item)
                        item += 1
                    t0 = clock()
                    fired[0] += len(adv(NOW + (i + 1) * STEP_S))
                    pauses[0] = max(pauses[0], clock() - t0)

            times.append(_timed(run)[0])
            worsts.append(pauses[0])
            fired_by[name] = fired[0]
            del s
        rate[name] = (steps * per_step + fired_by[name]) / statistics.median(times)
        worst[name] = statistics.median(worsts)
    if fired_by["wheel"] != fired_by["heapq"]:
        raise AssertionError(f"mixed workload: the two sides fired differently: {fired_by}")
    return rate, worst


def check_same_results(n: int) -> None:
    """Untimed: both sides return identical lists, step by step, with cancels mixed in."""
    rng = random.Random(3)
    deadlines = _spread(rng, n) + [NOW + 60.0] * (n // 10)
    outs = []
    for make in SIDES.values():
        s = make(NOW)
        handles = _fill(s, deadlines, range(len(deadlines)))
        for h in handles[::7]:
            s.cancel(h)
        outs.append([s.advance(NOW + i * 0.37) for i in range(int(HORIZON_S / 0.37) + 2)])
    if outs[0] != outs[1]:
        raise AssertionError("the wheel and the heapq scheduler returned different items")


def _touch(handles: Sequence[Any]) -> int:
    """Read every handle's fields, pulling them into the CPU cache."""
    total = 0
    for h in handles:
        total += h.seq if isinstance(h, Handle) else h[1]
    return total


def bench_cancel(
    sizes: Sequence[int], reps: int, warm_batch: int = 1000
) -> dict[int, dict[str, tuple[float, float]]]:
    """ns per cancel with n live timers, as (cold, warm).

    cold: a random tenth of the handles, in random order: what a caller sees, including the
    cache and TLB misses of fetching handles spread over a large heap (grows with n for any
    structure). warm: batches of ``warm_batch`` random handles read just before being
    cancelled, which leaves the structure's own cost: the algorithmic part.
    """
    out: dict[int, dict[str, tuple[float, float]]] = {}
    for n in sizes:
        rng = random.Random(n)
        deadlines = _spread(rng, n)
        order = rng.sample(range(n), n)
        cold_victims = order[: max(1, n // 10)]
        warm_victims = order[n // 10 :][: 5 * warm_batch]
        batches = [warm_victims[i : i + warm_batch] for i in range(0, len(warm_victims), warm_batch)]
        out[n] = {}
        for name, make in SIDES.items():
            cold, warm = [], []
            for _ in range(reps):
                s = make(NOW)
                handles = _fill(s, deadlines, range(n))
                chosen = [handles[i] for i in cold_victims]
                cold.append(_timed(_cancel_all, s, chosen)[0] / len(chosen))
                for batch in batches:
                    chosen = [handles[i] for i in batch]
                    _touch(chosen)
                    warm.append(_timed(_cancel_all, s, chosen, collect=False)[0] / len(chosen))
                del s, handles, chosen
            out[n][name] = (statistics.median(cold) * 1e9, statistics.median(warm) * 1e9)
    return out


def bench_burst(n: int, reps: int) -> dict[str, float]:
    """Seconds for the advance() that expires n timers all due at the same instant."""
    at = NOW + 60.0
    out = {}
    for name, make in SIDES.items():
        times = []
        for _ in range(reps):
            s = make(NOW)
            ins = s.insert
            for i in range(n):
                ins(at, i)
            took, got = _timed(s.advance, at)
            times.append(took)
            if len(got) != n or got[0] != 0 or got[-1] != n - 1:
                raise AssertionError(f"{name}: burst came back wrong")
            del s, got
        out[name] = statistics.median(times)
    return out


def bench_memory(n: int) -> dict[str, float]:
    """Bytes per timer held by the structure (tracemalloc), items and handles excluded."""
    deadlines = _spread(random.Random(4), n)
    items = [object() for _ in range(n)]  # the caller's; allocated before measuring
    out = {}
    for name, make in SIDES.items():
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        s = make(NOW)
        ins = s.insert
        for i in range(n):
            ins(deadlines[i] + 0.0, items[i])  # a fresh float, as a caller would pass
        out[name] = (tracemalloc.get_traced_memory()[0] - before) / n
        tracemalloc.stop()
        del s
    return out


# -- report ----------------------------------------------------------------------------------


@dataclass
class Row:
    metric: str
    wheel: float
    heapq: float
    unit: str
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float:
        return self.wheel / self.heapq


def _k(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def _fmt(x: float) -> str:
    if x >= 1e5:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wheel", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    args = p.parse_args(argv)
    big = 100_000 if args.quick else 1_000_000
    reps = 3 if args.quick else 5
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    t_start = time.perf_counter()

    check_same_results(20_000 if args.quick else 100_000)
    ins = bench_insert(big, reps)
    mixed, worst = bench_mixed(big, 1000 if args.quick else 3000, 3)
    cancel = bench_cancel(sizes, reps)
    burst = bench_burst(big, 3)
    mem = bench_memory(big)

    k = f"{big // 1000}k" if big < 1_000_000 else "1M"
    lo_n, hi_n = sizes[0], sizes[-1]
    flat_cold = cancel[hi_n]["wheel"][0] / cancel[lo_n]["wheel"][0]
    flat_warm = cancel[hi_n]["wheel"][1] / cancel[lo_n]["wheel"][1]
    heap_cold = cancel[hi_n]["heapq"][0] / cancel[lo_n]["heapq"][0]
    heap_warm = cancel[hi_n]["heapq"][1] / cancel[lo_n]["heapq"][1]
    flat_target = f"flat: {_k(hi_n)}/{_k(lo_n)} <= 2"
    rows = [
        Row(f"insert, {k} over 2 min", ins["wheel"], ins["heapq"], "ops/s"),
        Row(
            f"mixed steady state, {k} live, 10 ms steps", mixed["wheel"], mixed["heapq"],
            "ops/s", ">= heapq", mixed["wheel"] >= mixed["heapq"],
        ),
        Row("  worst single advance() in it", worst["wheel"] * 1e3, worst["heapq"] * 1e3, "ms"),
    ]
    for col, label, flat in ((0, "random handles", flat_cold), (1, "cache-warm", flat_warm)):
        for n in sizes:
            row = Row(
                f"cancel, {_k(n)} live, {label}",
                cancel[n]["wheel"][col], cancel[n]["heapq"][col], "ns/op",
            )
            if n == hi_n:
                row.target, row.met = f"{flat_target} ({flat:.2f})", flat <= 2.0
            rows.append(row)
    rows += [
        Row(
            f"expire {k} due at the same instant", burst["wheel"] * 1e3, burst["heapq"] * 1e3,
            "ms", ">= 10x faster", burst["heapq"] >= 10 * burst["wheel"],
        ),
        Row(
            f"memory per timer at {k}", mem["wheel"], mem["heapq"], "bytes", "<= 150",
            mem["wheel"] <= 150,
        ),
    ]
    print(f"\ncronwheel.wheel vs heapq  (python {sys.version.split()[0]}, "
          f"{'quick' if args.quick else 'full'} run, medians)")
    head = f"{'metric':<42} {'wheel':>12} {'heapq':>12} {'unit':>6} {'wheel/heapq':>12}  target"
    print(head)
    print("-" * (len(head) + 22))
    for r in rows:
        verdict = "" if r.met is None else ("  MET" if r.met else "  NOT MET")
        print(f"{r.metric:<42} {_fmt(r.wheel):>12} {_fmt(r.heapq):>12} {r.unit:>6} "
              f"{r.ratio:>11.3g}x  {r.target}{verdict}")
    print(f"\ncancel cost {_k(hi_n)} vs {_k(lo_n)} live: wheel {flat_cold:.2f}x cold, "
          f"{flat_warm:.2f}x warm; heapq {heap_cold:.2f}x cold, {heap_warm:.2f}x warm")
    print(f"same-instant burst: wheel is {burst['heapq'] / burst['wheel']:,.0f}x faster; "
          f"mixed: {mixed['wheel'] / mixed['heapq']:.2f}x heapq's throughput")
    print(f"results checked identical on both sides; took {time.perf_counter() - t_start:.0f} s")
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
