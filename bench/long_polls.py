"""Long-poll flood benchmark (issue 48 item 7): `python -m bench.long_polls [--quick] [--repeat 3]`.

Does one tenant holding thousands of waiting LeaseExecutions calls slow another tenant down?

What runs: PostgreSQL (fsync on), one etcd, one `cronwheel node` with its default settings and
an auth file (an admin, tenant `flood` and tenant `victim` tokens), all on this machine
(cronwheel.devtools.harness.ProcessCluster). Tenant victim: jobs go in through the public `AsyncClient`
(single submit calls at `--rate` jobs/s for `--seconds`, each due 1 s after its submit) and run in
a SEPARATE `cronwheel worker bench.e2e_worker` process (the SDK Worker, default settings, the
victim's token), whose handlers record their start time. Start lag = handler start - run_at.
Tenant flood: another process opens `--polls` (5,000) LeaseExecutions calls at once with its
token, each its own worker id, job type `lp.flood` (never submitted), wait_timeout 60 s, and
reopens each admitted call as it returns; a refused call (RESOURCE_EXHAUSTED: the node's
per-tenant cap, MAX_POLLS_PER_TENANT) is counted and not retried.

Each repeat measures the victim's start lag without the flood, then with it (once the refused
calls were answered and a call sent after the others on each connection was answered: the
node holds the admitted ones), on the same cluster.
`--repeat N` (default 3) prints each repeat's figures, then the medians of N, and the ratio of
the p99s with / without (the issue's target: at most 1.2). Beside each, the node's CPU over the
offer (% of one core, from /proc): what the held calls cost the node, less noisy than a p99 on
a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import statistics
import time
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from bench.cpu import cpu_s
from bench.e2e import LEASE_TTL_S, PARTITIONS, WorkerProc, first_starts, pct, read_records, reset, wait_terminal
from cronwheel.client import AsyncClient
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.limits import MAX_POLLS_PER_TENANT
from cronwheel.token_format import hash_token
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

TOKENS = {"admin": "bench-admin-0123456789", "flood": "bench-flood-0123456789", "victim": "bench-victim-0123456789"}
JOB_TYPE = "e2e.w2"  # a type bench.e2e_worker records
CHANNELS = 10  # the flood's connections (each carries polls / CHANNELS calls)


def _auth_file(c: ProcessCluster) -> str:
    entries = [{"name": "ops", "admin": True, "sha256": hash_token(TOKENS["admin"])}]
    entries += [{"name": f"{t}-ci", "tenant": t, "sha256": hash_token(TOKENS[t])}
                for t in ("flood", "victim")]
    path = c.workdir / "auth.json"
    path.write_text(json.dumps({"tokens": entries}))
    return str(path)


async def _flood(address: str, polls: int, report: Any, stop: Any) -> None:
    meta = (("authorization", f"Bearer {TOKENS['flood']}"),)
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(CHANNELS)]
    stubs = [dispatch_pb2_grpc.DispatchServiceStub(ch) for ch in channels]
    counts: dict[str, int] = {"refused": 0, "answered": 0, "errors": 0}

    async def poll(i: int) -> None:
        req = dispatch_pb2.LeaseExecutionsRequest(worker_id=f"flood-{i}", job_types=["lp.flood"], max_count=1,
                                                  wait_timeout=Duration(seconds=60))
        while not stop.is_set():
            try:
                await stubs[i % CHANNELS].LeaseExecutions(req, metadata=meta, timeout=65)
                counts["answered"] += 1
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    counts["refused"] += 1
                    return  # not retried: the admitted calls are the ones held
                counts["errors"] += 1
                counts[exc.code().name] = counts.get(exc.code().name, 0) + 1
                return

    tasks = [asyncio.create_task(poll(i)) for i in range(polls)]
    refusals = max(0, polls - MAX_POLLS_PER_TENANT)
    while counts["refused"] + counts["errors"] < refusals and not stop.is_set():
        await asyncio.sleep(0.1)  # every call was sent; the refused ones came back at once
    await asyncio.sleep(0.1)  # (with fewer polls than the cap: every task sent its call)
    # One call per connection after them, not waiting: once it is answered, the node took every
    # call sent before it on that connection (handled in order).
    probe = dispatch_pb2.LeaseExecutionsRequest(worker_id="flood-probe", job_types=["lp.flood"], max_count=1)
    await asyncio.gather(*(s.LeaseExecutions(probe, metadata=meta, timeout=30) for s in stubs))
    report.put({"held": sum(1 for t in tasks if not t.done()), **counts})
    while not stop.is_set():
        await asyncio.sleep(0.1)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for ch in channels:
        await ch.close()


def _flood_proc(address: str, polls: int, report: Any, stop: Any) -> None:
    asyncio.run(_flood(address, polls, report, stop))


def _victim_lag(c: ProcessCluster, address: str, node_pid: int, worker: WorkerProc, rate: float,
                seconds: float, seen: set[str]) -> dict[str, float]:
    """Submit `rate` jobs/s for `seconds` (each due 1 s later), as the victim; their start lags."""
    total = int(rate * seconds)
    run_at: dict[str, float] = {}

    async def offer() -> None:
        async with AsyncClient(address, token=TOKENS["victim"]) as client:
            t0 = time.time()
            for k in range(total):
                wait = t0 + k / rate - time.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                ex = await client.submit(JOB_TYPE, {"k": k}, delay=timedelta(seconds=1))
                run_at[ex.id] = ex.run_at.timestamp()

    cpu0 = cpu_s(node_pid) or 0.0
    asyncio.run(offer())
    node_cpu = (cpu_s(node_pid) or 0.0) - cpu0  # over the offer: the jobs' seconds, the flood's if any
    worker.wait_for(len(seen) + total, 60)
    wait_terminal(c, JOB_TYPE, len(seen) + total)
    starts = first_starts(read_records(worker.path))
    lags = [starts[i].start - t for i, t in run_at.items() if i in starts]
    seen.update(run_at)
    return {"jobs": float(total), "started": float(len(lags)), "lag_p50_ms": 1000 * pct(lags, 0.5),
            "lag_p99_ms": 1000 * pct(lags, 0.99), "lag_max_ms": 1000 * max(lags, default=float("nan")),
            "node_cpu_pct": 100 * node_cpu / seconds}


def run(repeat: int, polls: int, rate: float, seconds: float) -> list[tuple[dict[str, float], dict[str, float]]]:
    out = []
    with ProcessCluster(partitions=PARTITIONS, lease_ttl_s=LEASE_TTL_S, fsync=True) as c:
        node = c.start_node("n1", "--auth-file", _auth_file(c))
        worker = WorkerProc(c, "--token", TOKENS["victim"])
        time.sleep(2.0)  # the worker connects and waits in its long poll before the load starts
        seen: set[str] = set()
        ctx = mp.get_context("spawn")
        for r in range(repeat):
            without = _victim_lag(c, node.address, node.pid, worker, rate, seconds, seen)
            report, stop = ctx.Queue(), ctx.Event()
            flood = ctx.Process(target=_flood_proc, args=(node.address, polls, report, stop), daemon=True)
            flood.start()
            got = report.get(timeout=120)
            with_flood = _victim_lag(c, node.address, node.pid, worker, rate, seconds, seen)
            stop.set()
            flood.join(30)
            if flood.is_alive():
                flood.kill()
            with_flood.update({f"flood_{k}": float(v) for k, v in got.items()})
            print(f"repeat {r + 1}: without {_fmt(without)}\n          with    {_fmt(with_flood)}", flush=True)
            out.append((without, with_flood))
        worker.stop()
        reset(c)
    return out


def _fmt(d: dict[str, float]) -> str:
    return "  ".join(f"{k}={v:.1f}" for k, v in d.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repeat, 500 polls, 5 s")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--polls", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=50.0, help="victim jobs/s")
    ap.add_argument("--seconds", type=float, default=15.0)
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.polls, a.seconds = 1, 500, 5.0
    random.seed(7)
    pairs = run(a.repeat, a.polls, a.rate, a.seconds)
    med = {k: statistics.median(p[0][k] for p in pairs) for k in pairs[0][0]}
    med_f = {k: statistics.median(p[1][k] for p in pairs) for k in pairs[0][1]}
    print(f"median of {a.repeat}: without {_fmt(med)}\n               with    {_fmt(med_f)}")
    print(f"start lag p99 with / without the flood: {med_f['lag_p99_ms'] / med['lag_p99_ms']:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()
