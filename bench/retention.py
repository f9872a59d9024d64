"""Retention benchmark: `python -m bench.retention [--quick] [--backlog 5000000] [--phase-s 120]
[--repeat 3]`.

One machine, real PostgreSQL (fsync on), real etcd, one `cronwheel node` process owning every
partition, steady load of 1,000 fires/s throughout (10k schedules every 10 s, seconds spread by
`H`, jitter_s=1: bench.fire's steady load), while the node's own Pruner deletes a backlog of
finished executions. The run has three phases, all under the same steady load, one node, no
restart:

    A  without pruning   --phase-s seconds: the backlog exists but is kept
    B  pruning           from one UPDATE that gives the backlog's 1,000 schedules a 7-day
                         window (keep_succeeded_for) until the node has pruned all of it
    C  without pruning   --phase-s seconds more, nothing left to prune

The node runs with `--retention-succeeded forever --retention-failed forever` so that nothing is
prunable (and nothing is scanned) before B; B's rows go through the same statement and per-row
window rule as with the 7-day default (the schedule's own window is the first rule). It also
runs with `--retention-idle 2` (default 30 s: a pass starts at most that long after rows become
prunable).

The backlog is inserted before the node starts (before the load) with one INSERT..SELECT over
generate_series, not through the API: `--backlog` succeeded runs of 1,000 every-second
schedules, finished 8 days ago and earlier, followed by VACUUM ANALYZE and a CHECKPOINT.

Figures, per phase: the write lag, fired_at - (run_at - queue_ahead_s), how long the fire path
took from the tick's wheel deadline to its row (fired_at is the database's commit-time clock),
p50/p99/max; beside it, for reference, the fire lag max(0, fired_at - run_at), how late after its
time a tick was claimable (bench.fire's two figures, one definition: its AHEAD_S). The steady
load is overlap-`allow`, so each tick is queued queue_ahead_s (1 s) before its run_at and
fired_at - run_at is about -990 ms whatever pruning costs: the fire lag is 0 in every phase and
its ratio says nothing. What is judged is the write lag: p99(B) / p99(A and C pooled), in the
same run, against the target 1.2, as the median of --repeat runs (default 3; each run prints its
own ratio). Also: prune rate (rows / s from the first pruned row to the last, read from
execution_pruned, a 1,000-row table); the node's prune batch duration (its histogram, from
/metrics); table and index size of executions before B, after B, after a plain VACUUM, and at
the end of C (rows fired in C reuse the space VACUUM freed: the file does not shrink, VACUUM FULL
or pg_repack would).

Server code imported: cronwheel.cluster.firing.schedule_cache (cron_for: the steady load's
schedules' first tick as the node computes it); setup, the node process is what is measured.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.fire import AHEAD_S, copy_schedules
from cronwheel.cluster.firing.schedule_cache import cron_for
from cronwheel.devtools.harness import ProcessCluster

P = 16
OLD_SCHEDULES = 1000
STEADY = 10_000
NODE_ARGS = ("--retention-succeeded", "forever", "--retention-failed", "forever", "--retention-idle", "2")
TARGET = 1.2  # write lag p99 with pruning <= 1.2x without

BACKLOG = """
INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at, state,
                        trigger, attempt, created_at, fired_at, queued_at, started_at, finished_at)
SELECT cronwheel_uuid7(), s.id, 'bench', 'bench.old', '{}', s.partition, t.at, t.at, 'succeeded', 'cron', 1,
       t.at, t.at, t.at, t.at, t.at + interval '50 ms'
  FROM generate_series(0, %(n)s - 1) AS g
  JOIN (SELECT id, partition, (row_number() OVER (ORDER BY id)) - 1 AS k FROM schedules
         WHERE name LIKE 'old-%%') AS s ON s.k = g %% %(schedules)s
 CROSS JOIN LATERAL (SELECT %(newest)s::timestamptz
                            - make_interval(secs => (g / %(schedules)s) * %(step_s)s) AS at) AS t
"""
# An autovacuum (or any VACUUM) working on executions right now: B's lags are split by it.
VACUUMING = ("SELECT 1 FROM pg_stat_progress_vacuum v JOIN pg_class r ON r.oid = v.relid "
             "WHERE r.relname = 'executions'")
SIZES = ("SELECT pg_relation_size('executions'), pg_indexes_size('executions'), "
         "pg_total_relation_size('executions')")


def mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


def sizes(c: ProcessCluster) -> tuple[int, int, int]:
    [(heap, idx, total)] = c.sql(SIZES)
    return int(heap), int(idx), int(total)


def pruned_total(c: ProcessCluster) -> int:
    [(n,)] = c.sql("SELECT coalesce(sum(pruned), 0) FROM execution_pruned")
    return int(n)


def lag_rows(c: ProcessCluster, t_from: datetime, t_to: datetime) -> list[tuple[datetime, float]]:
    return [(r[0], float(r[1])) for r in c.sql(
        "SELECT run_at, extract(epoch FROM fired_at - run_at) FROM executions WHERE type = 'bench.noop' "
        "AND run_at >= %s AND run_at < %s AND fired_at IS NOT NULL", t_from, t_to)]


@dataclass(frozen=True, slots=True)
class Lags:
    """One phase's fires, each list sorted, in seconds. `write` is the judged figure."""

    write: tuple[float, ...]  # fired_at - (run_at - AHEAD_S): wheel deadline to row
    fire: tuple[float, ...]  # max(0, fired_at - run_at): claimable after run_at (0 when queued ahead)

    def __add__(self, other: Lags) -> Lags:  # pooling two phases
        return Lags(tuple(sorted(self.write + other.write)), tuple(sorted(self.fire + other.fire)))


def phase_lags(raw_s: Iterable[float], ahead_s: float = AHEAD_S) -> Lags:
    """Both lags from each fire's fired_at - run_at (seconds), as bench.fire computes them."""
    xs = list(raw_s)
    return Lags(tuple(sorted(x + ahead_s for x in xs)), tuple(sorted(max(0.0, x) for x in xs)))


def lags(c: ProcessCluster, t_from: datetime, t_to: datetime) -> Lags:
    return phase_lags(x for _, x in lag_rows(c, t_from, t_to))


def pct(xs: tuple[float, ...] | list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


def write_ratio(with_pruning: Lags, without: Lags) -> float:
    """The judged figure: write lag p99 with pruning / without."""
    return pct(with_pruning.write, 0.99) / pct(without.write, 0.99)


def lag_line(x: Lags, seconds: float) -> str:
    w = x.write
    return (f"{len(w) / seconds:,.0f} fires/s, write lag p50 {1000 * pct(w, 0.5):.1f} ms, "
            f"p99 {1000 * pct(w, 0.99):.1f} ms, max {1000 * w[-1]:.1f} ms (fire lag p99 "
            f"{1000 * pct(x.fire, 0.99):.1f} ms)" if w else "no fires")


def metrics_url(c: ProcessCluster, node: str) -> str | None:
    for line in c.nodes[node].lines:
        m = re.search(r"metrics on (http://\S+)", line)
        if m:
            return m.group(1)
    return None


def batch_seconds(url: str | None) -> tuple[float, float]:
    """(batches, mean seconds) of the age pass, from the node's histogram."""
    if url is None:
        return 0.0, float("nan")
    text = urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310 (our own node)
    got: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'cronwheel_prune_batch_seconds_(count|sum)\{pass="age"\} (\S+)', line)
        if m:
            got[m.group(1)] = float(m.group(2))
    n = got.get("count", 0.0)
    return n, (got.get("sum", 0.0) / n if n else float("nan"))


def wait_until_ts(t: datetime) -> None:
    time.sleep(max(0.0, (t - datetime.now(UTC)).total_seconds()))


def run(backlog: int, phase_s: float, prune_cap_s: float, node_args: tuple[str, ...] = ()) -> dict[str, Any]:
    with ProcessCluster(partitions=P, lease_ttl_s=5, fsync=True) as c:
        copy_schedules(c.dsn, [(uuid.uuid4(), "* * * * * *", None, f"old-{i}") for i in range(OLD_SCHEDULES)],
                       partitions=P)
        newest = datetime.now(UTC) - timedelta(days=8)
        with psycopg.connect(c.dsn, autocommit=True) as conn:
            t0 = time.monotonic()
            conn.execute(BACKLOG, {"n": backlog, "schedules": OLD_SCHEDULES, "newest": newest,  # type: ignore[arg-type]
                                   "step_s": 1.0})
            insert_s = time.monotonic() - t0
            conn.execute("VACUUM ANALYZE executions")
            conn.execute("CHECKPOINT")
        start = datetime.now(UTC) + timedelta(seconds=10)  # the steady load's first ticks
        rows = []
        for i in range(STEADY):
            ident = uuid.uuid4()
            cron = "H/10 * * * * *"
            rows.append((ident, cron, cron_for(cron, "UTC", None, None, ident).next_after(start), f"s{i}"))
        copy_schedules(c.dsn, rows, jitter_s=1.0, partitions=P)
        c.start_node("n1", *NODE_ARGS, *node_args)  # the steady load runs from here to the end
        c.wait_converged(["n1"])
        url = metrics_url(c, "n1")
        a_from = start + timedelta(seconds=15)
        a_s = phase_s
        b_from = a_from + timedelta(seconds=phase_s)
        wait_until_ts(b_from)
        # B: the backlog's schedules take the default 7-day window; everything they ran is older.
        c.sql("UPDATE schedules SET keep_succeeded_for_s = %s WHERE name LIKE 'old-%%' RETURNING 1", 7 * 86400.0)
        b_from = datetime.now(UTC)
        before = sizes(c)
        # Phase B: until every backlog row is pruned (or the cap).
        first_at: float | None = None
        t_b = time.monotonic()
        vacuuming: list[tuple[datetime, datetime]] = []  # when autovacuum worked on executions during B
        while True:
            n = pruned_total(c)
            now = time.monotonic()
            if c.sql(VACUUMING):
                t = datetime.now(UTC)
                if vacuuming and (t - vacuuming[-1][1]).total_seconds() < 1.0:
                    vacuuming[-1] = (vacuuming[-1][0], t)
                else:
                    vacuuming.append((t, t))
            if n and first_at is None:
                first_at, first_n = now, n
            if n >= backlog or now - t_b > prune_cap_s:
                break
            time.sleep(0.5)
        b_to = datetime.now(UTC)
        done_at = time.monotonic()
        pruned = pruned_total(c)
        after_prune = sizes(c)
        batches, batch_mean_s = batch_seconds(url)
        # Phase C.
        c_from = b_to + timedelta(seconds=2)
        c_to = c_from + timedelta(seconds=phase_s)
        with psycopg.connect(c.dsn, autocommit=True) as conn:
            t0 = time.monotonic()
            conn.execute("VACUUM executions")
            vacuum_s = time.monotonic() - t0
        after_vacuum = sizes(c)
        wait_until_ts(c_to + timedelta(seconds=2))
        end = sizes(c)
        a, b, cc = lags(c, a_from, b_from), lags(c, b_from, b_to), lags(c, c_from, c_to)
        # B's ticks due while a vacuum of executions was seen (sampled every 0.5 s, +-0.5 s).
        spans = [(s - timedelta(seconds=0.5), e + timedelta(seconds=0.5)) for s, e in vacuuming]
        b_rows = lag_rows(c, b_from, b_to)
        b_vac = phase_lags(x for at, x in b_rows if any(s <= at < e for s, e in spans))
        b_novac = phase_lags(x for at, x in b_rows if not any(s <= at < e for s, e in spans))
        vac_s = sum((e - s).total_seconds() for s, e in spans)
        b_s = (b_to - b_from).total_seconds()
        rate_s = (done_at - first_at) if first_at is not None else float("nan")
        return {
            "backlog": backlog, "insert_s": insert_s, "a": a, "b": b, "c": cc, "b_s": b_s, "phase_s": phase_s,
            "a_s": a_s,
            "pruned": pruned, "prune_rate": (pruned - first_n) / rate_s if first_at is not None and rate_s > 0
            else float("nan"), "prune_s": rate_s, "batches": batches, "batch_mean_s": batch_mean_s,
            "before": before, "after_prune": after_prune, "after_vacuum": after_vacuum, "end": end,
            "vacuum_s": vacuum_s, "b_vac": b_vac, "b_novac": b_novac, "vac_s": vac_s,
        }


def report(r: dict[str, Any]) -> float:
    base = r["a"] + r["c"]
    ratio = write_ratio(r["b"], base)
    print(f"backlog {r['backlog']:,} finished executions (one INSERT..SELECT: {r['insert_s']:.0f} s)")
    print(f"  A without pruning, {r['a_s']:.0f} s: {lag_line(r['a'], r['a_s'])}")
    print(f"  B pruning, {r['b_s']:.0f} s:          {lag_line(r['b'], r['b_s'])}")
    print(f"    of B, while autovacuum worked on executions ({r['vac_s']:.0f} s): "
          f"{lag_line(r['b_vac'], max(r['vac_s'], 1e-9))}")
    print(f"    of B, the rest ({r['b_s'] - r['vac_s']:.0f} s): "
          f"{lag_line(r['b_novac'], max(r['b_s'] - r['vac_s'], 1e-9))}")
    print(f"  C without pruning, {r['phase_s']:.0f} s: {lag_line(r['c'], r['phase_s'])}")
    print(f"  write lag p99 with pruning / without (A+C pooled): {1000 * pct(r['b'].write, 0.99):.1f} / "
          f"{1000 * pct(base.write, 0.99):.1f} ms = {ratio:.2f}x (this run; fire lag p99 for reference: "
          f"{1000 * pct(r['b'].fire, 0.99):.1f} / {1000 * pct(base.fire, 0.99):.1f} ms)")
    print(f"  pruned {r['pruned']:,} rows in {r['prune_s']:.0f} s: {r['prune_rate']:,.0f} rows/s; "
          f"{r['batches']:.0f} age batches, mean {1000 * r['batch_mean_s']:.0f} ms each")
    for label, key in (("before pruning", "before"), ("after pruning", "after_prune"),
                       (f"after VACUUM ({r['vacuum_s']:.0f} s)", "after_vacuum"), ("end of C", "end")):
        heap, idx, total = r[key]
        print(f"  executions {label}: table {mb(heap)}, indexes {mb(idx)}, total {mb(total)}")
    return ratio


def verdict(ratios: list[float]) -> str:
    med = statistics.median(ratios)
    return (f"write lag p99 with pruning / without, median of {len(ratios)} runs: {med:.2f}x ("
            + ", ".join(f"{x:.2f}" for x in ratios)
            + f"; target <= {TARGET:g}x: {'met' if med <= TARGET else 'NOT met'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="500k backlog, 30 s phases: a smoke run")
    ap.add_argument("--backlog", type=int, default=5_000_000, help="finished executions to prune (default 5M)")
    ap.add_argument("--phase-s", type=float, default=120.0,
                    help="seconds of each phase without pruning (A and C; default 120)")
    ap.add_argument("--prune-cap-s", type=float, default=1800.0, help="give up pruning after this long")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median of their ratios is judged (default 3)")
    ap.add_argument("--retention-batch", type=int, help="the node's --retention-batch (default: the node's default)")
    ap.add_argument("--retention-pause", type=float, help="the node's --retention-pause (default: the node's default)")
    a = ap.parse_args()
    backlog, phase_s = (500_000, 30.0) if a.quick else (a.backlog, a.phase_s)
    node_args: tuple[str, ...] = ()
    if a.retention_batch is not None:
        node_args += ("--retention-batch", str(a.retention_batch))
    if a.retention_pause is not None:
        node_args += ("--retention-pause", str(a.retention_pause))
    ratios = [report(run(backlog, phase_s, a.prune_cap_s, node_args)) for _ in range(max(1, a.repeat))]
    print(verdict(ratios))


if __name__ == "__main__":
    main()
