"""`cronwheel dev` for debugging, as a user runs it: `--logs` shows node and worker logs prefixed
by process name, the names are the ones `cronwheel status` lists, a node that dies is reported
at once and restarted, and a crash loop stops the dev cluster with the reason."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from .helpers import CRONWHEEL, LineReader, pid_alive, ready_info, run_cli, wait_until

pytestmark = pytest.mark.e2e


@contextmanager
def dev(*args: str) -> Iterator[tuple[subprocess.Popen[str], LineReader]]:
    proc = subprocess.Popen([*CRONWHEEL, "dev", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc, LineReader(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def status_members(address: str) -> set[str]:
    out = run_cli("status", "--json", "--address", address)
    return {m["node_id"] for m in json.loads(out.stdout)["members"]} if out.returncode == 0 else set()


def test_dev_logs_shows_each_process_logs_under_the_name_status_lists_and_restarts_a_dead_node() -> None:
    with dev("--logs", "--nodes", "2") as (proc, reader):
        info = ready_info(reader.wait_for("ready ", timeout=120))
        names = [n["name"] for n in info["nodes"]]
        assert names == ["node-1", "node-2"] and [w["name"] for w in info["workers"]] == ["worker-1", "worker-http"]
        # Node logs (the JSON log, shortened) and node stdout, prefixed by the process name.
        acquired = "[node-1] info partition acquired event=partition_acquired partition="
        assert any(ln.startswith(acquired) for ln in reader.seen)
        assert any(ln.startswith("[node-2] node node-2 listening on ") for ln in reader.seen)
        reader.wait_for("[worker-1] ", timeout=60)
        first = info["nodes"][0]["address"]
        assert wait_until(lambda: status_members(first) == set(names), 30, "status to list node-1 and node-2")

        victim = info["nodes"][1]
        subprocess.run(["kill", "-KILL", str(victim["pid"])], check=True)
        reader.wait_for(f"[dev] node-2 (pid {victim['pid']}) killed by SIGKILL", timeout=10)
        back = reader.wait_for("[dev] node-2 restarted (pid ", timeout=60)
        new_pid = int(back.rsplit(" ", 1)[1].rstrip(")"))
        assert pid_alive(new_pid) and new_pid != victim["pid"]
        assert wait_until(lambda: status_members(first) == set(names), 30, "the restarted node-2 in status")
        assert any(ln.startswith("[node-2] node node-2 listening on " + victim["address"]) for ln in reader.seen[-200:])

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    assert not pid_alive(new_pid)


def test_a_node_that_keeps_dying_stops_the_dev_cluster_with_the_reason() -> None:
    with dev("--nodes", "1") as (proc, reader):
        info = ready_info(reader.wait_for("ready ", timeout=120))
        pid = info["nodes"][0]["pid"]
        for _ in range(2):
            subprocess.run(["kill", "-KILL", str(pid)], check=True)
            back = reader.wait_for("[dev] node-1 restarted (pid ", timeout=60)
            pid = int(back.rsplit(" ", 1)[1].rstrip(")"))
        subprocess.run(["kill", "-KILL", str(pid)], check=True)
        line = reader.wait_for("stopping: ", timeout=30)
        assert line == "stopping: node-1 killed by SIGKILL, 3 times within 60 s: not restarting it"
        assert proc.wait(60) == 1
        pids = [info["postgres"]["pid"], *info["etcd"]["pids"], *(w["pid"] for w in info["workers"])]
        wait_until(lambda: not [p for p in pids if pid_alive(p)], 30, "every process of the stopped dev to exit")
