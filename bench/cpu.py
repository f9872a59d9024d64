"""CPU time per process of a benchmark run, sampled from /proc (Linux): where the machine's cores
went during a workload, so a figure can be read against what the work cost.

`CpuTrace` samples, every `every_s` in a thread, the user + system CPU seconds of the processes
of each group (the node, the worker, PostgreSQL's postmaster and every process whose parent it
is, etcd, this process: its own sampling included, about 1 % of a core), and `between(t0, t1)`
gives each group's CPU seconds between two wall times (interpolated between samples). Each
process counts from its first sample; PostgreSQL's children are looked up again every second, so
a connection opened during the run counts from then (its first second or less is missed); a
process that exits keeps what its last sample saw. Elsewhere than Linux the trace is empty and
`between` answers {}.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


def cpu_s(pid: int) -> float | None:
    """utime + stime of a process in seconds, None if it is gone (or there is no /proc)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15 of stat)


def children(parent: int) -> list[int]:
    """Pids whose parent is `parent` (one pass over /proc)."""
    out: list[int] = []
    for d in PROC.iterdir() if PROC.is_dir() else ():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == parent:
            out.append(int(d.name))
    return out


class CpuTrace:
    """Samples the CPU seconds of process groups in a background thread (see the module)."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]], every_s: float = 0.05) -> None:
        self.groups, self.every_s = groups, every_s
        self.times: list[float] = []
        self.samples: list[dict[str, float]] = []
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._pids: dict[str, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-trace", daemon=True)

    def __enter__(self) -> CpuTrace:
        if PROC.is_dir():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        looked = 0.0
        while True:
            now = time.time()
            if now - looked >= 1.0:
                self._pids = {g: find() for g, find in self.groups.items()}
                looked = now
            sample: dict[str, float] = {}
            for g, pids in self._pids.items():
                total = 0.0
                for pid in pids:
                    got = cpu_s(pid)
                    if got is not None:
                        self._first.setdefault(pid, got)
                        self._last[pid] = got
                    total += self._last.get(pid, 0.0) - self._first.get(pid, 0.0)
                sample[g] = total
            self.times.append(now)
            self.samples.append(sample)
            if self._stop.wait(self.every_s):
                return

    def _at(self, t: float) -> dict[str, float]:
        i = bisect.bisect_left(self.times, t)
        if i == 0:
            return self.samples[0]
        if i >= len(self.times):
            return self.samples[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        a, b = self.samples[i - 1], self.samples[i]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return {g: a.get(g, 0.0) + f * (b.get(g, 0.0) - a.get(g, 0.0)) for g in b}

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per group between wall times t0 and t1 ({} without samples)."""
        if not self.samples:
            return {}
        a, b = self._at(t0), self._at(t1)
        return {g: max(0.0, b.get(g, 0.0) - a.get(g, 0.0)) for g in b}
