"""Helpers for end-to-end tests: run cronwheel as the user would, as real processes."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

CRONWHEEL = [sys.executable, "-m", "cronwheel"]


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CRONWHEEL, *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; read its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
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
