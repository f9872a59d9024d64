"""Queues benchmark: `python -m bench.queues [--rate 200] [--phase-s 8] [--rounds 3]`.

Issue 52 item 2: one `cronwheel worker` process (the SDK's Worker, concurrency 16) serves the
queue `long` with at most 2 slots (`--queue long:2`) and `default` (`--queue default`). A
submitter inserts no-op `default` jobs at a steady rate (10 ms batches, NOTIFY, as bench.dispatch's
start-lag part) through alternating phases of `--phase-s` seconds:

- without: the `long` queue is empty;
- with: the `long` queue is full: 500 long jobs queued (each sleeps the phase's length), 2 of
  them running in the worker's 2 long slots, the rest waiting behind them.

Start lag = started_at (the claim's now()) - run_at, of the `default` jobs submitted in a phase.
Per phase its p50 and p99; the medians over `--rounds` rounds of the two p99s and their ratio
(with / without; target <= 1.1) are printed. Also checked in every `with` phase, from the
executions' own started_at and finished_at: the worker never held more than 2 long runs at once.
The same module is the worker (`cronwheel worker bench.queues`): handlers `noop` and `nap`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import datetime

import psycopg

from cronwheel.client import JobContext, Worker
from cronwheel.devtools.harness import ProcessCluster

worker = Worker(concurrency=16)


@worker.job("noop")
async def noop(ctx: JobContext) -> None:
    return None


@worker.job("nap")
async def nap(ctx: JobContext) -> None:
    await asyncio.sleep(float(ctx.payload["ms"]) / 1000)


def most_at_once(intervals: list[tuple[datetime, datetime | None]], end: datetime) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(f or end, -1) for _, f in intervals], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, d in edges:  # at one instant a finish counts before a start
        now += d
        peak = max(peak, now)
    return peak


def phase(c: ProcessCluster, tag: str, rate: int, seconds: float, full_long: bool) -> tuple[float, float, int, int]:
    """One phase: default jobs (tenant `tag`) at `rate`/s for `seconds`; with `full_long`, 500
    long jobs queued first. (p50, p99 of the default jobs' start lag, their number, most long
    runs held at once)."""
    with psycopg.connect(c.dsn, autocommit=True) as conn:
        if full_long:
            conn.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at,
                                                   state, trigger, queue)
                            SELECT cronwheel_uuid7(), %s, 'nap', jsonb_build_object('ms', %s), g %% 16,
                                   clock_timestamp(), clock_timestamp(), 'queued', 'submit', 'long'
                              FROM generate_series(1, 500) g""", (tag + "-long", int(seconds * 1000)))
            conn.execute("SELECT pg_notify('cronwheel_queued', 'bench')")
            deadline = time.time() + 10
            while conn.execute("SELECT count(*) FROM executions WHERE tenant = %s AND state = 'running'",
                               (tag + "-long",)).fetchone() != (2,):
                if time.time() > deadline:
                    raise RuntimeError("the worker did not take its 2 long slots within 10 s")
                time.sleep(0.01)
        t_start = time.time()
        per_batch = max(1, rate // 100)
        k = 0
        while time.time() - t_start < seconds:
            delay = t_start + k * 0.01 - time.time()
            if delay > 0:
                time.sleep(delay)
            with conn.transaction():
                conn.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at,
                                                       state, trigger)
                                SELECT cronwheel_uuid7(), %s, 'noop', '{}', g %% 16, clock_timestamp(),
                                       clock_timestamp(), 'queued', 'submit'
                                  FROM generate_series(1, %s) g""", (tag, per_batch))
                conn.execute("SELECT pg_notify('cronwheel_queued', 'bench')")
            k += 1
        if full_long:  # before the 2 sleepers end: no other long run starts after the phase
            conn.execute("UPDATE executions SET state = 'cancelled' WHERE tenant = %s AND state = 'queued'",
                         (tag + "-long",))
        deadline = time.time() + 30
        while conn.execute("SELECT count(*) FROM executions WHERE tenant = %s AND state <> 'succeeded'",
                           (tag,)).fetchone() != (0,):
            if time.time() > deadline:
                raise RuntimeError(f"default jobs of {tag} not all done 30 s after the phase")
            time.sleep(0.05)
        held = 0
        if full_long:
            end = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            held = most_at_once(conn.execute("SELECT started_at, finished_at FROM executions WHERE tenant = %s"
                                             " AND started_at IS NOT NULL", (tag + "-long",)).fetchall(), end)
            while conn.execute("SELECT count(*) FROM executions WHERE tenant = %s AND state = 'running'",
                               (tag + "-long",)).fetchone() != (0,):  # the 2 sleepers end with the phase
                time.sleep(0.05)
        lags = sorted(float(r[0]) for r in conn.execute(
            "SELECT extract(epoch FROM started_at - run_at) FROM executions WHERE tenant = %s", (tag,)).fetchall())
    return lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))], len(lags), held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=200, help="default jobs per second")
    ap.add_argument("--phase-s", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with ProcessCluster(partitions=16, lease_ttl_s=5, fsync=True) as c:
        c.start_node("n1")
        c.wait_converged(["n1"])
        c.start_worker("mixed", "bench.queues", "n1", None, "--queue", "long:2", "--queue", "default")
        time.sleep(2)  # the worker connects and waits in its long poll
        phase(c, "warm", a.rate, 2, False)
        without: list[float] = []
        with_: list[float] = []
        for r in range(a.rounds):
            for full in (False, True):
                p50, p99, n, held = phase(c, f"r{r}-{'with' if full else 'without'}", a.rate, a.phase_s, full)
                (with_ if full else without).append(p99)
                print(f"round {r + 1}, long queue {'full ' if full else 'empty'}: {n} default jobs, start lag "
                      f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
                      + (f"; long runs held at once: {held} (at most 2: {'met' if held <= 2 else 'NOT met'})"
                         if full else ""), flush=True)
        pw, po = statistics.median(with_), statistics.median(without)
        ratio = pw / po if po > 0 else float("inf")
        print(f"default queue start lag p99, median of {a.rounds} rounds: {po * 1000:.1f} ms with the long queue "
              f"empty, {pw * 1000:.1f} ms with it full: {ratio:.2f}x (target <= 1.1: "
              f"{'met' if ratio <= 1.1 else 'NOT met'})")


if __name__ == "__main__":
    main()
