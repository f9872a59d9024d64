"""Firing benchmark: `python -m bench.fire [--quick] [--sizes 100000,1000000] [--steady 10000] [--partitions 64]
[--clustered 1000,10000] [--repeat 3]`.

One machine, real PostgreSQL (fsync and synchronous_commit ON: "durably fired" means committed),
real etcd, one `cronwheel node` process owning every partition.

1. Steady load: N schedules (default 10k) firing every 10 s with their seconds spread by `H`,
   i.e. N/10 fires per second, for --steady-s seconds. Run twice: spread within each second
   (jitter_s=1) with --steady schedules, and clustered on whole seconds (jitter_s=0: every tick
   of a second is due at the same instant, the "whole-second herd") once per --clustered rate K
   (ticks per whole second, so 10*K schedules; default 1,000 and 10,000). fired_at is the
   database's clock_timestamp() when the batch wrote the row (the commit follows in the same
   transaction). The schedules are overlap-`allow` (the default), so since stop 42 each tick is
   queued FiringConfig.queue_ahead_s (1 s) before its run_at and claimable from it. Reported:
   the fire lag, max(0, fired_at - run_at): how late after its time a tick was claimable (what a
   worker sees; 0 when it was written ahead); and the write lag, fired_at - (run_at -
   queue_ahead_s): how long the fire path took from the tick's wheel deadline to its row, the
   figure "fire lag" named before stop 42 (comparable with the earlier rows of the Status table,
   docs/perf-log.md). p50/p99/max of each and achieved fires/s.
2. Top-of-the-hour burst: S schedules (100k, 1M) all due at the same instant T. Reported: time
   from T until the last execution is committed (and its count checked), fires/s, node peak RSS;
   the write starts queue_ahead_s before T, so fires/s and the ratio below take the write's
   duration from then.
   Baseline measured in the same run: one plain SQL statement inserting the same S execution
   rows from the schedules table (`INSERT ... SELECT`, no cronwheel, no fencing) in an identical
   database: the floor PostgreSQL itself needs on this machine. Printed as a ratio.

Schedules (and their schedule_due rows) are inserted with COPY and then ANALYZEd (setup, not the
subject: statistics as autovacuum would have them soon after an import); partitions are computed
exactly as the API does (cluster.commands.values partition_of). Burst schedules are yearly with their
first tick set to T, so nothing else is due in the horizon. --burst-repeat N gives the median.

Server code imported: cronwheel.cluster.firing.firer (FiringConfig: the default queue_ahead_s
the write lag is counted from), cronwheel.cluster.firing.schedule_cache (cron_for: the
schedules' first tick as the node computes it) and cronwheel.cluster.commands.values
(partition_of, as the API does); setup and arithmetic, the node process is what is measured.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from cronwheel.cluster.firing.firer import FiringConfig
from cronwheel.cluster.firing.schedule_cache import cron_for
from cronwheel.devtools.harness import ProcessCluster

P = 64  # the node's default partition count (--partitions)
AHEAD_S = FiringConfig().queue_ahead_s  # the node's default: allow ticks are queued this long before run_at
# The burst's schedules: their first tick is set to T directly; their next is next New Year, so
# nothing else is due in the horizon (with an hourly expression, a run just before the top of an
# hour also fired the hour's tick: correct, but not the burst being measured).
YEARLY = "0 0 1 1 *"


def partition_of(ident: uuid.UUID, partitions: int) -> int:
    from cronwheel.cluster.commands.values import partition_of as pof

    return pof(ident, partitions)


def copy_schedules(dsn: str, rows: list[tuple[uuid.UUID, str, datetime, str]], jitter_s: float = 0.0,
                   partitions: int | None = None) -> float:
    """COPY (id, name, cron, next_run_at) rows in, each in its partition of a cluster of
    `partitions` (default: this benchmark's P); returns seconds taken."""
    n = partitions or P
    t0 = time.monotonic()
    with psycopg.connect(dsn) as c, c.cursor() as cur:
        with cur.copy("COPY schedules (id, tenant, name, cron, timezone, job_type, misfire_policy, partition,"
                      " jitter_s) FROM STDIN") as cp:
            for ident, cron, _nxt, name in rows:
                cp.write_row((ident, "bench", name, cron, "UTC", "bench.noop", "skip", partition_of(ident, n),
                              jitter_s))
        with cur.copy("COPY schedule_due (schedule_id, partition, next_run_at) FROM STDIN") as cp:
            for ident, _cron, nxt, _name in rows:
                cp.write_row((ident, partition_of(ident, n), nxt))
        c.commit()
        # Statistics as autovacuum would have them a minute after an import: a batch planned on
        # a never-analysed table scans a whole partition per tick (seen: 20 ms per 60 rows).
        c.execute("ANALYZE schedules")
        c.execute("ANALYZE schedule_due")
    return time.monotonic() - t0


def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def steady(n: int, seconds: float, jitter_s: float,
           load: Callable[[ProcessCluster, str], AbstractContextManager[object]] | None = None) -> dict[str, float]:
    """N schedules `H/10 * * * * *` (N/10 ticks due every second), measured over `seconds`.
    `load(cluster, node address)`: a context held while they fire (bench.rest: API calls)."""
    with ProcessCluster(partitions=P, lease_ttl_s=5, fsync=True) as c:
        c.start_node("n1")
        c.wait_converged(["n1"])
        start = datetime.now(UTC) + timedelta(seconds=8 + n / 20_000)  # COPY + restart + preload
        rows = []
        for i in range(n):
            ident = uuid.uuid4()
            cron = "H/10 * * * * *"
            first = cron_for(cron, "UTC", None, None, ident).next_after(start)
            rows.append((ident, cron, first, f"s{i}"))
        copy_schedules(c.dsn, rows, jitter_s)
        c.stop_node("n1")
        c.start_node("n1b")  # a fresh node loads everything at once
        c.wait_converged(["n1b"], timeout=120)
        t_from = start + timedelta(seconds=2)
        with load(c, c.nodes["n1b"].address) if load is not None else nullcontext():
            time.sleep(max(0.0, (t_from - datetime.now(UTC)).total_seconds()) + seconds + 1)
        t_to = t_from + timedelta(seconds=seconds)
        raw = sorted(float(r[0]) for r in c.sql(
            "SELECT extract(epoch FROM fired_at - run_at) FROM executions WHERE run_at >= %s AND run_at < %s",
            t_from, t_to))
        lags = [max(0.0, x) for x in raw]  # claimable from run_at
        writes = [x + AHEAD_S for x in raw]  # from the wheel deadline

        def q(xs: list[float], at: float) -> float:
            return 1000 * xs[min(len(xs) - 1, int(len(xs) * at))]

        return {
            "schedules": n, "fires": len(raw), "fires_per_s": len(raw) / seconds,
            "p50_ms": q(lags, 0.5), "p99_ms": q(lags, 0.99), "max_ms": 1000 * lags[-1],
            "write_p50_ms": q(writes, 0.5), "write_p99_ms": q(writes, 0.99), "write_max_ms": 1000 * writes[-1],
        }


def burst(size: int) -> dict[str, float]:
    with ProcessCluster(partitions=P, lease_ttl_s=5, fsync=True) as c:
        # Baseline first, in a second database of the same server: the floor of PostgreSQL.
        base_dsn = c.pg.create_database("baseline", template="cronwheel")
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
        rows = [(uuid.uuid4(), YEARLY, due, f"s{i}") for i in range(size)]
        copy_schedules(base_dsn, rows)
        with psycopg.connect(base_dsn) as b:
            t0 = time.monotonic()
            b.execute("""INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for,
                                                 run_at, priority, state, fired_at, queued_at)
                         SELECT cronwheel_uuid7(), s.id, s.tenant, s.job_type, s.payload, s.partition, d.next_run_at,
                                d.next_run_at, s.priority, 'queued', clock_timestamp(), now()
                           FROM schedules s JOIN schedule_due d ON d.schedule_id = s.id""")
            b.execute("UPDATE schedule_due SET next_run_at = next_run_at + interval '1 hour',"
                      " last_scheduled_for = next_run_at")
            b.commit()
            baseline_s = time.monotonic() - t0
        # cronwheel: the node preloads all of them (horizon covers T), then fires at T.
        lead = 30 + size / 20_000  # time to COPY and preload before T
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead)
        rows = [(uuid.uuid4(), YEARLY, due, f"s{i}") for i in range(size)]
        copy_s = copy_schedules(c.dsn, rows)
        node = c.start_node("n1", "--horizon", str(int(lead) + 60))
        c.wait_converged(["n1"], timeout=120)
        wait = (due - datetime.now(UTC)).total_seconds()
        if wait < 1:
            raise SystemExit(f"preload did not finish before T (COPY took {copy_s:.1f}s); raise the lead")
        time.sleep(wait)
        # Waiting must not compete with what it waits for: a count(*) of the growing table every
        # 0.2 s held a third of a core during the burst. The statistics counter is a cheap gate
        # (backends flush it at most once a second, an idle one within 10 s); the exact count
        # confirms. The figure itself is max(fired_at), so when the wait notices the end does
        # not change it.
        while True:
            time.sleep(0.5)
            if c.sql("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'executions'")[0][0] < size:
                continue
            done = c.sql("SELECT count(*), max(fired_at), min(fired_at) FROM executions")[0]
            if done[0] >= size:
                break
        total = (done[1] - due).total_seconds()
        first = (done[2] - due).total_seconds()
        write = total + AHEAD_S  # the fire began at its wheel deadline, T - queue_ahead_s
        distinct = c.sql("SELECT count(DISTINCT schedule_id) FROM executions")[0][0]
        if distinct != size:
            sample = c.sql("SELECT schedule_id, scheduled_for, trigger, state, state_reason, fired_at FROM executions"
                           " WHERE schedule_id IN (SELECT schedule_id FROM executions GROUP BY 1 HAVING count(*) > 1"
                           " LIMIT 3) ORDER BY 1, 2")
            raise SystemExit(f"{size} schedules, {done[0]} executions of {distinct} schedules at T={due}; "
                             f"e.g. {sample}")
        return {"size": size, "durable_s": total, "fires_per_s": size / write, "rss_peak_mb": rss_peak_mb(node.pid),
                "baseline_s": baseline_s, "ratio": write / baseline_s, "copy_s": copy_s, "first_s": first,
                "write_s": write}


def main() -> None:
    global P
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--sizes", default="100000,1000000", help="burst sizes; empty skips the bursts")
    ap.add_argument("--steady", type=int, default=10_000,
                    help="schedules of the spread steady run (jitter_s=1); 0 skips it")
    ap.add_argument("--clustered", default="1000,10000",
                    help="clustered steady runs (jitter_s=0): ticks due at each whole second, comma-separated; "
                         "empty skips them")
    ap.add_argument("--steady-s", type=float, default=30)
    ap.add_argument("--partitions", type=int, default=P, help="partitions of the cluster (the node's default: 64)")
    ap.add_argument("--repeat", type=int, default=1, help="steady runs to take the median of")
    ap.add_argument("--burst-repeat", type=int, default=1, help="burst runs per size to take the median of")
    a = ap.parse_args()
    P = a.partitions
    sizes = [int(s) for s in ("20000" if a.quick else a.sizes).split(",") if s.strip()]
    runs_of: list[tuple[int, float, str]] = []
    n_spread = 2000 if a.quick else a.steady
    if n_spread:
        runs_of.append((n_spread, 1.0, "spread over each second (jitter_s=1)"))
    for k in ([200] if a.quick else [int(x) for x in a.clustered.split(",") if x.strip()]):
        runs_of.append((10 * k, 0.0, f"clustered on whole seconds, {k:,} ticks per second"))
    for n, jitter, label in runs_of:
        runs = [steady(n, 10 if a.quick else a.steady_s, jitter) for _ in range(a.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        each = ", ".join(f"{r['p99_ms']:.1f}" for r in runs)
        writes = ", ".join(f"{r['write_p99_ms']:.1f}" for r in runs)
        print(f"steady, {label}, {P} partitions: {med['schedules']:.0f} schedules, {med['fires_per_s']:.0f} fires/s, "
              f"fire lag (claimable after run_at) p50 {med['p50_ms']:.1f} ms, p99 {med['p99_ms']:.1f} ms, "
              f"max {med['max_ms']:.1f} ms (target p99 <= 20 ms: {'met' if med['p99_ms'] <= 20 else 'NOT met'}; "
              f"median of {len(runs)}, p99s {each}); write lag (row - wheel deadline, {AHEAD_S:g} s before run_at) "
              f"p50 {med['write_p50_ms']:.1f} ms, p99 {med['write_p99_ms']:.1f} ms, max {med['write_max_ms']:.1f} ms "
              f"(p99s {writes})", flush=True)
    for size in sizes:
        bursts = [burst(size) for _ in range(max(1, a.burst_repeat))]
        r = {k: statistics.median(b[k] for b in bursts) for k in bursts[0]}
        if len(bursts) > 1:
            print(f"burst {size:>9,}: durable after T in {len(bursts)} runs: "
                  + ", ".join(f"{b['durable_s']:.1f} s" for b in bursts) + " (median below)")
        print(f"burst {size:>9,}, {P} partitions: first fire {1000 * r['first_s']:.0f} ms after T, all durable "
              f"{r['durable_s']:.1f} s after T (written in {r['write_s']:.1f} s from T - {AHEAD_S:g} s), "
              f"{r['fires_per_s']:,.0f} fires/s, "
              f"node peak RSS {r['rss_peak_mb']:.0f} MB; baseline one INSERT..SELECT {r['baseline_s']:.1f} s "
              f"(cronwheel/baseline {r['ratio']:.2f}x)"
              + (f"; target 30 s: {'met' if r['durable_s'] <= 30 else 'NOT met'}" if size >= 1_000_000 else ""),
              flush=True)


if __name__ == "__main__":
    main()
