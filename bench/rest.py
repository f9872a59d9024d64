"""REST API benchmark: `python -m bench.rest [--seconds 10] [--batches 10] [--repeat 3] [--fire]`.

The same calls over HTTP (`cronwheel rest`, issue 51) and over gRPC, in the same run, against one
real `cronwheel node` process (PostgreSQL, etcd on this machine), alternated round by round, the
order swapped each round (gRPC then HTTP, HTTP then gRPC, ...): the jobs table only grows, so the
second of a pair always met a larger table, and drift hits both:

1. SubmitJob from 64 concurrent callers for --seconds: gRPC with one grpc.aio channel and 64
   tasks; HTTP with 64 keep-alive connections (a minimal asyncio HTTP/1.1 client, so the client's
   cost stays small beside the server's). jobs/s.
2. SubmitJobs of 1,000 jobs, --batches batches one after another. jobs/s.

Reported: the median jobs/s of --repeat rounds for each, and HTTP/gRPC (target >= 0.7x).

`--fire` (issue 51's firing rule): bench.fire's clustered steady run (--clustered K ticks due at
each whole second, jitter 0) while SubmitJob calls arrive at --rate calls/s (open loop) over HTTP,
and the same while they arrive over gRPC; the write lag p99 of each and HTTP/gRPC (target <=
1.15x). `cronwheel rest` is a process of its own, so what the node sees is the same gRPC calls.

Server code imported: none (bench.fire's steady run, the CLI processes and the Client's stubs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import scheduler_pb2, scheduler_pb2_grpc

CALLERS = 64
BATCH = 1000
TYPE = "bench.rest"
LATER = (datetime.now(UTC) + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")  # nothing is dispatched


@contextmanager
def rest_server(address: str) -> Iterator[tuple[str, int]]:
    """`cronwheel rest` in front of `address`; yields (host, port)."""
    proc = subprocess.Popen([sys.executable, "-m", "cronwheel", "rest", "--address", address, "--listen",
                             "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "rest api listening on " not in line:
            raise SystemExit(f"cronwheel rest did not start: {line!r}")
        host, port = line.rsplit("//", 1)[1].strip().rsplit(":", 1)
        yield host, int(port)
    finally:
        proc.terminate()
        proc.wait(15)


class HttpConn:
    """One keep-alive HTTP/1.1 connection; `post` returns the status."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConn:
        return cls(*await asyncio.open_connection(host, port))

    async def post(self, path: str, body: bytes) -> int:
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        await self.reader.readexactly(length)
        return int(head.split(b" ", 2)[1])

    def close(self) -> None:
        self.writer.close()


def job(i: int) -> dict[str, object]:
    return {"type": TYPE, "run_at": LATER, "payload_json": json.dumps({"n": i})}


async def submit_grpc(address: str, seconds: float) -> float:
    async with grpc.aio.insecure_channel(address) as ch:
        stub = scheduler_pb2_grpc.SchedulerServiceStub(ch)
        req = scheduler_pb2.SubmitJobRequest(type=TYPE, payload_json='{"n": 1}')
        req.run_at.FromJsonString(LATER)
        await stub.SubmitJob(req)  # warm the channel

        async def caller(until: float) -> int:
            n = 0
            while time.perf_counter() < until:
                await stub.SubmitJob(req, timeout=30)
                n += 1
            return n

        t0 = time.perf_counter()
        done = await asyncio.gather(*(caller(t0 + seconds) for _ in range(CALLERS)))
        return sum(done) / (time.perf_counter() - t0)


async def submit_http(host: str, port: int, seconds: float) -> float:
    conns = [await HttpConn.open(host, port) for _ in range(CALLERS)]
    body = json.dumps(job(1)).encode()
    try:
        assert await conns[0].post("/v1/jobs", body) == 200

        async def caller(c: HttpConn, until: float) -> int:
            n = 0
            while time.perf_counter() < until:
                status = await c.post("/v1/jobs", body)
                assert status == 200, status
                n += 1
            return n

        t0 = time.perf_counter()
        done = await asyncio.gather(*(caller(c, t0 + seconds) for c in conns))
        return sum(done) / (time.perf_counter() - t0)
    finally:
        for c in conns:
            c.close()


async def batches_grpc(address: str, batches: int) -> float:
    async with grpc.aio.insecure_channel(address) as ch:
        stub = scheduler_pb2_grpc.SchedulerServiceStub(ch)
        reqs = []
        for i in range(BATCH):
            r = scheduler_pb2.SubmitJobRequest(type=TYPE, payload_json=json.dumps({"n": i}))
            r.run_at.FromJsonString(LATER)
            reqs.append(r)
        batch = scheduler_pb2.SubmitJobsRequest(jobs=reqs)
        t0 = time.perf_counter()
        for _ in range(batches):
            await stub.SubmitJobs(batch, timeout=60)
        return batches * BATCH / (time.perf_counter() - t0)


async def batches_http(host: str, port: int, batches: int) -> float:
    conn = await HttpConn.open(host, port)
    body = json.dumps({"jobs": [job(i) for i in range(BATCH)]}).encode()
    try:
        t0 = time.perf_counter()
        for _ in range(batches):
            status = await conn.post("/v1/jobs:batch", body)
            assert status == 200, status
        return batches * BATCH / (time.perf_counter() - t0)
    finally:
        conn.close()


def throughput(seconds: float, batches: int, repeat: int) -> None:
    with ProcessCluster(partitions=16, lease_ttl_s=5, fsync=True) as c:
        node = c.start_node("n1")
        c.wait_converged(["n1"])
        with rest_server(node.address) as (host, port):
            got: dict[str, list[float]] = {"submit_grpc": [], "submit_http": [], "batch_grpc": [], "batch_http": []}
            runs: dict[str, Callable[[], Coroutine[Any, Any, float]]] = {
                "submit_grpc": lambda: submit_grpc(node.address, seconds),
                "submit_http": lambda: submit_http(host, port, seconds),
                "batch_grpc": lambda: batches_grpc(node.address, batches),
                "batch_http": lambda: batches_http(host, port, batches)}
            for r in range(repeat):
                for kind in ("submit", "batch"):
                    for via in ("grpc", "http")[::1 if r % 2 == 0 else -1]:
                        got[f"{kind}_{via}"].append(asyncio.run(runs[f"{kind}_{via}"]()))
    med = {k: statistics.median(v) for k, v in got.items()}
    for what, g, h in (("SubmitJob, 64 callers", "submit_grpc", "submit_http"),
                       (f"SubmitJobs of {BATCH:,}", "batch_grpc", "batch_http")):
        ratio = med[h] / med[g]
        print(f"{what}: gRPC {med[g]:,.0f} jobs/s, HTTP {med[h]:,.0f} jobs/s, HTTP/gRPC {ratio:.2f}x "
              f"(target >= 0.7x: {'met' if ratio >= 0.7 else 'NOT met'}; median of {repeat}: gRPC "
              f"{', '.join(f'{x:,.0f}' for x in got[g])}; HTTP {', '.join(f'{x:,.0f}' for x in got[h])})", flush=True)


# ------------------------------------------------------------------------------ --fire


@contextmanager
def paced_load(rate: float, over_http: bool, address: str) -> Iterator[None]:
    """SubmitJob at `rate` calls/s (open loop, on a thread) until the context ends."""
    stop = threading.Event()
    errors: list[BaseException] = []
    statuses: dict[object, int] = {}  # answers by HTTP status / gRPC code name, printed at the end

    async def drive(send: object) -> None:
        assert callable(send)
        pending: set[asyncio.Task[object]] = set()
        t0, i = time.perf_counter(), 0
        while not stop.is_set():
            i += 1
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.ensure_future(send())
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)

    async def over_grpc() -> None:
        async with grpc.aio.insecure_channel(address) as ch:
            stub = scheduler_pb2_grpc.SchedulerServiceStub(ch)
            req = scheduler_pb2.SubmitJobRequest(type=TYPE, payload_json='{"n": 1}')
            req.run_at.FromJsonString(LATER)
            async def send() -> None:
                try:
                    await stub.SubmitJob(req, timeout=30)
                    statuses[200] = statuses.get(200, 0) + 1
                except grpc.aio.AioRpcError as err:
                    statuses[err.code().name] = statuses.get(err.code().name, 0) + 1

            await drive(send)

    async def over_rest(host: str, port: int) -> None:
        free = [await HttpConn.open(host, port) for _ in range(CALLERS)]
        body = json.dumps(job(1)).encode()

        async def send() -> None:
            c = free.pop() if free else await HttpConn.open(host, port)
            status = await c.post("/v1/jobs", body)
            statuses[status] = statuses.get(status, 0) + 1
            free.append(c)

        await drive(send)

    def run() -> None:
        try:
            if over_http:
                with rest_server(address) as (host, port):
                    asyncio.run(over_rest(host, port))
            else:
                asyncio.run(over_grpc())
        except BaseException as exc:  # reported by the context's exit
            errors.append(exc)

    t = threading.Thread(target=run, name="paced-load", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(60)
        print(f"  load over {'HTTP' if over_http else 'gRPC'}: answers {statuses}", flush=True)
        if errors:
            raise RuntimeError("the load failed") from errors[0]


def fire_under_load(clustered: int, seconds: float, rate: float, repeat: int) -> None:
    from bench.fire import steady

    p99: dict[str, list[float]] = {"grpc": [], "http": []}
    for n in range(repeat):
        for via in ("grpc", "http")[::1 if n % 2 == 0 else -1]:
            r = steady(10 * clustered, seconds, 0.0,
                       load=lambda c, addr, via=via: paced_load(rate, via == "http", addr))  # type: ignore[misc]
            p99[via].append(r["write_p99_ms"])
    g, h = statistics.median(p99["grpc"]), statistics.median(p99["http"])
    print(f"bench.fire clustered ({clustered:,} ticks per whole second) write lag p99 with {rate:g} SubmitJob "
          f"calls/s: over gRPC {g:.1f} ms, over HTTP {h:.1f} ms, HTTP/gRPC {h / g:.2f}x (target <= 1.15x: "
          f"{'met' if h / g <= 1.15 else 'NOT met'}; median of {repeat}: gRPC {p99['grpc']}, HTTP {p99['http']})",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10, help="duration of each SubmitJob round")
    ap.add_argument("--batches", type=int, default=10, help="SubmitJobs batches of 1,000 per round")
    ap.add_argument("--repeat", type=int, default=3, help="alternated rounds to take the median of")
    ap.add_argument("--fire", action="store_true", help="also: bench.fire's clustered write lag under API load")
    ap.add_argument("--clustered", type=int, default=1000, help="--fire: ticks due at each whole second")
    ap.add_argument("--fire-seconds", type=float, default=20, help="--fire: the steady window")
    ap.add_argument("--rate", type=float, default=500, help="--fire: SubmitJob calls/s")
    ap.add_argument("--skip-throughput", action="store_true")
    a = ap.parse_args(argv)
    if not a.skip_throughput:
        throughput(a.seconds, a.batches, a.repeat)
    if a.fire:
        fire_under_load(a.clustered, a.fire_seconds, a.rate, a.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
