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

from chaos.harness import ProcessCluster
from cronwheel.clock import SystemClock
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


def enqueue(dsn: str, n: int) -> None:
    with psycopg.connect(dsn) as c:
        c.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at, priority,
                                            state, trigger)
                     SELECT cronwheel_uuid7(), 'bench', 'bench', '{}', g %% 16, now(), now(), 'default', 'queued',
                            'submit' FROM generate_series(1, %s) g""", (n,))


def baseline(dsn: str, n: int, batched: bool) -> float:
    """Claim 100 at a time and finish them one by one or as a batch: same SQL, one connection."""
    with psycopg.connect(dsn) as c:
        c.execute("DELETE FROM executions")  # each baseline starts from the same empty table
    enqueue(dsn, n)
    t0 = time.monotonic()
    done = 0
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            with c.transaction():
                c.execute(q("claim_lock_tenants"), {"tenant": None})
                rows = c.execute(q("claim"), {"priorities": ["critical", "default", "bulk"], "types": ["bench"],
                                              "tenant": None, "limit": 100, "worker": "base", "fair_tau_s": 1.0,
                                              "lease_s": 60, "now": SystemClock().now()}).fetchall()
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--rate-s", type=float, default=20)
    ap.add_argument("--repeat", type=int, default=3, help="throughput runs per worker count (median printed)")
    a = ap.parse_args()
    n = 3000 if a.quick else a.jobs
    with ProcessCluster(partitions=P, lease_ttl_s=5, fsync=True) as c:
        base_db = c.pg.create_database("baseline", template="cronwheel")  # before the node uses it
        node = c.start_node("n1")
        c.wait_converged(["n1"])
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
