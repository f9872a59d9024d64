"""Helpers for end-to-end tests: run cronwheel as the user would, as real processes.

Tests never sleep to "let things happen": they wait for the thing itself with `wait_until` (or
`wait_until_async` in-process), and where a test must show that something does NOT happen, it
watches for a named, bounded window with `observe_for`.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

CRONWHEEL = [sys.executable, "-m", "cronwheel"]


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CRONWHEEL, *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def wait_until(predicate: Callable[[], T | None], timeout_s: float, what: str, *, interval_s: float = 0.05,
               detail: Callable[[], object] | None = None) -> T:
    """Poll `predicate` every `interval_s` until it returns something truthy, and return that.
    After `timeout_s`, fail with "timed out after Ns waiting for <what>" (and `detail()`, the state
    seen at that moment, when given)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            seen = f"; seen: {detail()!r}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{seen}")
        time.sleep(interval_s)


async def wait_until_async(predicate: Callable[[], Awaitable[T | None]], timeout_s: float, what: str, *,
                           interval_s: float = 0.05) -> T:
    """`wait_until` for in-process tests: `predicate` is awaited, the loop keeps running between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = await predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


def observe_for(seconds: float, check: Callable[[], object], *, interval_s: float = 0.05) -> None:
    """A bounded observation window, to show that something does NOT happen: `check` (which
    asserts) runs every `interval_s` for `seconds`, and once more at the end. The caller names
    why the window is long enough (what had its chance to happen inside it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    check()


class SqlRunner(Protocol):
    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]: ...


def cursors_past(c: SqlRunner, schedule_ids: Sequence[object], t: datetime) -> bool:
    """True once the fire cursor (schedule_due.next_run_at) of every schedule in `schedule_ids`
    is past `t`: every tick at or before `t` had its turn to fire (written, skipped, or lost:
    the tests then check which)."""
    [(n,)] = c.sql("SELECT count(*) FROM schedule_due WHERE schedule_id = ANY(%s) AND next_run_at > %s",
                   list(schedule_ids), t)
    return int(n) == len(set(schedule_ids))


def proc_state(pid: int) -> str:
    """The kernel's one-letter state of a live process: 'T' while SIGSTOPped, 'Z' once a zombie."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; read its state.
    try:
        return proc_state(pid) != "Z"
    except OSError:
        return False


class LineReader:
    """Reads a process's stdout on a thread so tests can wait for lines with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line starting with {prefix!r} in {timeout}s: {self.seen!r}")
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    raise AssertionError(
                        f"process exited ({self.proc.returncode}) before {prefix!r}: {self.seen!r}"
                    ) from None
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line


def ready_info(line: str) -> dict[str, Any]:
    return dict(json.loads(line.split(" ", 1)[1]))


def ok_json(r: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a CLI command printed, which must have exited 0."""
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def one_line_error(r: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The one `cronwheel: error: ...` line a failed CLI command printed (exit `code`, no
    traceback), which must contain every needle."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("cronwheel: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]
