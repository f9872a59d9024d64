"""Real cronwheel processes on loopback: used by the e2e tests, the benchmarks and the chaos suite.

A `ProcessCluster` owns a PostgreSQL, an etcd (1 or 3 members) and any number of `cronwheel node`
and `cronwheel worker` processes, each a real OS process that can be SIGTERMed, SIGKILLed,
SIGSTOPped and SIGCONTed. Observations are made from outside: partition keys in etcd, the fencing
record and executions in PostgreSQL, JSON log lines of each node. The harness imports no server
code: the database is migrated through the CLI (`cronwheel migrate`), and etcd is read through
its own JSON gateway.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from cronwheel.cli.main import main as cronwheel_cli
from cronwheel.client import Client, Execution, Schedule
from cronwheel.devtools.localservers import LocalEtcd, LocalPostgres, die_with_parent


def migrate(dsn: str, partitions: int, cluster: str) -> None:
    """`cronwheel migrate`, in this process (a second interpreter would cost a second a cluster)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cronwheel_cli(["migrate", "--dsn", dsn, "--partitions", str(partitions), "--cluster", cluster])
    if code != 0:
        raise RuntimeError(f"cronwheel migrate exited {code}: {out.getvalue()}")


def etcd_range(endpoints: list[str], prefix: str, attempts: int = 20) -> list[tuple[str, str, int]]:
    """(key, value, create revision) of every key under `prefix`, through etcd's JSON gateway
    (`POST /v3/kv/range`). A 3-member etcd may be electing a leader: ask the next member, again."""
    end = bytearray(prefix.encode())
    end[-1] += 1  # the prefix's range end (a prefix never ends in 0xff here: it ends in "/")
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(bytes(end)).decode()}).encode()
    for attempt in range(attempts):
        url = f"http://{endpoints[attempt % len(endpoints)]}/v3/kv/range"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=2) as r:
                kvs = json.loads(r.read()).get("kvs", [])
            break
        except (OSError, urllib.error.URLError, ValueError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)
    return [(base64.b64decode(kv["key"]).decode(errors="replace"),
             base64.b64decode(kv.get("value", "")).decode(errors="replace"), int(kv["create_revision"]))
            for kv in kvs]

@dataclass
class NodeProc:
    name: str
    proc: subprocess.Popen[str]
    log_path: Path
    address: str = ""
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def log_events(self, event: str | None = None) -> list[dict[str, Any]]:
        out = []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            if not line.startswith("{"):
                continue
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if event is None or d.get("event") == event:
                out.append(d)
        return out


class ProcessCluster:
    def __init__(
        self,
        partitions: int = 16,
        lease_ttl_s: int = 3,
        etcd_size: int = 1,
        cluster: str = "cronwheel",
        fsync: bool = False,
        workdir: Path | None = None,
    ) -> None:
        self.partitions = partitions
        self.lease_ttl_s = lease_ttl_s
        self.cluster = cluster
        self.pg = LocalPostgres(fsync=fsync)
        self.etcd = LocalEtcd(size=etcd_size)
        self.nodes: dict[str, NodeProc] = {}
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="cronwheel-cluster-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._own_workdir = workdir is None
        self.dsn = ""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ProcessCluster:
        self.pg.start()
        self.etcd.start()
        self.dsn = self.pg.create_database("cronwheel")
        migrate(self.dsn, self.partitions, self.cluster)  # the database is this cluster's
        return self

    def stop(self) -> None:
        for n in self.nodes.values():
            n.signal(signal.SIGCONT)
            n.signal(signal.SIGKILL)
            n.proc.wait()
        self.etcd.stop()
        self.pg.stop()
        if self._own_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ProcessCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ nodes

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None, ready_when: str,
               wait: bool) -> NodeProc:
        """Start a process whose stderr goes to <workdir>/<name>.log and whose stdout is pumped
        into .lines; ready when a stdout line contains `ready_when` (a node's " listening on "
        line also gives its address)."""
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **(env or {})}, preexec_fn=die_with_parent(signal.SIGKILL))
        p = NodeProc(name, proc, log_path)
        ready = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            with proc.stdout:
                for line in proc.stdout:
                    p.lines.append(line.rstrip("\n"))
                    if " listening on " in line:
                        p.address = line.rsplit(" ", 1)[1].strip()
                    if ready_when in line:
                        ready.set()

        threading.Thread(target=pump, daemon=True).start()
        self.nodes[name] = p
        if wait and not ready.wait(30):
            proc.kill()  # leave no half-started process behind for a later test to trip over
            proc.wait()
            raise RuntimeError(f"{name} did not start: {log_path.read_text()[-2000:]}")
        return p

    def start_node(self, name: str, *extra: str, wait: bool = True) -> NodeProc:
        return self.start_node_with(name, *extra, wait=wait)

    def start_node_with(self, name: str, *extra: str, launcher: tuple[str, ...] = (), module: str = "cronwheel",
                        module_args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                        wait: bool = True) -> NodeProc:
        """`start_node` with the command wrapped (chaos): `launcher` runs before the interpreter (e.g.
        `ip netns exec NS`, which execs, so signals still reach the node), `module` + `module_args`
        replace `-m cronwheel` (e.g. `-m chaos.skewed 0.8`). Later flags in `extra` override the
        defaults (`--listen`, `--dsn`, `--etcd`: argparse keeps the last)."""
        cmd = [
            *launcher, sys.executable, "-m", module, *module_args, "node", "--dsn", self.dsn,
            "--etcd", ",".join(self.etcd.endpoints), "--node-id", name,
            "--lease-ttl", str(self.lease_ttl_s), "--cluster", self.cluster, *extra,
        ]
        return self._spawn(name, cmd, env, " listening on ", wait)

    def start_worker(self, name: str, module: str, node: str | None = None, env: dict[str, str] | None = None,
                     *extra: str) -> NodeProc:
        """A `cronwheel worker MODULE` process leasing from `node` (default: the first live node)."""
        target = self.nodes[node] if node else next(n for n in self.nodes.values() if n.alive() and n.address)
        cmd = [sys.executable, "-m", "cronwheel", "worker", module, "--address", target.address,
               "--worker-id", name, *extra]
        path = os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])
        return self._spawn(name, cmd, {"PYTHONPATH": path, **(env or {})}, "worker ", True)

    def stop_node(self, name: str, timeout: float = 15) -> int:
        n = self.nodes[name]
        n.signal(signal.SIGTERM)
        return n.proc.wait(timeout)

    def kill_node(self, name: str) -> None:
        n = self.nodes[name]
        n.signal(signal.SIGKILL)
        n.proc.wait()

    def live_nodes(self) -> list[str]:
        return [n for n, p in self.nodes.items() if p.alive()]

    def addresses(self) -> list[str]:
        """The API addresses of the live nodes (a worker has none), for a Client."""
        return [p.address for p in self.nodes.values() if p.alive() and p.address]

    # ------------------------------------------------------------------ observations

    def owners(self) -> dict[int, tuple[str, int]]:
        """partition -> (owner, epoch) from the etcd partition keys."""

        prefix = f"/{self.cluster}/partitions/"
        out = {}
        for key, value, create_revision in etcd_range(self.etcd.endpoints, prefix):
            try:
                p = int(key.rsplit("/", 1)[1])
            except ValueError:
                continue
            if 0 <= p < self.partitions:
                out[p] = (value, create_revision)
        return out

    def fenced(self) -> dict[int, tuple[str | None, int]]:
        """partition -> (owner, epoch) from the fencing record in PostgreSQL."""
        with psycopg.connect(self.dsn) as c:
            return {r[0]: (r[1], int(r[2])) for r in c.execute("SELECT id, owner, epoch FROM partitions")}

    def converged_on(self, nodes: list[str]) -> bool:
        """Every partition owned in etcd and recorded in PostgreSQL by one of `nodes`,
        balanced within one of P/N."""
        o = self.owners()
        if len(o) != self.partitions or any(v[0] not in nodes for v in o.values()):
            return False
        f = self.fenced()
        if any(f[p] != (o[p][0], o[p][1]) for p in o):
            return False
        counts = Counter(v[0] for v in o.values())
        lo, hi = self.partitions // len(nodes), -(-self.partitions // len(nodes))
        return set(counts) == set(nodes) and all(lo <= c <= hi for c in counts.values())

    def wait_converged(self, nodes: list[str], timeout: float = 30, poll_s: float = 0.02) -> float:
        """Seconds until converged on `nodes`; raises TimeoutError."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.converged_on(nodes):
                return time.monotonic() - t0
            time.sleep(poll_s)
        raise TimeoutError(f"not converged on {nodes} in {timeout}s: {Counter(v[0] for v in self.owners().values())}")

    def wait_owned_without(self, gone: str, timeout: float = 30, poll_s: float = 0.01) -> float:
        """Seconds until every partition is owned (etcd and PostgreSQL) by a node other than `gone`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            o = self.owners()
            if len(o) == self.partitions and all(v[0] != gone for v in o.values()):
                f = self.fenced()
                if all(f[p] == (o[p][0], o[p][1]) for p in o):
                    return time.monotonic() - t0
            time.sleep(poll_s)
        raise TimeoutError(f"partitions of {gone} not taken over in {timeout}s")

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as c:
            return c.execute(query, params).fetchall()  # type: ignore[arg-type]


def create_schedules(cluster: ProcessCluster, specs: list[dict[str, Any]], token: str | None = None) -> list[Schedule]:
    """Create schedules through the public door, as any user does: `Client.create_schedule(**spec)`
    at the cluster's live nodes (the API's validation, audit event and NOTIFY all happen)."""
    with Client(cluster.addresses(), token=token) as cw:
        return [cw.create_schedule(**s) for s in specs]


def submit_jobs(cluster: ProcessCluster, jobs: list[dict[str, Any]], token: str | None = None) -> list[Execution]:
    """Submit one-off jobs through the public door: `Client.submit(**job)` at the live nodes."""
    with Client(cluster.addresses(), token=token) as cw:
        return [cw.submit(**j) for j in jobs]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []
