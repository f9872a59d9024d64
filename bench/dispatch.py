"""Dispatch benchmark: `python -m bench.dispatch [--quick] [--jobs 20000] [--rate 1000] [--rate-s 20]`.

Real PostgreSQL, etcd and one `cronwheel node` process; workers are separate processes speaking
gRPC: LeaseExecutions with max_count=100, then one CompleteExecutions for the leased batch (the
handler is a no-op: this measures the scheduler, not work).

1. Throughput: N queued jobs (inserted in one statement: setup); 1, 4 and 16 workers (asyncio
   tasks spread over 2 client processes) lease and complete until none is left.
   executions/s = N / wall time. Baseline in the same run: the same claim and finish SQL driven
   straight from one Python process on one connection, without gRPC (what the database path
   alone allows). Ratio printed.
   The baseline drives the same SQL one completion per transaction (CompleteExecution's path).
2. Start lag at a steady arrival rate (default 1,000 jobs/s for 20 s): a submitter inserts due
   jobs in 10 ms batches and NOTIFYs; 4 worker processes run them. Start lag = started_at (the
   claim's now()) - run_at. p50/p99 reported.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time

import grpc
import psycopg
from google.protobuf.duration_pb2 import Duration

from chaos.harness import ProcessCluster
from cronwheel.storage.queries import q
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

P = 16


def _dur(s: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


async def _worker_tasks(address: str, n_tasks: int, prefix: str, stop_when_empty: bool, until: float) -> int:
    done = 0
    async with grpc.aio.insecure_channel(address) as ch:
        stub = dispatch_pb2_grpc.DispatchServiceStub(ch)

        async def one(i: int) -> None:
            nonlocal done
            wid = f"{prefix}-{i}"
            while time.time() < until:
                r = await stub.LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
                    worker_id=wid, job_types=["bench"], max_count=100, lease_duration=_dur(60),
                    wait_timeout=_dur(0.5 if stop_when_empty else 1.0)))
                if not r.executions and stop_when_empty:
                    return
                if r.executions:
                    resp = await stub.CompleteExecutions(dispatch_pb2.CompleteExecutionsRequest(items=[
                        dispatch_pb2.CompleteExecutionRequest(execution_id=ex.execution_id,
                                                              fencing_token=ex.fencing_token, worker_id=wid)
                        for ex in r.executions]))
                    done += sum(1 for o in resp.outcomes if o.code == 0)

        await asyncio.gather(*(one(i) for i in range(n_tasks)))
    return done


def _worker_proc(address: str, n_tasks: int, prefix: str, stop_when_empty: bool, until: float) -> None:
    asyncio.run(_worker_tasks(address, n_tasks, prefix, stop_when_empty, until))


def run_workers(address: str, workers: int, stop_when_empty: bool, until: float) -> list[mp.Process]:
    ctx = mp.get_context("spawn")
    procs = []
    nproc = min(2, workers)
    for k in range(nproc):
        share = workers // nproc + (1 if k < workers % nproc else 0)
        p = ctx.Process(target=_worker_proc, args=(address, share, f"w{k}", stop_when_empty, until))
        p.start()
        procs.append(p)
    return procs


def enqueue(dsn: str, n: int) -> None:
    with psycopg.connect(dsn) as c:
        c.execute("""INSERT INTO executions (id, tenant, type, payload, partition, scheduled_for, run_at, priority,
                                            state, trigger)
                     SELECT gen_random_uuid(), 'bench', 'bench', '{}', g %% 16, now(), now(), 'default', 'queued',
                            'submit' FROM generate_series(1, %s) g""", (n,))


def baseline(dsn: str, n: int) -> float:
    """Claim 100 at a time and finish each, with the same SQL, one connection, no gRPC."""
    enqueue(dsn, n)
    t0 = time.monotonic()
    done = 0
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            with c.transaction():
                params = {"priority": "default", "types": ["bench"], "tenant": None, "limit": 100}
                ids = [r[0] for r in c.execute(q("claim_candidates"), params)]
                if not ids:
                    break
                rows = c.execute(q("claim"), {"ids": ids, "worker": "base", "lease_s": 60}).fetchall()
            for r in rows:
                with c.transaction():
                    c.execute(q("lock_running"), {"id": r[0], "token": r[9], "worker": "base", "tenant": None})
                    c.execute(q("finish"), {"id": r[0], "state": "succeeded", "reason": None, "result": None,
                                            "error": None, "error_type": None, "terminal": True, "delay_s": 0})
                done += 1
    return done / (time.monotonic() - t0)


def throughput(c: ProcessCluster, address: str, n: int, workers: int) -> float:
    enqueue(c.dsn, n)
    t0 = time.monotonic()
    procs = run_workers(address, workers, True, time.time() + 600)
    for p in procs:
        p.join()
    left = c.sql("SELECT count(*) FROM executions WHERE state <> 'succeeded'")[0][0]
    assert left == 0, f"{left} executions not completed"
    return n / (time.monotonic() - t0)


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
                                SELECT gen_random_uuid(), 'lag', 'bench', '{}', g %% 16, clock_timestamp(),
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
    a = ap.parse_args()
    n = 3000 if a.quick else a.jobs
    with ProcessCluster(partitions=P, lease_ttl_s=5) as c:
        base_db = c.pg.create_database("baseline", template="cronwheel")  # before the node uses it
        node = c.start_node("n1")
        c.wait_converged(["n1"])
        base = baseline(base_db, n)
        print(f"baseline (same SQL, one connection, no gRPC): {base:,.0f} leases+completions/s")
        for w in (1, 4, 16):
            tp = throughput(c, node.address, n, w)
            c.sql("DELETE FROM executions RETURNING 1")
            print(f"{w:2d} workers: {tp:,.0f} leases+completions/s ({tp / base:.2f}x baseline; "
                  f"target >= 10,000/s: {'met' if tp >= 10_000 else 'NOT met'})", flush=True)
        p50, p99, total = start_lag(c, node.address, a.rate // (4 if a.quick else 1), 5 if a.quick else a.rate_s)
        print(f"start lag at {a.rate // (4 if a.quick else 1)} jobs/s ({total} jobs): p50 {p50 * 1000:.1f} ms, "
              f"p99 {p99 * 1000:.1f} ms (target p99 < 50 ms: {'met' if p99 < 0.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
