"""`cronwheel dev` as a user runs it: real servers, 3 nodes, a demo worker and example schedules
that fire; `cronwheel status --json` and the metrics endpoint answer; stored secrets are encrypted
with the key dev made; Ctrl-C leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from cronwheel.client import Client
from cronwheel.secret_store import key_id_of

from .helpers import CRONWHEEL, LineReader, pid_alive, ready_info, run_cli, wait_until
from .target_receiver import TargetReceiver, serve_targets


@contextmanager
def serve_one() -> Iterator[tuple[str, TargetReceiver]]:
    """A local service answering 200: its URL and what it received."""
    gen = serve_targets()
    rec = next(gen)
    try:
        yield rec.url("/dev"), rec
    finally:
        gen.close()

pytestmark = pytest.mark.e2e


def test_dev_runs_a_cluster_that_fires_and_sigint_leaves_no_process_or_dir() -> None:
    proc = subprocess.Popen(
        [*CRONWHEEL, "dev"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        reader = LineReader(proc)
        line = reader.wait_for("ready ", timeout=120)
        info = ready_info(line)
        nodes = info["nodes"]
        assert len(nodes) == 3 and [w["name"] for w in info["workers"]] == ["worker-1", "worker-http"]
        pids = [info["postgres"]["pid"], *info["etcd"]["pids"], *(n["pid"] for n in nodes),
                *(w["pid"] for w in info["workers"]), *(c["pid"] for c in info["console"]),
                *(r["pid"] for r in info["rest"])]
        dirs = [info["postgres"]["dir"], info["etcd"]["dir"], os.path.dirname(info["secret_key_file"])]
        assert all(pid_alive(p) for p in pids), reader.seen
        assert stat.S_IMODE(os.stat(info["secret_key_file"]).st_mode) == 0o600  # dev made the nodes' key
        made = run_cli("webhook", "create", "--url", "http://127.0.0.1:9/dev", "--secret", "whsec_dev-known-secret",
                       "--address", nodes[0]["address"])
        assert made.returncode == 0 and "whsec_dev-known-secret" not in made.stdout, made.stderr
        with psycopg.connect(info["postgres"]["dsn"]) as conn:
            (stored,) = conn.execute("SELECT secret FROM webhooks").fetchone() or ("",)
        assert key_id_of(stored) == "dev"  # encrypted at rest with it
        assert all(os.path.isdir(d) for d in dirs)
        # The every-10-seconds example schedule fires and the demo worker runs it.
        ran = reader.wait_for("[worker-1] ran demo.print", timeout=40)
        while "every-10s-london" not in ran:  # the every-minute one may come first
            ran = reader.wait_for("[worker-1] ran demo.print", timeout=40)
        status = run_cli("status", "--json", "--address", nodes[0]["address"])
        assert status.returncode == 0, status.stderr
        st = json.loads(status.stdout)
        assert len(st["members"]) == 3
        assert len({p["owner"] for p in st["partitions"]}) == 3
        # Dev allows loopback, so local webhook receivers and examples work (issue 48).
        assert [m["egress_allow"] for m in st["members"]] == [["127.0.0.0/8", "::1/128", "localhost"]] * 3
        with urllib.request.urlopen(nodes[0]["metrics"], timeout=10) as r:
            body = r.read().decode()
        assert "cronwheel_fire_lag_seconds_bucket" in body and "cronwheel_partitions_owned" in body
        with urllib.request.urlopen(info["console"][0]["url"] + "schedules", timeout=10) as r:
            page = r.read().decode()  # the web console, in dev mode: no login, and it says so
        assert "Dev mode: no login" in page and "every-10s-london" in page
        with urllib.request.urlopen(info["rest"][0]["url"] + "/v1/schedules", timeout=10) as r:
            listed = json.loads(r.read())  # the REST API (issue 51), started and printed by dev
        assert "every-10s-london" in {s["name"] for s in listed["schedules"]}
        assert f"rest      {info['rest'][0]['url']}" in "\n".join(reader.seen)
        # An HTTP target works with nothing more to start: dev's doer calls a local service (issue 50).
        with serve_one() as (url, got):
            with Client(nodes[0]["address"]) as cw:
                s = cw.create_schedule("call-local", "0 0 1 1 *", "", timezone="UTC", misfire_policy="skip",
                                       target={"url": url})
                run = cw.trigger(s.id)
                done = wait_until(lambda: (e := cw.get_execution(run.id)).final and e, 30, "the target's run")
            assert done.state == "succeeded" and got.requests()[0].headers["idempotency-key"] == run.id
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


def test_a_sigkilled_dev_leaves_no_server_node_or_worker_running() -> None:
    """Even without its cleanup, every child dies with `cronwheel dev` (parent-death signals;
    PostgreSQL gets a fast shutdown, so orphaned clients cannot keep it up)."""
    proc = subprocess.Popen([*CRONWHEEL, "dev"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        info = ready_info(LineReader(proc).wait_for("ready ", timeout=120))
        pids = [info["postgres"]["pid"], *info["etcd"]["pids"], *(n["pid"] for n in info["nodes"]),
                *(w["pid"] for w in info["workers"])]
        proc.kill()
        proc.wait()
        alive = lambda: [p for p in pids if pid_alive(p)]  # noqa: E731
        wait_until(lambda: not alive(), 30, "every server, node and worker of the killed dev to die",
                   interval_s=0.2, detail=alive)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
