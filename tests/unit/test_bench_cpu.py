"""bench/cpu.py: the CPU a process group used between two instants, interpolated between samples,
and, on Linux, read from /proc for real processes (a busy child shows its CPU, a sleeping one
none)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from bench.cpu import CpuTrace, children, cpu_s
from bench.e2e import cpu_txt


def test_between_interpolates_each_group_between_samples() -> None:
    trace = CpuTrace({})
    trace.times = [10.0, 11.0, 12.0]
    trace.samples = [{"node": 0.0, "pg": 1.0}, {"node": 0.5, "pg": 1.0}, {"node": 1.5, "pg": 3.0}]
    got = trace.between(10.5, 11.5)
    assert math.isclose(got["node"], 0.75) and math.isclose(got["pg"], 1.0)
    assert trace.between(0.0, 99.0) == {"node": 1.5, "pg": 2.0}  # clamped to the samples taken
    assert CpuTrace({}).between(0.0, 1.0) == {}


def test_the_report_line_sums_the_groups_against_the_cores() -> None:
    m = {"cpu_x_wall_s": 2.0, "cpu_x_node_s": 1.0, "cpu_x_postgres_s": 1.5, "cpu_x_worker_s": 0.5,
         "cpu_x_client_s": 0.0, "cpu_x_etcd_s": 0.0}
    line = cpu_txt(m, "x", "the test")
    assert "node 1.00, postgres 1.50, worker 0.50, client 0.00, etcd 0.00; total 3.00 of" in line
    assert cpu_txt({}, "x", "the test") == ""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")
def test_a_busy_child_shows_its_cpu_and_a_sleeping_one_none() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.5: pass\ntime.sleep(30)"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)  # both interpreters started
        assert {busy.pid, idle.pid} <= set(children(os.getpid()))
        with CpuTrace({"busy": lambda: [busy.pid], "idle": lambda: [idle.pid]}, every_s=0.02) as trace:
            time.sleep(0.05)
            t0, before = time.time(), cpu_s(busy.pid) or 0.0
            last, deadline = -1.0, t0 + 20
            while time.time() < deadline:  # until its busy loop is over: its CPU stops growing
                time.sleep(0.2)
                now = cpu_s(busy.pid) or 0.0
                if now == last:
                    break
                last = now
            t1 = time.time()
            time.sleep(0.05)
        got = trace.between(t0, t1)
        assert got["busy"] >= 0.1 and abs(got["busy"] - (last - before)) <= 0.05, (got, before, last)
        assert got["idle"] <= 0.02, got
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
