"""Dispatch benchmark: `python -m bench.dispatch [--quick] [--jobs 20000] [--rate 1000] [--rate-s 20]`.

Real PostgreSQL (fsync on), etcd and one `cronwheel node` process; workers are separate processes
speaking gRPC: LeaseExecutions with max_count=100, then one CompleteExecutions for the leased
batch, sent in the background while the next batch is leased, as the SDK's Worker does (the
handler is a no-op: this measures the scheduler, not work).

1. Throughput: N queued jobs (inserted in one statement: setup); 1, 4 and 16 workers (asyncio
   tasks spread over 2 client processes) lease and complete until none is left.
   executions/s = N / the time from the moment every worker process is connected (process
   start-up is not timed) to the last completion's finished_at (the final empty long poll is not
   timed either); both instants are read from PostgreSQL's clock.
   Baselines in the same run, the same SQL driven from one Python process on one connection,
   without gRPC: (a) claims of 100, then one transaction per completion (CompleteExecution's
   path: what a naive worker gets); (b) claims of 100, then one batch completion (what the
   database path alone allows on one connection). Ratios to (a) printed.
2. Start lag at a steady arrival rate (default 1,000 jobs/s for 20 s): a submitter inserts due
   jobs in 10 ms batches and NOTIFYs; 4 worker processes run them. Start lag = started_at (the
   claim's now()) - run_at. p50/p99 reported.
3. Multi-tenant (issue 18): 20 tenants, tenant i of weight 1 + i % 5, the even ones rate-limited
   to 20 * weight starts/s (burst NULL: one second's worth); tenant i has 1/60 * weight of the N
   jobs (so the unlimited ones would drain together); 16 workers as in 1. Measured over the
   window from the first start to the moment the first tenant has nothing left queued (every
   tenant backlogged throughout): starts/s = starts in the window / its length; fairness =
   Jain's index of x_i = starts_i / e_i, where e_i is tenant i's weighted share of the window's
   starts with the rate caps applied (water-filling: a capped tenant gets its rate, the rest is
   split by weight). The same run with limits off (every rate NULL, every weight 1: the claim
   before this issue, round-robin) is measured against the same weighted shares. The two
   alternate, `--repeat` times each; medians printed, and the ratio on / off of starts/s.

Server code imported: cronwheel.storage.queries (q), the statements behind the bare-SQL
baselines: the floor runs the node's own claim and completion statements, without gRPC.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import time
from typing import Any

import grpc
import psycopg
from google.protobuf.duration_pb2 import Duration

from cronwheel.clock import SystemClock
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.limits import ANSWER_ROWS_BYTES
from cronwheel.storage.queries import q
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

P = 16


def _dur(s: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


async def _worker_tasks(address: str, n_tasks: int, prefix: str, stop_when_empty: bool, until: float,
                        ready: Any, go: Any) -> int:
    done = 0
    async with grpc.aio.insecure_channel(address) as ch:
        stub = dispatch_pb2_grpc.DispatchServiceStub(ch)
        await ch.channel_ready()
        ready.put(prefix)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)  # all start together

        async def complete(wid: str, executions: Any) -> None:
            nonlocal done
            resp = await stub.CompleteExecutions(dispatch_pb2.CompleteExecutionsRequest(items=[
                dispatch_pb2.CompleteExecutionRequest(execution_id=ex.execution_id,
                                                      fencing_token=ex.fencing_token, worker_id=wid)
                for ex in executions]))
            done += sum(1 for o in resp.outcomes if o.code == 0)

        async def one(i: int) -> None:
            # Like the SDK's Worker: the finished batch is reported in the background while the
            # next one is leased (at most one report in flight per worker).
            wid = f"{prefix}-{i}"
            reporting: asyncio.Task[None] | None = None
            try:
                while time.time() < until:
                    r = await stub.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
                        worker_id=wid, job_types=["bench"], max_count=100, lease_duration=_dur(60),
                        wait_timeout=_dur(0.5 if stop_when_empty else 1.0)))
                    if reporting is not None:
                        await reporting
                        reporting = None
                    if not r.executions and stop_when_empty:
                        return
                    if r.executions:
                        reporting = asyncio.create_task(complete(wid, r.executions))
            finally:
                if reporting is not None:
                    await reporting

        await asyncio.gather(*(one(i) for i in range(n_tasks)))
    return done


def _worker_proc(address: str, n_tasks: int, prefix: str, stop_when_empty: bool, until: float,
                 ready: Any, go: Any) -> None:
    asyncio.run(_worker_tasks(address, n_tasks, prefix, stop_when_empty, until, ready, go))


def run_workers(address: str, workers: int, stop_when_empty: bool, until: float) -> list[mp.Process]:
    """Start the worker processes; returns once every one is connected and they have been told
    to go, so process start-up (imports, connecting) is not part of what is timed."""
    ctx = mp.get_context("spawn")
    ready, go = ctx.Queue(), ctx.Event()
    procs = []
    nproc = min(2, workers)
    for k in range(nproc):
        share = workers // nproc + (1 if k < workers % nproc else 0)
        p = ctx.Process(target=_worker_proc, args=(address, share, f"w{k}", stop_when_empty, until, ready, go))
        p.start()
        procs.append(p)
    for _ in procs:
        ready.get(timeout=60)
    go.set()
    return procs


def enqueue(dsn: str, n: int, submitted: bool = False) -> None:
    """n queued runs of type 'bench', due now. `submitted`: each as a submit makes it (bench.e2e's
    jobs): a payload {"i": g} and an idempotency key, which every update of the row also indexes."""
    with psycopg.connect(dsn) as c:
        c.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at, priority,
                                            state, trigger, idempotency_key)
                     SELECT cronwheel_uuid7(), 'bench', 'bench',
                            CASE WHEN %(submitted)s THEN jsonb_build_object('i', g) ELSE '{}' END, g %% 16, now(),
                            now(), 'default', 'queued', 'submit',
                            CASE WHEN %(submitted)s THEN gen_random_uuid()::text END
                       FROM generate_series(1, %(n)s) g""", {"n": n, "submitted": submitted})


def baseline(dsn: str, n: int, batched: bool, limit: int = 100, submitted: bool = False) -> float:
    """Claim `limit` at a time and finish them one by one or as a batch: same SQL, one connection.
    Executions/s. Empties the executions table first; `submitted` as for `enqueue`."""
    with psycopg.connect(dsn) as c:
        c.execute("DELETE FROM executions")  # each baseline starts from the same empty table
    enqueue(dsn, n, submitted)
    t0 = time.monotonic()
    done = 0
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            with c.transaction():
                # the claim reads the tenants it locked
                c.execute(q("claim_lock_tenants"), {"tenant": None, "slot_worker": None})
                rows = c.execute(q("claim"), {"priorities": ["critical", "default", "bulk"], "types": ["bench"],
                                              "tenant": None, "limit": limit, "worker": "base", "fair_tau_s": 1.0,
                                              "lease_s": 60, "now": SystemClock().now(),
                                              "max_bytes": ANSWER_ROWS_BYTES, "queues": ["default"],
                                              "capabilities": [], "slot_queues": [], "slot_counts": []}).fetchall()
                if not rows:
                    break
            if batched:
                with c.transaction():
                    c.execute(q("complete_batch"), {"worker": "base", "tenant": None, "ids": [r[0] for r in rows],
                                                    "tokens": [r[9] for r in rows], "results": [None] * len(rows),
                                                    "now": SystemClock().now()})
                done += len(rows)
                continue
            for r in rows:
                with c.transaction():
                    c.execute(q("lock_running"), {"id": r[0], "token": r[9], "worker": "base", "tenant": None})
                    now = SystemClock().now()
                    c.execute(q("finish"), {"id": r[0], "state": "succeeded", "reason": None, "result": None,
                                            "error": None, "error_type": None, "run_at": None, "finished_at": now,
                                            "now": now})
                done += 1
    return done / (time.monotonic() - t0)


def throughput(c: ProcessCluster, address: str, n: int, workers: int) -> float:
    enqueue(c.dsn, n)
    procs = run_workers(address, workers, True, time.time() + 600)
    t0 = c.sql("SELECT clock_timestamp()")[0][0]
    for p in procs:
        p.join()
    left, last = c.sql("SELECT count(*) FILTER (WHERE state <> 'succeeded'), max(finished_at) FROM executions")[0]
    assert left == 0, f"{left} executions not completed"
    return n / (last - t0).total_seconds()


def start_lag(c: ProcessCluster, address: str, rate: int, seconds: float) -> tuple[float, float, int]:
    until = time.time() + seconds + 3
    procs = run_workers(address, 4, False, until)
    time.sleep(1.5)
    t_start = time.time()
    per_batch = max(1, rate // 100)
    with psycopg.connect(c.dsn, autocommit=True) as conn:
        k = 0
        while time.time() - t_start < seconds:
            target = t_start + k * 0.01
            delay = target - time.time()
            if delay > 0:
                time.sleep(delay)
            with conn.transaction():
                conn.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at,
                                                       priority, state, trigger)
                                SELECT cronwheel_uuid7(), 'lag', 'bench', '{}', g %% 16, clock_timestamp(),
                                       clock_timestamp(), 'default', 'queued', 'submit'
                                  FROM generate_series(1, %s) g""", (per_batch,))
                conn.execute(q("notify_queued"), {"payload": "bench"})
            k += 1
    for p in procs:
        p.join()
    lags = sorted(float(r[0]) for r in c.sql(
        "SELECT extract(epoch FROM started_at - run_at) FROM executions"
        " WHERE tenant = 'lag' AND started_at IS NOT NULL"))
    total = c.sql("SELECT count(*) FROM executions WHERE tenant = 'lag'")[0][0]
    return lags[len(lags) // 2], lags[int(len(lags) * 0.99)], total


MT_TENANTS = 20


def mt_weight(i: int) -> int:
    return 1 + i % 5


def mt_rate(i: int) -> float | None:
    return 20.0 * mt_weight(i) if i % 2 == 0 else None


def weighted_shares(total: float, weights: list[float], caps: list[float | None]) -> list[float]:
    """Max-min fair shares of `total` by weight, each at most its cap (water-filling)."""
    share = [0.0] * len(weights)
    free = set(range(len(weights)))
    left = total
    while free:
        w = sum(weights[i] for i in free)
        capped = {i for i in free if caps[i] is not None and caps[i] < left * weights[i] / w}  # type: ignore[operator]
        if not capped:
            for i in free:
                share[i] = left * weights[i] / w
            break
        for i in capped:
            share[i] = caps[i]  # type: ignore[assignment]
            left -= caps[i]  # type: ignore[operator]
        free -= capped
    return share


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def multi_tenant(c: ProcessCluster, address: str, n: int, limits: bool) -> tuple[float, float, float]:
    """(starts/s, Jain's index against the weighted shares, window s): see the docstring, 3."""
    names = [f"mt{i:02d}" for i in range(MT_TENANTS)]
    c.sql("DELETE FROM executions RETURNING 1")
    c.sql("DELETE FROM tenant_dispatch RETURNING 1")
    c.sql("DELETE FROM tenants WHERE id LIKE 'mt%%' RETURNING 1")
    per_unit = n / sum(mt_weight(i) for i in range(MT_TENANTS))
    with psycopg.connect(c.dsn) as conn:
        for i, name in enumerate(names):
            conn.execute("INSERT INTO tenants (id, weight, rate_per_s) VALUES (%s, %s, %s)",
                         (name, mt_weight(i) if limits else 1, mt_rate(i) if limits else None))
            conn.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at,
                                                    priority, state, trigger)
                            SELECT cronwheel_uuid7(), %s, 'bench', '{}', g %% 16, now(), now(), 'default', 'queued',
                                   'submit' FROM generate_series(1, %s) g""",
                         (name, round(per_unit * mt_weight(i))))
    procs = run_workers(address, 16, False, time.time() + 600)
    try:
        while c.sql("SELECT count(*) FROM (SELECT tenant FROM executions WHERE state = 'queued'"
                    " GROUP BY tenant) q")[0][0] == MT_TENANTS:
            time.sleep(0.05)  # every tenant still has queued work
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
    # The window ends at the first tenant's last start (it had nothing queued after it).
    last = dict(c.sql("SELECT tenant, max(started_at) FROM executions GROUP BY tenant"))
    t0 = c.sql("SELECT min(started_at) FROM executions")[0][0]
    t1 = min(last[t] for t in names if not c.sql(
        "SELECT 1 FROM executions WHERE tenant = %s AND state = 'queued' LIMIT 1", t))
    counts = dict(c.sql("SELECT tenant, count(*) FROM executions WHERE started_at <= %s GROUP BY tenant", t1))
    window = (t1 - t0).total_seconds()
    total = sum(counts.values())
    caps = [None if mt_rate(i) is None else mt_rate(i) * window + mt_rate(i) for i in range(MT_TENANTS)]  # + burst
    shares = weighted_shares(total, [float(mt_weight(i)) for i in range(MT_TENANTS)], caps)
    return total / window, jain([counts.get(t, 0) / s for t, s in zip(names, shares, strict=True)]), window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--rate-s", type=float, default=20)
    ap.add_argument("--repeat", type=int, default=3, help="throughput runs per worker count (median printed)")
    ap.add_argument("--part", choices=("all", "single", "multi"), default="all",
                    help="single: 1 and 2 only; multi: 3 only")
    a = ap.parse_args()
    n = 3000 if a.quick else a.jobs
    with ProcessCluster(partitions=P, lease_ttl_s=5, fsync=True) as c:
        base_db = c.pg.create_database("baseline", template="cronwheel")  # before the node uses it
        node = c.start_node("n1")
        c.wait_converged(["n1"])
        if a.part != "single":
            on: list[tuple[float, float, float]] = []
            off: list[tuple[float, float, float]] = []
            for _ in range(max(1, a.repeat)):
                on.append(multi_tenant(c, node.address, n, limits=True))
                off.append(multi_tenant(c, node.address, n, limits=False))
            c.sql("DELETE FROM executions RETURNING 1")
            for name, runs in (("limits on ", on), ("limits off", off)):
                tp = statistics.median(r[0] for r in runs)
                print(f"multi-tenant, 20 tenants, {name}: median {tp:,.0f} starts/s, "
                      f"Jain's index vs weighted shares {statistics.median(r[1] for r in runs):.4f} "
                      f"(runs: {', '.join(f'{r[0]:,.0f}/s {r[1]:.4f} over {r[2]:.1f} s' for r in runs)})", flush=True)
            ratio = statistics.median(r[0] for r in on) / statistics.median(r[0] for r in off)
            print(f"multi-tenant starts/s, limits on / off: {ratio:.2f} (target >= 0.8: "
                  f"{'met' if ratio >= 0.8 else 'NOT met'})", flush=True)
            if a.part == "multi":
                return
        base = baseline(base_db, n, batched=False)
        print(f"baseline (a) same SQL, one connection, no gRPC, one completion per transaction: "
              f"{base:,.0f} leases+completions/s")
        db = baseline(base_db, n, batched=True)
        print(f"baseline (b) same SQL, one connection, no gRPC, batch completions: {db:,.0f} leases+completions/s")
        for w in (1, 4, 16):
            runs = []
            for _ in range(max(1, a.repeat)):
                runs.append(throughput(c, node.address, n, w))
                c.sql("DELETE FROM executions RETURNING 1")
            tp = statistics.median(runs)
            print(f"{w:2d} workers: median {tp:,.0f} leases+completions/s of {len(runs)} runs "
                  f"(min {min(runs):,.0f}, max {max(runs):,.0f}; {tp / base:.2f}x baseline (a), {tp / db:.2f}x (b); "
                  f"target >= 10,000/s: {'met' if tp >= 10_000 else 'NOT met'})", flush=True)
        p50, p99, total = start_lag(c, node.address, a.rate // (4 if a.quick else 1), 5 if a.quick else a.rate_s)
        print(f"start lag at {a.rate // (4 if a.quick else 1)} jobs/s ({total} jobs): p50 {p50 * 1000:.1f} ms, "
              f"p99 {p99 * 1000:.1f} ms (target p99 < 50 ms: {'met' if p99 < 0.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
