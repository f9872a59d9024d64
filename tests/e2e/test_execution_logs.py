"""Execution logs end to end (issue 53): a real node, a `cronwheel worker` process running
tests/e2e/logs_jobs.py, the CLI as a process and the Client. Each attempt's lines read back in
order through the CLI and the Client; `--follow` prints a line within a second of the handler
writing it; a handler logging 10 MB keeps its head and tail with the mark while the node's and
the worker's memory stay bounded; the scaling gauges match the database on a real node, and every
metric the docs' KEDA and HPA examples query is one the node exports."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from google.protobuf.duration_pb2 import Duration
from prometheus_client.parser import text_string_to_metric_families

from cronwheel.client import AsyncClient, Client, RetryPolicy
from cronwheel.devtools.harness import NodeProc, ProcessCluster
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc
from tests.deploy_files import exported_sample_names, metric_names, scaling_example_exprs

from .api_cluster import TOKENS, api_cluster
from .helpers import CRONWHEEL, run_cli, wait_until
from .ops_helpers import samples, scrape

pytestmark = [pytest.mark.e2e]
ADMIN = TOKENS["admin"][0]
ACME = TOKENS["acme"][0]  # submits and reads: a tenant's view; the worker serves every tenant (admin)
THREE = [(a, f"attempt {a}: line {i}", level, logger)
         for a in (1, 2, 3) for i, level, logger in ((1, "INFO", "jobs.logs"), (2, "INFO", ""),
                                                     (3, "WARNING", "jobs.logs"))]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster(partitions=4) as (c, address):
        c.start_worker("logs-worker", "tests.e2e.logs_jobs", env={"CRONWHEEL_TOKEN": ADMIN})
        yield c, address


@pytest.fixture
def cw(cluster: tuple[ProcessCluster, str]) -> Iterator[Client]:
    with Client(cluster[1], token=ACME) as c:
        yield c


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1))  # type: ignore[union-attr]


def test_three_attempts_of_three_lines_read_in_order_through_the_cli_and_the_clients(cw: Client,
                                                                                      cluster: tuple[Any, str]) -> None:
    job = cw.submit("logs.three", {}, retry_policy=RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=0.2),
                                                                backoff_multiplier=1.0))
    done = cw.wait(job.id, timeout=60)
    assert str(done.state) == "succeeded" and done.attempt == 3
    got = [(ln.attempt, ln.message, ln.level, ln.logger) for ln in cw.logs(job.id)]
    assert got == THREE
    assert [ln.seq for ln in cw.logs(job.id)] == [1, 2, 3] * 3
    assert [ln.message for ln in cw.logs(job.id, attempt=2)] == [m for a, m, _, _ in THREE if a == 2]

    async def via_async() -> list[tuple[int, str]]:
        async with AsyncClient(cluster[1], token=ACME) as ac:
            return [(ln.attempt, ln.message) async for ln in ac.logs(job.id)]

    assert asyncio.run(via_async()) == [(a, m) for a, m, _, _ in THREE]
    out = run_cli("exec", "logs", job.id, "--address", cluster[1], "--token", ACME)
    assert out.returncode == 0, out.stderr
    printed = out.stdout.splitlines()
    assert len(printed) == 9
    for line, (a, message, level, logger) in zip(printed, THREE, strict=True):
        assert line.startswith(f"#{a}  ") and line.endswith(f"{level:<7} {logger + ': ' if logger else ''}{message}")
    js = run_cli("exec", "logs", job.id, "--attempt", "3", "--json", "--address", cluster[1], "--token", ACME)
    assert [(d["attempt"], d["seq"], d["message"]) for d in map(json.loads, js.stdout.splitlines())] == [
        (3, i, f"attempt 3: line {i}") for i in (1, 2, 3)]
    bad = run_cli("exec", "logs", job.id, "--attempt", "0", "--address", cluster[1], "--token", ACME)
    assert bad.returncode != 0 and "--attempt" in bad.stderr


def test_follow_prints_each_new_line_within_a_second_of_the_handler_writing_it(cw: Client,
                                                                               cluster: tuple[Any, str]) -> None:
    # The handler logs one line, then waits for the gate: the test opens it once the follower
    # printed that line (a new process may take seconds to start on a loaded machine), so the 8
    # lines measured are written while the follower follows.
    gate = Path(tempfile.mkdtemp(prefix="follow-")) / "gate"
    job = cw.submit("logs.slow", {"lines": 8, "every_s": 0.5, "gate": str(gate)})
    seen: list[tuple[float, str]] = []
    with subprocess.Popen([*CRONWHEEL, "exec", "logs", job.id, "--follow", "--address", cluster[1],
                           "--token", ACME], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "waiting for the gate" in line:
                    gate.touch()
                    continue
                seen.append((time.time(), line.rstrip("\n")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = proc.wait(60)  # it ends by itself once the execution is final
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(10)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert len(seen) == 8, seen
    delays = [arrived - float(re.search(r"written_at=([\d.]+)", line).group(1))  # type: ignore[union-attr]
              for arrived, line in seen]
    print(f"--follow delays (s): {[round(d, 3) for d in delays]}")
    assert max(delays) < 1.0, delays
    assert [int(re.search(r"line (\d+) written", ln).group(1)) for _, ln in seen] == list(range(1, 9))  # type: ignore[union-attr]


def test_a_handler_logging_10_mb_keeps_head_and_tail_with_the_mark_in_bounded_memory(
        cw: Client, cluster: tuple[ProcessCluster, str]) -> None:
    c, _ = cluster
    node, worker = c.nodes["n1"], c.nodes["logs-worker"]
    warm = cw.submit("logs.slow", {"lines": 3, "every_s": 0})  # the paths warmed before measuring
    assert str(cw.wait(warm.id, timeout=60).state) == "succeeded"
    before = {p.name: (rss_kib(p.pid), rss_kib(p.pid, "VmHWM")) for p in (node, worker)}
    job = cw.submit("logs.flood", {"mb": 10})
    assert str(cw.wait(job.id, timeout=120).state) == "succeeded"
    after = {p.name: (rss_kib(p.pid), rss_kib(p.pid, "VmHWM")) for p in (node, worker)}
    lines = list(cw.logs(job.id))
    marks = [i for i, ln in enumerate(lines) if ln.logger == "cronwheel" and "cut here" in ln.message]
    assert len(marks) == 1
    head, mark, tail = lines[:marks[0]], lines[marks[0]], lines[marks[0] + 1:]
    assert [ln.seq for ln in head] == list(range(1, len(head) + 1)) and head[0].message.startswith("00000001 ")
    assert mark.seq == len(head) + 1 and tail[-1].seq == 10_000 and tail[-1].message.startswith("00010000 ")
    assert [ln.seq for ln in tail] == list(range(tail[0].seq, 10_001))
    cut = 10_000 - len(head) - len(tail)
    assert f"{cut} lines" in mark.message
    stored = sum(len(ln.message.encode()) for ln in lines)
    assert 900 * 1024 < stored <= 1024 * 1024 + 1024
    growth = {k: ((after[k][0] - before[k][0]) / 1024, (after[k][1] - before[k][1]) / 1024) for k in before}
    print(f"RSS growth MiB (current, peak): node {growth['n1']}, worker {growth['logs-worker']}; "
          f"lines kept {len(lines)} of 10000, {stored} bytes")
    assert growth["n1"][0] < 20 and growth["n1"][1] < 20
    assert growth["logs-worker"][0] < 50 and growth["logs-worker"][1] < 50


def _db_signals(dsn: str) -> dict[tuple[str, str], tuple[int, datetime | None, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT priority, count(*) FILTER (WHERE state = 'queued' AND run_at <= now()),"
            " min(run_at) FILTER (WHERE state = 'queued' AND run_at <= now()),"
            " count(*) FILTER (WHERE state = 'running') FROM executions GROUP BY priority").fetchall()
    return {("default", r[0]): (int(r[1]), r[2], int(r[3])) for r in rows}


def _gauges(node: NodeProc) -> dict[tuple[str, str], tuple[float, float, float]]:
    s = samples(node)
    out = {}
    for (name, labels), v in s.items():
        if name == "cronwheel_queue_ready":
            key = (dict(labels)["queue"], dict(labels)["priority"])
            out[key] = (v, s[("cronwheel_queue_oldest_ready_age_seconds", labels)],
                        s[("cronwheel_queue_running", labels)])
    return out


def test_the_scaling_gauges_match_the_databases_counts_on_a_real_node(cw: Client,
                                                                      cluster: tuple[ProcessCluster, str]) -> None:
    c, address = cluster
    node = c.nodes["n1"]
    for priority, n in (("critical", 3), ("default", 5), ("bulk", 2)):
        for _ in range(n):
            cw.submit("nobody.serves", {}, priority=priority)  # ready: no worker handles this type
    cw.submit("nobody.serves", {}, delay=timedelta(hours=1))  # queued ahead or scheduled: not ready
    import grpc

    with grpc.insecure_channel(address) as ch:  # two running: leased, never reported
        got = dispatch_pb2_grpc.DispatchServiceStub(ch).LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
            worker_id="w-scaling", job_types=["nobody.serves"], max_count=2, lease_duration=Duration(seconds=600)),
            metadata=(("authorization", f"Bearer {ADMIN}"),), timeout=20)
    assert len(got.executions) == 2
    db = _db_signals(c.dsn)
    assert sum(r for r, _, _ in db.values()) == 8 and sum(n for _, _, n in db.values()) == 2

    def matches() -> dict[Any, Any] | None:
        g = _gauges(node)
        for key in set(g) | set(db):
            ready, oldest, running = db.get(key, (0, None, 0))
            gr, gage, grun = g.get(key, (0.0, 0.0, 0.0))
            if (gr, grun) != (ready, running):
                return None
            if oldest is not None:  # the age at the node's last refresh (every 15 s)
                seen_oldest = datetime.now(UTC) - timedelta(seconds=gage)
                if not oldest <= seen_oldest + timedelta(seconds=1) <= oldest + timedelta(seconds=18):
                    return None
        return g

    g = wait_until(matches, 45, "the scaling gauges to equal the database's counts",
                   detail=lambda: (_gauges(node), db))
    # Every default-queue pair is exported from the start (the gauges fall to 0, never vanish), so
    # the set alone says nothing: each priority submitted to shows its ready runs.
    assert {p for q, p in g if q == "default"} >= {"critical", "default", "bulk"}
    assert all(g[("default", p)][0] > 0 for p in ("critical", "default", "bulk")), g


def test_every_metric_the_keda_and_hpa_examples_query_is_exported_by_a_real_node(
        cluster: tuple[ProcessCluster, str]) -> None:
    exported = exported_sample_names(list(text_string_to_metric_families(scrape(cluster[0].nodes["n1"]))))
    exprs = scaling_example_exprs()
    kinds = {where for where, _ in exprs}
    assert {"ScaledObject", "HorizontalPodAutoscaler"} <= kinds, kinds
    names = set()
    for where, expr in exprs:
        missing = metric_names(expr) - exported
        assert not missing, f"docs/operating.md {where}: {sorted(missing)} not exported by a node"
        names |= metric_names(expr)
    assert {"cronwheel_queue_ready", "cronwheel_queue_running", "cronwheel_queue_oldest_ready_age_seconds"} <= names
