"""End-to-end benchmark, the user's path: `python -m bench.e2e [--quick] [--repeat 3] [--only W1,W2,S,W3]`.

What runs: PostgreSQL (fsync and synchronous_commit on), one etcd, one `cronwheel node` with its
default settings (64 partitions, lease TTL 5 s), all on this machine (cronwheel.devtools.localservers, via
cronwheel.devtools.harness.ProcessCluster). Jobs go in through the public Client (`AsyncClient`: submit_many,
submit, create_schedule); they run in a SEPARATE `cronwheel worker bench.e2e_worker` process with
the Worker's default settings (W1 also with --concurrency 16), whose handlers append their start
time to a file (bench/e2e_worker.py) and return. The worker and this process read the same
machine clock. Each repeat is a fresh cluster; workloads run one after the other on it, the
executions table emptied (TRUNCATE) between them.

- W1: N jobs (20,000) all due at one instant T, submitted from T - 10 s with submit_many in
  SubmitJobs calls of 1,000, one call after the other. enqueue rate = N / (last answer - first
  send); drain = last handler start - T; lag = handler start - T (p50/p99/max); exec/s = N /
  (last start - first start). Once with the Worker's default concurrency, once with 16. For
  scale, the drain's statements alone in the same run (`bench.dispatch`'s batched baseline:
  claims of the Worker's lease size and batch completions of N runs stored as a submit stores
  W1's, with a payload and an idempotency key, from this process on one connection, a statement
  at a time, no gRPC and no worker). Not a strict floor: the node overlaps claims and completions
  on several connections; the drain's CPU line is the bound.
- W2: 2,000 delayed jobs/s offered for 20 s, each due now + uniform(1, 5) s (`delay`): as
  submit_many calls of 100 every 50 ms (open loop: a call is sent on time whether or not the
  previous ones were answered), and again as single submit calls from 64 concurrent callers
  (job k is sent at t0 + k / rate by whichever caller is free). achieved = jobs acknowledged /
  max(the offered duration, last answer - first send); start lag = handler start - the job's run_at.
- S: single SubmitJob calls, closed loop: 64 callers for 10 s (jobs/s, latency p50/p99) and 1
  caller for 10 s (latency p50/p99). Jobs are due in an hour: this measures the submit alone.
  For scale, the same loop of 64 callers against the node's cheapest call (grpc.health.v1
  Health/Check, no Client, no database): its calls/s and the node's CPU a call beside
  SubmitJob's, so what gRPC alone costs on this machine in this hour shows next to the figure.
- W3: 1,000 `* * * * *` schedules created with create_schedule (16 in flight); the handler
  start of each schedule's tick at the next minute boundary B that is at least 5 s away once
  they exist: lag = start - B (p50/p99/max). One boundary per repeat.

Every workload prints duplicates (a job whose handler started more than once, from the records;
and executions the database shows with attempt > 1) and missing (acknowledged jobs, or
schedules' ticks at B, with no handler start), and next to the end-to-end figure what the node
saw inside the same run: the fire lag and start (lease) lag histograms of its metrics endpoint
(the difference over the workload, quantiles interpolated within buckets as Prometheus does)
and the exact fire lag from the rows (fired_at - run_at, fired_at being the database's clock in
the fire batch's transaction; negative for W1's and W2's delayed jobs, queued ahead of their
run_at by FiringConfig.queue_ahead_s, which the claim then takes from their run_at), and the
claims from the rows: the lease lag (started_at - run_at)
and, for the herds (W1, W3), how many claims leased the runs and when the last one began after
the instant (each claim leases its runs with one `now`). `--repeat N` (default 3) prints medians of N repeats; `--quick`
is a small smoke run (1 repeat, small sizes).

Each workload also prints where the machine's cores went while its figure was being made (the
W1 enqueue and the W1 drain from T to the last start; the W2 offer; S's 64 callers; W3 from the
boundary to the last start): the CPU seconds of the node, PostgreSQL, the worker, this process
(the client) and etcd, sampled from /proc every 50 ms (bench/cpu.py), their total against what
the cores could give in that time. A window near 100 % busy is bounded by the work's CPU cost on
this machine, not by waiting: the total divided by the cores is then the least time the same
work can take here.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import re
import statistics
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.cpu import CpuTrace, children
from bench.dispatch import baseline
from cronwheel.client import AsyncClient, JobSpec
from cronwheel.client.worker_policy import LEASE_CALL_RUNS
from cronwheel.devtools.harness import NodeProc, ProcessCluster

PARTITIONS = 64  # the node's default (`cronwheel migrate --partitions`)
LEASE_TTL_S = 5  # the node's default --lease-ttl


@dataclass
class Sizes:
    w1_jobs: int = 20_000
    w1_batch: int = 1_000
    w1_lead_s: float = 10.0
    w2_rate: int = 2_000
    w2_seconds: float = 20.0
    w2_batch: int = 100
    w2_callers: int = 64
    s_seconds: float = 10.0
    s_callers: int = 64
    w3_schedules: int = 1_000


QUICK = Sizes(w1_jobs=2_000, w1_lead_s=5.0, w2_rate=500, w2_seconds=5.0, s_seconds=3.0, w3_schedules=100)


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))]


# ---------------------------------------------------------------------------------------- the node, inside


_SAMPLE = re.compile(r'^(cronwheel_(?:fire|start)_lag_seconds)_bucket\{le="([^"]+)"\} ([0-9.e+-]+)$')


def scrape(url: str) -> dict[str, dict[float, float]]:
    """{histogram name: {upper bound: cumulative count}} of the node's lag histograms."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, dict[float, float]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.setdefault(m.group(1), {})[float(m.group(2))] = float(m.group(3))
    return out


def hist_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Prometheus' histogram_quantile over the difference of two scrapes (seconds; nan if empty)."""
    bounds = sorted(after)
    cum = [after[b] - before.get(b, 0.0) for b in bounds]
    if not cum or cum[-1] <= 0:
        return float("nan")
    rank = q * cum[-1]
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, cum, strict=True):
        if c >= rank:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 1.0)
        prev_b, prev_c = b, c
    return prev_b


class Inside:
    """What the node measured while one workload ran."""

    def __init__(self, c: ProcessCluster, node: NodeProc, job_type: str) -> None:
        self.c, self.url, self.job_type = c, metrics_url(node), job_type
        self.before = scrape(self.url)

    def figures(self, instant: float | None = None) -> dict[str, float]:
        """`instant`: the rows' figures count only the runs due then (W3: the boundary's ticks, not
        an earlier or later minute's)."""
        after = scrape(self.url)
        out: dict[str, float] = {}
        for short, name in (("fire", "cronwheel_fire_lag_seconds"), ("lease", "cronwheel_start_lag_seconds")):
            for q in (0.5, 0.99):
                out[f"node_{short}_p{int(q * 100)}_ms"] = 1000 * hist_quantile(
                    self.before.get(name, {}), after.get(name, {}), q)
        # The workload's rows, read once: run_at, fired_at, started_at (epoch seconds) and attempt.
        rows = self.c.sql(
            "SELECT extract(epoch FROM run_at)::float8, extract(epoch FROM fired_at)::float8, "
            "extract(epoch FROM started_at)::float8, attempt FROM executions WHERE type = %s "
            "AND (%s::float8 IS NULL OR run_at = to_timestamp(%s::float8))", self.job_type, instant, instant)
        lags = [fired - run_at for run_at, fired, _s, _a in rows if fired is not None]
        out["rows_fire_p50_ms"] = 1000 * pct(lags, 0.5)
        out["rows_fire_p99_ms"] = 1000 * pct(lags, 0.99)
        out["rows_fire_max_ms"] = 1000 * max(lags, default=float("nan"))
        out["db_reruns"] = float(self.c.sql("SELECT count(*) FROM executions WHERE type = %s AND attempt > 1",
                                            self.job_type)[0][0])
        out.update(claim_figures([(run_at, started) for run_at, _f, started, attempt in rows
                                  if started is not None and attempt == 1]))
        return out


def claim_figures(rows: list[tuple[float, float]]) -> dict[str, float]:
    """From (run_at, started_at) of each first attempt: the node's claims, which lease their runs
    with one `now` each, so the distinct started_at are the claims that started them (two claims
    at one microsecond would count as one). rows_lease_*: started_at - run_at, the lease lag
    from the rows as the metrics' lease lag is from the histogram; claim_last_ms: the last claim
    after the earliest run_at (W1's T, W3's boundary). What lies between the fire and the
    handler's start shows here: how many claims a herd took and when the last one began."""
    if not rows:
        return {"claims": 0.0, "rows_lease_p50_ms": math.nan, "rows_lease_p99_ms": math.nan,
                "claim_last_ms": math.nan}
    lags = [started - run_at for run_at, started in rows]
    return {"claims": float(len({started for _r, started in rows})),
            "rows_lease_p50_ms": 1000 * pct(lags, 0.5), "rows_lease_p99_ms": 1000 * pct(lags, 0.99),
            "claim_last_ms": 1000 * (max(started for _r, started in rows) - min(r for r, _s in rows))}


def metrics_url(node: NodeProc) -> str:
    for line in node.lines:
        if " metrics on " in line:
            return line.rsplit(" ", 1)[1].strip()
    raise RuntimeError(f"node {node.name} printed no metrics address")


CPU_GROUPS = ("node", "postgres", "worker", "client", "etcd")
CORES = os.cpu_count() or 1


def cpu_trace(c: ProcessCluster, node: NodeProc, worker: NodeProc | None) -> CpuTrace:
    """CPU per process group during a workload (bench/cpu.py): the node, PostgreSQL (postmaster
    and backends), the worker, this process (the client) and etcd."""
    pg = c.pg.pid
    return CpuTrace({
        "node": lambda: [node.pid], "postgres": lambda: [pg, *children(pg)] if pg else [],
        "worker": lambda: [worker.pid] if worker else [], "client": lambda: [os.getpid()],
        "etcd": lambda: [m.pid for m in c.etcd.members if m.pid]})


def cpu_fields(trace: CpuTrace, phase: str, t0: float, t1: float) -> dict[str, float]:
    """The CPU seconds each group used between t0 and t1, as `cpu_<phase>_<group>_s`, and the
    window as `cpu_<phase>_wall_s`."""
    got = trace.between(t0, t1)
    if not got:
        return {}
    return {f"cpu_{phase}_wall_s": t1 - t0, **{f"cpu_{phase}_{g}_s": got.get(g, 0.0) for g in CPU_GROUPS}}


# ---------------------------------------------------------------------------------------- the worker's records


@dataclass(frozen=True)
class Record:
    execution_id: str
    schedule_id: str
    scheduled_for: float
    start: float
    attempt: int


def read_records(path: Path) -> list[Record]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            out.append(Record(parts[0], parts[1], float(parts[2]), float(parts[3]), int(parts[4])))
    return out


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


class WorkerProc:
    """A `cronwheel worker bench.e2e_worker` process and its record file."""

    seq = 0

    def __init__(self, c: ProcessCluster, *extra: str) -> None:
        WorkerProc.seq += 1
        self.c = c
        self.name = f"worker{WorkerProc.seq}"
        self.path = c.workdir / f"{self.name}.records"
        self.proc = c.start_worker(self.name, "bench.e2e_worker", "n1", {"CRONWHEEL_E2E_RECORDS": str(self.path)},
                                   *extra)

    def wait_for(self, n: int, timeout_s: float) -> bool:
        """Until n handler starts are recorded (checked every 0.2 s; a line count, no database)."""
        end = time.time() + timeout_s
        while time.time() < end:
            if count_lines(self.path) >= n:
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> list[Record]:
        self.c.stop_node(self.name, timeout=60)
        return read_records(self.path)


def wait_terminal(c: ProcessCluster, job_type: str, n: int, timeout_s: float = 60) -> None:
    """Until the database shows n succeeded executions of job_type (completions landed)."""
    end = time.time() + timeout_s
    while time.time() < end:
        if c.sql("SELECT count(*) FROM executions WHERE type = %s AND state = 'succeeded'", job_type)[0][0] >= n:
            return
        time.sleep(0.25)


def reset(c: ProcessCluster) -> None:
    with psycopg.connect(c.dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE executions, events")


def checks(ids: set[str], records: list[Record]) -> dict[str, float]:
    """duplicates: acknowledged jobs whose handler started more than once; missing: acknowledged
    jobs with no handler start; unacknowledged: handler starts of jobs whose call failed."""
    per = Counter(r.execution_id for r in records)
    return {"duplicates": float(sum(1 for i in ids if per[i] > 1)),
            "missing": float(sum(1 for i in ids if per[i] == 0)),
            "unacknowledged": float(sum(1 for i in per if i not in ids))}


def first_starts(records: list[Record]) -> dict[str, Record]:
    out: dict[str, Record] = {}
    for r in records:
        if r.execution_id not in out or r.start < out[r.execution_id].start:
            out[r.execution_id] = r
    return out


# ---------------------------------------------------------------------------------------- workloads


def w1(c: ProcessCluster, node: NodeProc, z: Sizes, concurrency: int | None) -> dict[str, float]:
    extra = ("--concurrency", str(concurrency)) if concurrency else ()
    worker = WorkerProc(c, *extra)
    inside = Inside(c, node, "e2e.w1")
    t0 = time.time()
    due = datetime.fromtimestamp(t0 + z.w1_lead_s, UTC)
    batches = [[JobSpec("e2e.w1", {"i": i}, run_at=due) for i in range(k, min(k + z.w1_batch, z.w1_jobs))]
               for k in range(0, z.w1_jobs, z.w1_batch)]

    async def submit() -> tuple[set[str], float, float]:
        ids: set[str] = set()
        async with AsyncClient(node.address) as client:
            first = time.time()
            for b in batches:
                ids.update(j.execution_id for j in await client.submit_many(b))
            return ids, first, time.time()

    with cpu_trace(c, node, worker.proc) as trace:
        ids, first, last = asyncio.run(submit())
        worker.wait_for(len(ids), z.w1_lead_s + 120)
    wait_terminal(c, "e2e.w1", len(ids))
    out = inside.figures()
    records = worker.stop()
    starts = [r.start for r in first_starts(records).values() if r.execution_id in ids]
    T = due.timestamp()
    lags = [s - T for s in starts]
    out.update(checks(ids, records))
    out.update(cpu_fields(trace, "enqueue", first, last))
    if starts:
        out.update(cpu_fields(trace, "drain", T, max(starts)))
    out["sql_drain_s"] = z.w1_jobs / baseline(c.dsn, z.w1_jobs, batched=True, limit=LEASE_CALL_RUNS,
                                                 submitted=True)
    out.update({"enqueue_per_s": len(ids) / (last - first), "enqueue_late_s": last - T,
                "drain_s": max(starts) - T if starts else float("nan"),
                "lag_p50_ms": 1000 * pct(lags, 0.5), "lag_p99_ms": 1000 * pct(lags, 0.99),
                "lag_max_ms": 1000 * max(lags, default=float("nan")),
                "exec_per_s": len(starts) / max(1e-9, max(starts) - min(starts)) if starts else float("nan")})
    reset(c)
    return out


def w2(c: ProcessCluster, node: NodeProc, z: Sizes, single: bool) -> dict[str, float]:
    worker = WorkerProc(c)
    time.sleep(2.0)  # the worker connects and waits in its long poll before the load starts
    inside = Inside(c, node, "e2e.w2")
    rng = random.Random(7)
    total = int(z.w2_rate * z.w2_seconds)
    delays = [timedelta(seconds=rng.uniform(1.0, 5.0)) for _ in range(total)]
    errors: list[str] = []

    async def offer() -> tuple[set[str], float, float]:
        ids: set[str] = set()
        last = 0.0
        async with AsyncClient(node.address) as client:
            t0 = time.time()
            if not single:
                async def call(k: int) -> None:
                    nonlocal last
                    specs = [JobSpec("e2e.w2", {"i": i}, delay=delays[i])
                             for i in range(k, min(k + z.w2_batch, total))]
                    try:
                        got = await client.submit_many(specs)
                    except Exception as exc:  # noqa: BLE001 - counted, reported
                        errors.append(repr(exc)[:200])
                        return
                    ids.update(j.execution_id for j in got)
                    last = max(last, time.time())

                tasks = []
                for n, k in enumerate(range(0, total, z.w2_batch)):
                    wait = t0 + n * z.w2_batch / z.w2_rate - time.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    tasks.append(asyncio.create_task(call(k)))
                await asyncio.gather(*tasks)
            else:
                nxt = 0

                async def caller() -> None:
                    nonlocal nxt, last
                    while nxt < total:
                        k, nxt = nxt, nxt + 1
                        wait = t0 + k / z.w2_rate - time.time()
                        if wait > 0:
                            await asyncio.sleep(wait)
                        try:
                            ex = await client.submit("e2e.w2", {"i": k}, delay=delays[k])
                        except Exception as exc:  # noqa: BLE001 - counted, reported
                            errors.append(repr(exc)[:200])
                            continue
                        ids.add(ex.id)
                        last = max(last, time.time())

                await asyncio.gather(*(caller() for _ in range(z.w2_callers)))
            return ids, t0, last

    with cpu_trace(c, node, worker.proc) as trace:
        ids, first, last = asyncio.run(offer())
    worker.wait_for(len(ids), 30)
    wait_terminal(c, "e2e.w2", len(ids))
    out = inside.figures()
    records = worker.stop()
    lags = [r.start - r.scheduled_for for r in first_starts(records).values() if r.execution_id in ids]
    out.update(checks(ids, records))
    out.update(cpu_fields(trace, "offer", first, last))
    out.update({"offered": float(total), "errors": float(len(errors)),
                "achieved_per_s": len(ids) / max(z.w2_seconds, last - first),
                "lag_p50_ms": 1000 * pct(lags, 0.5), "lag_p99_ms": 1000 * pct(lags, 0.99),
                "lag_max_ms": 1000 * max(lags, default=float("nan"))})
    if errors:
        print(f"  W2 errors ({len(errors)}), e.g. {errors[0]}", flush=True)
    reset(c)
    return out


async def closed_loop(call: Callable[[], Awaitable[object]], callers: int,
                      seconds: float) -> tuple[list[float], float]:
    """`callers` tasks each awaiting `call()` one after another for `seconds` (after one call to
    connect): each call's latency, and the time the loop took."""
    await call()
    lat: list[float] = []
    t0 = time.time()
    end = t0 + seconds

    async def caller() -> None:
        while (t := time.time()) < end:
            await call()
            lat.append(time.time() - t)

    await asyncio.gather(*(caller() for _ in range(callers)))
    return lat, time.time() - t0


def single_submit(node: NodeProc, callers: int, seconds: float) -> tuple[int, list[float], float]:
    """Closed loop: `callers` tasks each submitting one job after another for `seconds`."""
    later = timedelta(hours=1)

    async def go() -> tuple[list[float], float]:
        async with AsyncClient(node.address) as client:
            return await closed_loop(lambda: client.submit("e2e.s", None, delay=later), callers, seconds)

    lat, elapsed = asyncio.run(go())
    return len(lat), lat, elapsed


def cheapest_calls(node: NodeProc, callers: int, seconds: float) -> tuple[int, float]:
    """For scale: the node's cheapest unary call, grpc.health.v1 Health/Check (no Client, no
    database, the node's interceptors but no auth), in the same closed loop as `single_submit`,
    with the Client's per-call deadline (10 s). What any call costs the node and the caller on
    this machine in this hour; the gap to SubmitJob is what a submit adds to it."""

    async def go() -> tuple[list[float], float]:
        async with grpc.aio.insecure_channel(node.address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            req = health_pb2.HealthCheckRequest()
            return await closed_loop(lambda: check(req, timeout=10), callers, seconds)

    lat, elapsed = asyncio.run(go())
    return len(lat), elapsed


def s(c: ProcessCluster, node: NodeProc, z: Sizes) -> dict[str, float]:
    with cpu_trace(c, node, None) as trace:
        n, lat, elapsed = single_submit(node, z.s_callers, z.s_seconds)
        done = time.time()
        n_floor, elapsed_floor = cheapest_calls(node, z.s_callers, z.s_seconds)
        done_floor = time.time()
    n1, lat1, _ = single_submit(node, 1, z.s_seconds)
    out = {**cpu_fields(trace, "s64", done - elapsed, done),
           **cpu_fields(trace, "floor", done_floor - elapsed_floor, done_floor),
           "floor_per_s": n_floor / elapsed_floor,
           "per_s_64": n / elapsed, "p50_ms_64": 1000 * pct(lat, 0.5), "p99_ms_64": 1000 * pct(lat, 0.99),
           "p50_ms_1": 1000 * pct(lat1, 0.5), "p99_ms_1": 1000 * pct(lat1, 0.99), "per_s_1": n1 / z.s_seconds}
    reset(c)
    return out


def w3(c: ProcessCluster, node: NodeProc, z: Sizes) -> dict[str, float]:
    worker = WorkerProc(c)

    async def create() -> tuple[set[str], float]:
        sem = asyncio.Semaphore(16)
        async with AsyncClient(node.address) as client:
            t0 = time.time()

            async def one(i: int) -> str:
                async with sem:
                    sc = await client.create_schedule(f"e2e-{i}-{t0:.0f}", "* * * * *", "e2e.w3", timezone="UTC",
                                                      misfire_policy="skip")
                    return str(sc.id)

            ids = set(await asyncio.gather(*(one(i) for i in range(z.w3_schedules))))
            return ids, len(ids) / (time.time() - t0)

    sids, create_rate = asyncio.run(create())
    boundary = (int(time.time() + 5) // 60 + 1) * 60
    time.sleep(max(0.0, boundary - time.time() - 3))
    inside = Inside(c, node, "e2e.w3")
    end = boundary + 60
    with cpu_trace(c, node, worker.proc) as trace:
        while time.time() < end:
            recs = [r for r in read_records(worker.path) if r.scheduled_for == boundary]
            if len({r.schedule_id for r in recs}) >= len(sids):
                break
            time.sleep(0.2)
    time.sleep(1.0)  # a late duplicate would show here
    out = inside.figures(instant=boundary)
    records = [r for r in worker.stop() if r.scheduled_for == boundary]
    per = Counter(r.schedule_id for r in records)
    firsts: dict[str, float] = {}
    for r in records:
        firsts[r.schedule_id] = min(r.start, firsts.get(r.schedule_id, r.start))
    lags = [firsts[sid] - boundary for sid in sids if sid in firsts]
    if lags:
        out.update(cpu_fields(trace, "herd", boundary, boundary + max(lags)))
    out.update({"duplicates": float(sum(1 for sid in sids if per[sid] > 1)),
                "missing": float(sum(1 for sid in sids if per[sid] == 0)),
                "create_per_s": create_rate,
                "lag_p50_ms": 1000 * pct(lags, 0.5), "lag_p99_ms": 1000 * pct(lags, 0.99),
                "lag_max_ms": 1000 * max(lags, default=float("nan"))})
    return out


# ---------------------------------------------------------------------------------------- report


def show(label: str, runs: list[dict[str, float]], fmt: Callable[[dict[str, float]], str]) -> None:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{label} (median of {len(runs)}): {fmt(med)}", flush=True)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def inside_txt(m: dict[str, float], herd: bool = False) -> str:
    """The node's own figures; for a herd (every run due at one instant) also when its last claim began."""
    last = f", the last {m['claim_last_ms']:.1f} ms after the instant" if herd else ""
    return (f"inside the node: fire lag p50 {m['node_fire_p50_ms']:.1f} / p99 {m['node_fire_p99_ms']:.1f} ms "
            f"(metrics), rows p50 {m['rows_fire_p50_ms']:.1f} / p99 {m['rows_fire_p99_ms']:.1f} / max "
            f"{m['rows_fire_max_ms']:.1f} ms; lease lag p50 {m['node_lease_p50_ms']:.1f} / p99 "
            f"{m['node_lease_p99_ms']:.1f} ms (metrics), rows p50 {m['rows_lease_p50_ms']:.1f} / p99 "
            f"{m['rows_lease_p99_ms']:.1f} ms, claims {m['claims']:,.0f}{last}")


def dup_txt(m: dict[str, float]) -> str:
    return (f"duplicates {m['duplicates']:.0f} (db attempt>1: {m['db_reruns']:.0f}), missing {m['missing']:.0f}"
            + (f", unacknowledged but ran {m['unacknowledged']:.0f}" if m.get("unacknowledged") else ""))


def cpu_txt(m: dict[str, float], phase: str, what: str) -> str:
    """One line: the CPU each group used during `what` and how busy that kept the machine's cores."""
    if f"cpu_{phase}_wall_s" not in m:
        return ""
    wall = m[f"cpu_{phase}_wall_s"]
    used = {g: m[f"cpu_{phase}_{g}_s"] for g in CPU_GROUPS}
    total = sum(used.values())
    parts = ", ".join(f"{g} {v:.2f}" for g, v in used.items())
    return (f"\n    CPU s during {what} ({wall:.2f} s): {parts}; total {total:.2f} of {CORES * wall:.2f} "
            f"({CORES} cores, {100 * total / max(1e-9, CORES * wall):.0f} % busy)")


def fmt_w1(m: dict[str, float]) -> str:
    return (f"enqueue {m['enqueue_per_s']:,.0f} jobs/s (target >= 20,000: {verdict(m['enqueue_per_s'] >= 20_000)}; "
            f"last answer {m['enqueue_late_s']:+.1f} s from T), drain {m['drain_s']:.2f} s after T "
            f"(target <= 1.0 s: {verdict(m['drain_s'] <= 1.0)}), lag p50 {m['lag_p50_ms']:.0f} / p99 "
            f"{m['lag_p99_ms']:.0f} / max {m['lag_max_ms']:.0f} ms, {m['exec_per_s']:,.0f} exec/s; {dup_txt(m)}\n"
            f"    for scale, the drain's statements alone (claims of {LEASE_CALL_RUNS}, batch completions, on rows "
            f"stored like these; one connection, a statement at a time, no gRPC, no worker): "
            f"{m['sql_drain_s']:.2f} s for the same number of runs\n"
            f"    {inside_txt(m, herd=True)}{cpu_txt(m, 'enqueue', 'the enqueue')}"
            f"{cpu_txt(m, 'drain', 'the drain, T to last start')}")


def fmt_w2(m: dict[str, float]) -> str:
    return (f"achieved {m['achieved_per_s']:,.0f} jobs/s of {m['offered']:,.0f} offered, {m['errors']:.0f} calls "
            f"failed (target >= 1,950: {verdict(m['achieved_per_s'] >= 1950)}), start lag p50 {m['lag_p50_ms']:.1f} "
            f"/ p99 {m['lag_p99_ms']:.1f} / max {m['lag_max_ms']:.1f} ms (target p99 <= 50 ms: "
            f"{verdict(m['lag_p99_ms'] <= 50)}); {dup_txt(m)}\n    {inside_txt(m)}"
            f"{cpu_txt(m, 'offer', 'the offer, first send to last answer')}")


def fmt_s(m: dict[str, float]) -> str:
    return (f"64 callers {m['per_s_64']:,.0f} jobs/s (target >= 3,000: {verdict(m['per_s_64'] >= 3000)}), latency "
            f"p50 {m['p50_ms_64']:.1f} / p99 {m['p99_ms_64']:.1f} ms; 1 caller p50 {m['p50_ms_1']:.1f} / p99 "
            f"{m['p99_ms_1']:.1f} ms (target p99 <= 20 ms: {verdict(m['p99_ms_1'] <= 20)}), {m['per_s_1']:,.0f} "
            f"jobs/s{cpu_txt(m, 's64', 'the 64 callers')}\n    {floor_txt(m)}")


def floor_txt(m: dict[str, float]) -> str:
    """S's scale: the node's cheapest call in the same run, and the node CPU a call of each."""
    if "cpu_floor_wall_s" not in m:
        return ""
    per_call = 1000 * m["cpu_floor_node_s"] / max(1.0, m["floor_per_s"] * m["cpu_floor_wall_s"])
    per_job = 1000 * m["cpu_s64_node_s"] / max(1.0, m["per_s_64"] * m["cpu_s64_wall_s"])
    return (f"for scale, the node's cheapest call (grpc.health.v1 Health/Check: no Client, no database), 64 "
            f"callers: {m['floor_per_s']:,.0f} calls/s; node CPU {per_call:.2f} ms a call, against {per_job:.2f} ms "
            f"a SubmitJob{cpu_txt(m, 'floor', 'the Health/Check callers')}")


def fmt_w3(m: dict[str, float]) -> str:
    return (f"handler start - minute boundary p50 {m['lag_p50_ms']:.0f} / p99 {m['lag_p99_ms']:.0f} / max "
            f"{m['lag_max_ms']:.0f} ms (target p99 <= 100 ms: {verdict(m['lag_p99_ms'] <= 100)}); created "
            f"{m['create_per_s']:,.0f} schedules/s; {dup_txt(m)}\n"
            f"    {inside_txt(m, herd=True)}{cpu_txt(m, 'herd', 'the herd, boundary to last start')}")


WORKLOADS = ("W1", "W1c16", "W2", "W2s", "S", "W3")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat: a smoke run")
    ap.add_argument("--repeat", type=int, default=3, help="fresh clusters to take the median of (default 3)")
    ap.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--log-lines", type=int, default=0, metavar="N",
                    help="each handler writes N lines to its attempt's log first (ctx.log; default 0)")
    a = ap.parse_args()
    os.environ["CRONWHEEL_E2E_LOG_LINES"] = str(max(0, a.log_lines))  # the worker processes inherit it
    z = QUICK if a.quick else Sizes()
    repeat = 1 if a.quick else max(1, a.repeat)
    only = [w.strip() for w in a.only.split(",") if w.strip()]
    unknown = set(only) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workloads: {sorted(unknown)}")
    results: dict[str, list[dict[str, float]]] = {w: [] for w in only}
    steps: dict[str, Callable[[ProcessCluster, NodeProc], dict[str, float]]] = {
        "W1": lambda c, n: w1(c, n, z, None), "W1c16": lambda c, n: w1(c, n, z, 16),
        "W2": lambda c, n: w2(c, n, z, False), "W2s": lambda c, n: w2(c, n, z, True),
        "S": lambda c, n: s(c, n, z), "W3": lambda c, n: w3(c, n, z)}
    for r in range(repeat):
        with ProcessCluster(partitions=PARTITIONS, lease_ttl_s=LEASE_TTL_S, fsync=True) as c:
            node = c.start_node("n1")
            c.wait_converged(["n1"])
            for w in WORKLOADS:  # W3 last: its schedules keep firing
                if w in results:
                    got = steps[w](c, node)
                    results[w].append(got)
                    print(f"  repeat {r + 1} {w}: " + ", ".join(f"{k}={v:.1f}" for k, v in got.items()), flush=True)
    labels: dict[str, tuple[str, Callable[[dict[str, float]], str]]] = {
        "W1": (f"W1 {z.w1_jobs:,} jobs due at T, submit_many of {z.w1_batch:,}, Worker defaults", fmt_w1),
        "W1c16": (f"W1 {z.w1_jobs:,} jobs due at T, Worker --concurrency 16", fmt_w1),
        "W2": (f"W2 {z.w2_rate:,} jobs/s for {z.w2_seconds:g} s, submit_many of {z.w2_batch}", fmt_w2),
        "W2s": (f"W2 {z.w2_rate:,} jobs/s for {z.w2_seconds:g} s, single submit, {z.w2_callers} callers", fmt_w2),
        "S": ("S single SubmitJob, closed loop", fmt_s),
        "W3": (f"W3 {z.w3_schedules:,} '* * * * *' schedules, one boundary per repeat", fmt_w3)}
    print("machine: 2 cores, shared with other work; every process of the run on it", flush=True)
    if a.log_lines:
        print(f"each handler writes {a.log_lines} lines to its attempt's log (ctx.log)", flush=True)
    for w in only:
        label, fmt = labels[w]
        show(label, results[w], fmt)


if __name__ == "__main__":
    main()
