"""HTTP targets against SDK workers at one minute boundary: `python -m bench.http_targets [--repeat N]`.

Issue 50's figure: 1,000 `* * * * *` schedules with HTTP targets due at one instant, called by
one doer (`cronwheel worker --http`, a separate process, its default settings) against a local
receiver (a ThreadingHTTPServer in this process that answers 200 at once and records when each
request arrived, on this machine's clock). lag = arrival - boundary (p50/p99/max). In the same
run, on the same cluster, W3 of bench.e2e (1,000 schedules, SDK worker handlers; its handler
start - boundary) at the next boundary: the target is H3 p99 <= W3 p99 + 50 ms.

What runs: bench.e2e's cluster (PostgreSQL with fsync, one etcd, one node with its defaults);
H3's schedules are deleted before W3 creates its own, so each boundary has one herd. Imports
from bench.e2e only (its W3, its cluster settings and `pct`): nothing of cluster/ or storage/.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.e2e import LEASE_TTL_S, PARTITIONS, Sizes, pct, w3
from cronwheel.client import AsyncClient
from cronwheel.devtools.harness import NodeProc, ProcessCluster

SCHEDULES = 1000


@contextmanager
def receiver() -> Iterator[tuple[str, list[tuple[float, str]]]]:
    """(url, arrivals): each request's (arrival time, Cronwheel-Scheduled-For)."""
    got: list[tuple[float, str]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            at = time.time()
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                got.append((at, self.headers.get("Cronwheel-Scheduled-For", "")))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # the listen backlog, set before listen(): the default 5 drops SYNs of a herd
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tick", got
    finally:
        server.shutdown()
        server.server_close()


async def _schedules(address: str, url: str | None, delete: list[str] | None = None) -> list[str]:
    sem = asyncio.Semaphore(16)
    async with AsyncClient(address) as client:
        async def one(i: int) -> str:
            async with sem:
                if delete is not None:
                    await client.delete(delete[i])
                    return delete[i]
                s = await client.create_schedule(f"h3-{i}-{time.time():.0f}", "* * * * *", "", timezone="UTC",
                                                 misfire_policy="skip", target={"url": url, "timeout_s": 10})
                return str(s.id)

        n = len(delete) if delete is not None else SCHEDULES
        return list(await asyncio.gather(*(one(i) for i in range(n))))


def h3(c: ProcessCluster, node: NodeProc) -> dict[str, float]:
    with receiver() as (url, got):
        doer = c._spawn("doer", [sys.executable, "-m", "cronwheel", "worker", "--http", "--address", node.address,
                                 "--worker-id", "doer", "--egress-allow", "127.0.0.0/8"], None, "worker ", True)
        ids = asyncio.run(_schedules(node.address, url))
        boundary = (int(time.time() + 5) // 60 + 1) * 60
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(boundary))
        end = boundary + 60
        while time.time() < end and sum(1 for _, s in got if s.startswith(stamp)) < len(ids):
            time.sleep(0.2)
        time.sleep(1.0)
        lags = [at - boundary for at, s in got if s.startswith(stamp)]
        asyncio.run(_schedules(node.address, None, ids))
        c.stop_node(doer.name, timeout=60)
    return {"arrived": float(len(lags)), "missing": float(len(ids) - len(lags)),
            "lag_p50_ms": 1000 * pct(lags, 0.5), "lag_p99_ms": 1000 * pct(lags, 0.99),
            "lag_max_ms": 1000 * max(lags, default=float("nan"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="fresh clusters to take the median of (default 1)")
    a = ap.parse_args()
    runs: list[dict[str, float]] = []
    for r in range(max(1, a.repeat)):
        with ProcessCluster(partitions=PARTITIONS, lease_ttl_s=LEASE_TTL_S, fsync=True) as c:
            node = c.start_node("n1", "--egress-allow", "127.0.0.0/8")  # the receiver is on loopback
            c.wait_converged(["n1"])
            h = h3(c, node)
            w = w3(c, node, Sizes())
            runs.append({**{f"h3_{k}": v for k, v in h.items()}, "w3_lag_p99_ms": w["lag_p99_ms"],
                         "w3_lag_p50_ms": w["lag_p50_ms"], "w3_missing": w["missing"]})
            print(f"  repeat {r + 1}: " + ", ".join(f"{k}={v:.1f}" for k, v in runs[-1].items()), flush=True)
    m = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    ok = m["h3_lag_p99_ms"] <= m["w3_lag_p99_ms"] + 50
    print(f"H3 {SCHEDULES:,} HTTP-target schedules at one boundary (median of {len(runs)}): arrival - boundary "
          f"p50 {m['h3_lag_p50_ms']:.0f} / p99 {m['h3_lag_p99_ms']:.0f} / max {m['h3_lag_max_ms']:.0f} ms, "
          f"missing {m['h3_missing']:.0f}; W3 (SDK workers, same run) p50 {m['w3_lag_p50_ms']:.0f} / p99 "
          f"{m['w3_lag_p99_ms']:.0f} ms; target H3 p99 <= W3 p99 + 50 ms: {'met' if ok else 'NOT met'}", flush=True)


if __name__ == "__main__":
    main()
