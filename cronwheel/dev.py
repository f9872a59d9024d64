"""`cronwheel dev`: a whole local cluster on embedded servers, for trying cronwheel out.

Starts a real PostgreSQL and etcd (cronwheel.localservers), migrates, runs `--nodes` scheduler
nodes and a demo worker as child processes, creates two example schedules (every 10 s in
Europe/London, every minute in America/New_York) and a delayed one-off job, and prints where
everything is. SIGINT (Ctrl-C) or SIGTERM stops the worker and the nodes (SIGTERM: they hand
their partitions over and exit), then the servers, and removes every temp dir.

Auth is off in dev (every caller is admin): the nodes are started without --auth-file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TextIO

from cronwheel.clock import SystemClock
from cronwheel.localservers import LocalEtcd, LocalPostgres, die_with_parent, free_port
from cronwheel.storage.migrate import migrate

DEMO_TENANT = "default"


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)


@dataclass
class DevCluster:
    nodes: int = 3
    partitions: int = 16
    out: TextIO = sys.stdout
    pg: LocalPostgres = field(default_factory=LocalPostgres)
    etcd: LocalEtcd = field(default_factory=LocalEtcd)
    children: list[Child] = field(default_factory=list)
    dsn: str = ""

    def info(self) -> dict[str, Any]:
        nodes = [c for c in self.children if c.name.startswith("node")]
        return {
            "postgres": {"dsn": self.dsn, "pid": self.pg.pid, "dir": str(self.pg.base_dir)},
            "etcd": {"endpoints": self.etcd.endpoints, "pids": [m.pid for m in self.etcd.members],
                     "dir": str(self.etcd.base_dir)},
            "nodes": [{"name": c.name, "pid": c.proc.pid, "address": _field(c, " listening on "),
                       "metrics": _field(c, " metrics on ")} for c in nodes],
            "workers": [{"name": c.name, "pid": c.proc.pid} for c in self.children if c.name.startswith("worker")],
            "console": [{"url": _field(c, "console listening on "), "pid": c.proc.pid}
                        for c in self.children if c.name == "console"],
        }

    def start(self) -> None:
        self.pg.start()
        self.etcd.start()
        self.dsn = self.pg.create_database("cronwheel")
        migrate(self.dsn, partitions=self.partitions, progress=lambda m: self._say(f"migrate: {m}"))
        for i in range(1, self.nodes + 1):
            port = 7069 + i if _port_free(7069 + i) else free_port()
            self._spawn(f"node-{i}", ["node", "--dsn", self.dsn, "--etcd", ",".join(self.etcd.endpoints),
                                      "--node-id", f"dev-{i}", "--listen", f"127.0.0.1:{port}", "--lease-ttl", "5"],
                        ready=" listening on ")
        first = _field(self.children[0], " listening on ")
        self._spawn("worker-1", ["worker", "cronwheel.client.demo", "--address", first, "--worker-id", "demo-worker"],
                    ready="worker ")
        asyncio.run(self._examples())
        nodes = ",".join(_field(c, " listening on ") for c in self.children if c.name.startswith("node"))
        self._spawn("console", ["console", "--address", nodes, "--no-login", "--listen", f"127.0.0.1:{free_port()}"],
                    ready="console listening on ")  # the web console (cronwheel.console), dev mode: no login

    async def _examples(self) -> None:
        from cronwheel.cluster.commands.runs import JobSpec, submit_job
        from cronwheel.cluster.commands.schedules import ScheduleSpec, create_schedule
        from cronwheel.storage import PgStore, StoreConfig

        now = SystemClock().now()
        async with PgStore(StoreConfig(dsn=self.dsn, max_connections=2)) as store:
            for name, cron, tz in (("every-10s-london", "*/10 * * * * *", "Europe/London"),
                                   ("every-minute-new-york", "* * * * *", "America/New_York")):
                row = await create_schedule(store, ScheduleSpec(
                    tenant=DEMO_TENANT, name=name, cron=cron, timezone=tz, job_type="demo.print",
                    misfire_policy="run_once", payload={"schedule": name}), now, self.partitions)
                self._say(f"schedule  {name}: '{cron}' in {tz}, id {row['id']}")
            job, _ = await submit_job(store, JobSpec(tenant=DEMO_TENANT, type="demo.print",
                                                     payload={"hello": "delayed one-off"},
                                                     run_at=now + timedelta(seconds=30)), now, self.partitions)
            self._say(f"job       delayed one-off {job['id']} runs at {job['run_at'].isoformat()}")

    def _spawn(self, name: str, args: list[str], ready: str) -> Child:
        proc = subprocess.Popen([sys.executable, "-m", "cronwheel", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=die_with_parent())  # even a SIGKILLed `dev` leaves none behind
        child = Child(name, proc)
        self.children.append(child)

        def pump() -> None:
            assert proc.stdout is not None
            with proc.stdout:
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    child.lines.append(line)
                    if line.startswith("{"):
                        continue  # structured logs stay quiet in the dev console
                    if line.startswith(ready.strip()) or ready in line:
                        child.ready.set()
                    if line.startswith("ran "):
                        self._say(f"[{name}] {line}")

        threading.Thread(target=pump, daemon=True, name=f"pump-{name}").start()
        if not child.ready.wait(60):
            raise RuntimeError(f"{name} did not start: {child.lines[-20:]}")
        return child

    def stop(self) -> None:
        for c in reversed(self.children):  # the worker first, then the nodes (they hand over)
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for c in self.children:
            try:
                c.proc.wait(20)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
        self.etcd.stop()
        self.pg.stop()

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def print_banner(self) -> None:
        i = self.info()
        self._say(f"postgres  {i['postgres']['dsn']}  (pid {i['postgres']['pid']})")
        self._say(f"etcd      {','.join(i['etcd']['endpoints'])}  (pids {i['etcd']['pids']})")
        for n in i["nodes"]:
            self._say(f"node      {n['name']}: gRPC {n['address']}, metrics {n['metrics']}  (pid {n['pid']})")
        for con in i["console"]:
            self._say(f"console   {con['url']}  (dev mode: no login)")
        first = i["nodes"][0]["address"]
        self._say(f"try       cronwheel status --address {first}")
        self._say(f"          cronwheel schedule list --address {first}")
        self._say("ready " + json.dumps(i))
        self._say("Press Ctrl-C to stop everything.")


def _field(c: Child, marker: str) -> str:
    for line in c.lines:
        if marker in line:
            return line.rsplit(" ", 1)[1].strip()
    return ""


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_dev(nodes: int, partitions: int) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    cluster = DevCluster(nodes=nodes, partitions=partitions)
    try:
        cluster.start()
        cluster.print_banner()
        while not stop.wait(0.5):
            pass
        print("stopping...", flush=True)
        return 0
    finally:
        cluster.stop()
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        print("stopped", flush=True)
