"""The cluster a chaos scenario runs on: a `ProcessCluster` (3-member etcd, PostgreSQL) plus what
the failpoints need on top of it.

- A roster: the nodes that *should* be running. Failpoints change it deterministically (a kill
  takes a node out, its restart puts it back; scale-out adds `n4`, `n5`, scale-in removes them),
  so target choices made from it with a seeded rng are the same on every run of a seed.
- Fixed gRPC ports per node name, so a restarted node comes back at the address its workers use.
- Optional network namespaces (`chaos.netns`) so any node can be partitioned.
- Optional clock skew per node start (`chaos.skewed`).
- Log files survive restarts (`n1.log` is moved to `n1.1.log` before `n1` starts again).
- PostgreSQL tracks commit timestamps, so the checker knows the instant each epoch took effect.

Not thread-safe: the runner's thread drives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from chaos import netns
from chaos.history import HealthSample
from cronwheel.devtools.harness import NodeProc, ProcessCluster
from cronwheel.devtools.localservers import free_port
from cronwheel.failpoints import KEEPALIVE_FAULTS_ENV, STALL_FAULTS_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKER_MODULE = "chaos.workload_jobs"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    nodes: int = 3
    workers: int = 2
    partitions: int = 16
    lease_ttl_s: int = 3
    misfire_grace_s: float = 2.0
    worker_lease_s: float = 4.0
    max_nodes: int = 5
    netns: bool = False

    def validate(self) -> ClusterSpec:
        if not 2 <= self.nodes <= self.max_nodes:
            raise ValueError(f"--nodes must be 2..{self.max_nodes} (a kill needs a survivor), got {self.nodes}")
        if not 1 <= self.workers <= 8:
            raise ValueError(f"--workers must be 1..8, got {self.workers}")
        return self


def _env() -> dict[str, str]:
    # CRONWHEEL_DEBUG: a crashing process leaves its traceback in its log, not one line.
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p),
            "CRONWHEEL_DEBUG": "1"}


class ChaosCluster:
    def __init__(self, spec: ClusterSpec, workdir: Path) -> None:
        self.spec = spec.validate()
        self.workdir = workdir
        self.jsonl_dir = workdir / "jsonl"
        self.pc = ProcessCluster(partitions=spec.partitions, lease_ttl_s=spec.lease_ttl_s, etcd_size=3,
                                 workdir=workdir)
        self.base_nodes = [f"n{i + 1}" for i in range(spec.nodes)]
        self.roster: list[str] = []
        self.extras: list[str] = []  # nodes added by scale-out, in order
        self.workers = [f"w{i + 1}" for i in range(spec.workers)]
        self.worker_node = {w: self.base_nodes[i % len(self.base_nodes)] for i, w in enumerate(self.workers)}
        self.ports: dict[str, int] = {}
        self.max_skew: dict[str, float] = {}
        self.commit_ts = False
        self.netns: netns.NetnsPool | None = None
        self._starts: Counter[str] = Counter()
        self._quiesced: dict[str, int | None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.jsonl_dir.mkdir(parents=True, exist_ok=True)
        self.pc.start()
        self.commit_ts = self._enable_commit_timestamps()
        if self.spec.netns:
            netns.cleanup_stale()
            ports = [self.pc.pg.port, *(m.client_port for m in self.pc.etcd.members)]
            self.netns = netns.NetnsPool(ports, self.workdir)
        for n in self.base_nodes:
            self.start_node(n)
        self.pc.wait_converged(self.roster, timeout=30)
        for w in self.workers:
            self.start_worker(w)

    def _enable_commit_timestamps(self) -> bool:
        with psycopg.connect(self.pc.pg.dsn(), autocommit=True) as c:
            c.execute("ALTER SYSTEM SET track_commit_timestamp = on")
        self.pc.pg.restart()
        with psycopg.connect(self.pc.pg.dsn(), autocommit=True) as c:
            row = c.execute("SHOW track_commit_timestamp").fetchone()
        return bool(row and row[0] == "on")

    def quiesce(self) -> dict[str, int | None]:
        """Stop everything that writes, so the history read next is final: SIGTERM the workers
        (they hand unfinished runs back) and then every node (a clean exit is 0). Exit codes by
        node; PostgreSQL and etcd keep running."""
        if self._quiesced is not None:
            return self._quiesced
        codes: dict[str, int | None] = {}
        if self.netns is not None:
            for n in list(self.netns.slots):
                self.netns.heal(n)
        for group, sig in ((self.workers, signal.SIGTERM), (list(self.roster), signal.SIGTERM)):
            for n in group:
                p = self.pc.nodes.get(n)
                if p is not None:
                    p.signal(signal.SIGCONT)
                    p.signal(sig)
            for n in group:
                p = self.pc.nodes.get(n)
                if p is None:
                    continue
                try:
                    code = p.proc.wait(15)
                except subprocess.TimeoutExpired:  # a hung process is reported, then killed
                    p.signal(signal.SIGKILL)
                    p.proc.wait()
                    code = None
                if group is not self.workers:
                    codes[n] = code
        self._quiesced = codes
        return codes

    def stop(self) -> dict[str, int | None]:
        """`quiesce()` if not done, then stop etcd and PostgreSQL and remove the namespaces."""
        codes = self.quiesce()
        try:
            self.pc.stop()
        finally:
            if self.netns is not None:
                self.netns.close()
        return codes

    # ------------------------------------------------------------------ nodes

    def _rotate_log(self, name: str) -> None:
        log = self.workdir / f"{name}.log"
        if self._starts[name] and log.exists():
            log.rename(self.workdir / f"{name}.{self._starts[name]}.log")
        self._starts[name] += 1

    def start_node(self, name: str, skew_s: float = 0.0) -> NodeProc:
        self._rotate_log(name)
        port = self.ports.setdefault(name, free_port())
        extra = ["--misfire-grace", str(self.spec.misfire_grace_s)]
        launcher: tuple[str, ...] = ()
        if self.netns is not None:
            slot = self.netns.slot(name)
            dsn = self.pc.dsn.replace("@127.0.0.1:", f"@{slot.host_ip}:")
            etcd = ",".join(f"{slot.host_ip}:{m.client_port}" for m in self.pc.etcd.members)
            # The namespace's address is beyond loopback: the chaos cluster runs without auth, on
            # a veth pair only this host routes, so it says --insecure (cluster/api/auth.py).
            extra += ["--listen", f"{slot.ns_ip}:{port}", "--dsn", dsn, "--etcd", etcd, "--insecure"]
            launcher = tuple(slot.launcher)
        else:
            extra += ["--listen", f"127.0.0.1:{port}"]
        module, margs = ("chaos.skewed", (repr(skew_s),)) if skew_s else ("cronwheel", ())
        if skew_s:
            self.max_skew[name] = max(self.max_skew.get(name, 0.0), abs(skew_s))
        env = {**_env(), KEEPALIVE_FAULTS_ENV: str(self.keepalive_fault_file(name)),  # test-only hooks, idle
               STALL_FAULTS_ENV: str(self.stall_fault_file())}
        proc = self.pc.start_node_with(name, *extra, launcher=launcher, module=module, module_args=margs,
                                       env=env)
        if name not in self.roster:
            self.roster.append(name)
        return proc

    def keepalive_fault_file(self, name: str) -> Path:
        """The control file of node `name`'s test-only keepalive fault hook (absent: no fault)."""
        return self.workdir / f"{name}.keepalive-faults.json"

    def stall_fault_file(self) -> Path:
        """The control file of every node's test-only completion stall hook (cluster/dispatch/
        faults.py; absent: no fault). One for all nodes: the node that meets the run takes it."""
        return self.workdir / "stall-faults.json"

    def stop_node(self, name: str, timeout_s: float = 15) -> int:
        """SIGTERM (a deploy): the node hands its partitions over and exits; its exit code."""
        self.roster.remove(name)
        return self.pc.stop_node(name, timeout_s)

    def await_exit(self, name: str, timeout_s: float = 15) -> int | None:
        """Wait for a node already sent SIGTERM to exit (no second signal: one arriving after its
        event loop closed would kill it with the default handler); its exit code, None if hung."""
        self.roster.remove(name)
        p = self.pc.nodes[name]
        try:
            return p.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.signal(signal.SIGKILL)
            p.proc.wait()
            return None

    def kill_node(self, name: str) -> None:
        self.roster.remove(name)
        self.pc.kill_node(name)

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.pc.nodes[name].signal(sig)

    # ------------------------------------------------------------------ workers

    def start_worker(self, name: str) -> NodeProc:
        self._rotate_log(name)
        env = {**_env(), "CHAOS_JSONL": str(self.jsonl_dir / f"{name}.jsonl"),
               "CHAOS_WORKER_LEASE_S": str(self.spec.worker_lease_s)}
        return self.pc.start_worker(name, WORKER_MODULE, self.worker_node[name], env)

    def kill_worker(self, name: str) -> None:
        p = self.pc.nodes[name]
        p.signal(signal.SIGKILL)
        p.proc.wait()

    def busy_executions(self, worker: str) -> list[tuple[str, str]]:
        """(execution id, type) of the runs `worker` holds a lease on right now."""
        rows = self.pc.sql("SELECT id::text, type FROM executions WHERE state = 'running' AND lease_owner = %s",
                           worker)
        return [(str(r[0]), str(r[1])) for r in rows]

    # ------------------------------------------------------------------ observations

    def wait_owned_without(self, gone: str, timeout_s: float) -> float | None:
        try:
            return self.pc.wait_owned_without(gone, timeout=timeout_s, poll_s=0.05)
        except TimeoutError:
            return None

    def etcd_statuses(self) -> dict[int, dict[str, Any]]:
        """member index -> its /v3/maintenance/status (members that answer)."""
        out: dict[int, dict[str, Any]] = {}
        for i, m in enumerate(self.pc.etcd.members):
            if m.proc is None or m.proc.poll() is not None:
                continue
            try:
                req = urllib.request.Request(m.client_url + "/v3/maintenance/status", data=b"{}", method="POST")
                with urllib.request.urlopen(req, timeout=1) as r:
                    out[i] = json.loads(r.read())
            except (OSError, ValueError):
                continue
        return out

    def etcd_leader(self) -> int | None:
        st = self.etcd_statuses()
        for i, s in st.items():
            header = s.get("header") or {}
            if s.get("leader") and s.get("leader") == header.get("member_id"):
                return i
        return None

    def overdue_running(self) -> int:
        grace = self.spec.lease_ttl_s + 3.0
        try:
            rows = self.pc.sql("SELECT count(*) FROM executions WHERE state = 'running' AND lease_expires < "
                               "now() - make_interval(secs => %s)", grace)
        except psycopg.Error:
            return 0
        return int(rows[0][0])

    def health(self, phase: str, timeout_s: float = 30.0) -> HealthSample:
        """Wait until healthy: every roster node and worker process running, every partition owned
        in etcd and recorded in the fence by a roster node, balanced."""
        t0 = time.time()
        detail = ""
        while True:
            dead = [n for n in [*self.roster, *self.workers] if not self.pc.nodes[n].alive()]
            if dead:
                detail = f"not running: {dead} (exit codes " \
                         f"{[self.pc.nodes[n].proc.returncode for n in dead]})"
                return HealthSample(time.time(), phase, False, time.time() - t0, detail, self.overdue_running())
            try:
                if self.pc.converged_on(self.roster):
                    return HealthSample(time.time(), phase, True, time.time() - t0, "", self.overdue_running())
                owners = Counter(o for o, _ in self.pc.owners().values())
                detail = f"not converged on {self.roster}: owners {dict(owners)}"
            except Exception as exc:  # etcd or PostgreSQL mid-restart: keep waiting
                detail = f"{type(exc).__name__}: {exc}"
            if time.time() - t0 > timeout_s:
                return HealthSample(time.time(), phase, False, time.time() - t0, detail[:500], self.overdue_running())
            time.sleep(0.1)
