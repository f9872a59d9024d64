"""`cronwheel dev` as a user runs it: starts real servers, prints them, Ctrl-C leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from .helpers import CRONWHEEL, LineReader, pid_alive, ready_info

pytestmark = pytest.mark.e2e


def test_dev_starts_servers_and_sigint_leaves_no_process_or_dir() -> None:
    proc = subprocess.Popen(
        [*CRONWHEEL, "dev"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        reader = LineReader(proc)
        line = reader.wait_for("ready ", timeout=120)
        seen = reader.seen
        info = ready_info(line)
        pids = [info["postgres"]["pid"], *info["etcd"]["pids"]]
        dirs = [info["postgres"]["dir"], info["etcd"]["dir"]]
        assert all(pid_alive(p) for p in pids), seen
        assert all(os.path.isdir(d) for d in dirs)
        assert any(ln.startswith("postgres ") for ln in seen)
        assert any(ln.startswith("etcd ") for ln in seen)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert [p for p in pids if pid_alive(p)] == []
    assert [d for d in dirs if os.path.exists(d)] == []
