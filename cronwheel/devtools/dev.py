"""`cronwheel dev`: a whole local cluster on embedded servers, for trying cronwheel out.

Starts a real PostgreSQL and etcd (cronwheel.devtools.localservers), migrates, runs `--nodes` scheduler
nodes, a demo worker, an HTTP doer (`cronwheel worker --http`, which calls HTTP targets), the web
console and the REST API (`cronwheel rest`, on loopback) as child processes, creates two example
schedules (every 10 s in Europe/London, every minute in America/New_York) and a delayed one-off
job, and prints where everything is. SIGINT (Ctrl-C) or SIGTERM stops the workers and the nodes
(SIGTERM: they hand their partitions over and exit), then the servers, and removes every temp dir.

Auth is off in dev (every caller is admin): the nodes are started without --auth-file.
Stored secrets are encrypted as in production: the dev cluster makes a key (a key file in a temp
dir of its own, mode 0600, removed at the end) and starts every node with --secret-key-file.
Webhooks may reach loopback in dev (`--egress-allow` 127.0.0.0/8, ::1 and localhost: the egress
policy's LOOPBACK), so local examples and receivers keep working.

Names: each process is named once, and that name is everywhere: node `node-1` runs with
`--node-id node-1` (what `cronwheel status` lists as its member), the demo worker `worker-1`
with `--worker-id worker-1`; the banner, the `ready` JSON and every prefixed line use them.

`--logs`: every line a node or the worker writes (its stdout and its JSON log on stderr) is
shown as `[name] line`; a JSON log line is shortened to `[name] level message key=value ...`.
Without it only the worker's `ran ...` lines are shown.

A child that exits while the cluster runs is reported at once (`[dev] node-2 (pid N) exited:
killed by SIGKILL`, with its last output lines) and restarted under the same name, id and port
(`[dev] node-2 restarted (pid M)`). A child that exits MAX_RESTARTS times within
RESTART_WINDOW_S, or does not come back up, stops the whole dev cluster with the reason (exit
code 1): a crash loop is a bug to read about, not to hide.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TextIO

from cronwheel.clock import Clock, SystemClock
from cronwheel.devtools.localservers import LocalEtcd, LocalPostgres, die_with_parent, free_port
from cronwheel.egress import LOOPBACK
from cronwheel.secret_store import KEY_ENV, new_key_line
from cronwheel.storage.migrate import migrate

DEMO_TENANT = "default"
MAX_RESTARTS = 3  # exits of one child within RESTART_WINDOW_S that stop the dev cluster
RESTART_WINDOW_S = 60.0
START_TIMEOUT_S = 60.0
_LOG_SKIP = frozenset({"ts", "level", "logger", "msg", "node", "exc"})


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[str]
    args: list[str] = field(default_factory=list)
    ready_marker: str = ""
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    exits: list[float] = field(default_factory=list)  # monotonic times of unexpected exits


def describe_exit(code: int) -> str:
    """'exited with code 3' / 'killed by SIGKILL' for a Popen return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def short_log(line: str) -> str:
    """A JSON log line as `level message key=value ...` (the line itself if it is not one)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    if not isinstance(rec, dict) or "msg" not in rec:
        return line
    extra = " ".join(f"{k}={v}" for k, v in rec.items() if k not in _LOG_SKIP)
    out = f"{rec.get('level', 'info')} {rec['msg']}" + (f" {extra}" if extra else "")
    if rec.get("exc"):
        out += "\n" + str(rec["exc"])
    return out


@dataclass
class DevCluster:
    nodes: int = 3
    partitions: int = 16
    out: TextIO = sys.stdout
    pg: LocalPostgres = field(default_factory=LocalPostgres)
    etcd: LocalEtcd = field(default_factory=LocalEtcd)
    children: list[Child] = field(default_factory=list)
    dsn: str = ""
    key_file: str = ""  # the nodes' --secret-key-file, made by start()
    logs: bool = False
    clock: Clock = field(default_factory=SystemClock)
    # Set when the dev cluster must stop by itself; `failure` says why (run_dev exits 1).
    failed: threading.Event = field(default_factory=threading.Event)
    failure: str = ""
    _stopping: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _restarts: queue.Queue[Child] = field(default_factory=queue.Queue)

    def info(self) -> dict[str, Any]:
        nodes = [c for c in self.children if c.name.startswith("node")]
        return {
            "postgres": {"dsn": self.dsn, "pid": self.pg.pid, "dir": str(self.pg.base_dir)},
            "etcd": {"endpoints": self.etcd.endpoints, "pids": [m.pid for m in self.etcd.members],
                     "dir": str(self.etcd.base_dir)},
            "secret_key_file": self.key_file,
            "nodes": [{"name": c.name, "pid": c.proc.pid, "address": _field(c, " listening on "),
                       "metrics": _field(c, " metrics on ")} for c in nodes],
            "workers": [{"name": c.name, "pid": c.proc.pid} for c in self.children if c.name.startswith("worker")],
            "console": [{"url": _field(c, "console listening on "), "pid": c.proc.pid}
                        for c in self.children if c.name == "console"],
            "rest": [{"url": _field(c, "rest api listening on "), "pid": c.proc.pid}
                     for c in self.children if c.name == "rest"],
        }

    def start(self) -> None:
        self.pg.start()
        self.etcd.start()
        self.dsn = self.pg.create_database("cronwheel")
        migrate(self.dsn, partitions=self.partitions, progress=lambda m: self._say(f"migrate: {m}"))
        self.key_file = make_key_file()
        for i in range(1, self.nodes + 1):
            port = 7069 + i if _port_free(7069 + i) else free_port()
            metrics = 7169 + i if _port_free(7169 + i) else free_port()  # the same port across restarts
            self._spawn(f"node-{i}", ["node", "--dsn", self.dsn, "--etcd", ",".join(self.etcd.endpoints),
                                      "--node-id", f"node-{i}", "--listen", f"127.0.0.1:{port}", "--lease-ttl", "5",
                                      "--metrics-listen", f"127.0.0.1:{metrics}",
                                      "--secret-key-file", self.key_file,
                                      *(f for a in LOOPBACK for f in ("--egress-allow", a))],
                        ready=" listening on ")
        first = _field(self.children[0], " listening on ")
        self._spawn("worker-1", ["worker", "cronwheel.devtools.demo", "--address", first, "--worker-id", "worker-1"],
                    ready="worker ")
        # The HTTP doer: HTTP targets' runs (docs/http-targets.md), loopback allowed as for webhooks.
        self._spawn("worker-http", ["worker", "--http", "--address", first, "--worker-id", "worker-http",
                                    "--dsn", self.dsn, "--secret-key-file", self.key_file,
                                    *(f for a in LOOPBACK for f in ("--egress-allow", a))],
                    ready="worker ")
        self._examples(first)
        nodes = ",".join(_field(c, " listening on ") for c in self.children if c.name.startswith("node"))
        self._spawn("console", ["console", "--address", nodes, "--no-login", "--listen", f"127.0.0.1:{free_port()}"],
                    ready="console listening on ")  # the web console (cronwheel.console), dev mode: no login
        rest = 7090 if _port_free(7090) else free_port()  # the README's curl line names 7090
        self._spawn("rest", ["rest", "--address", nodes, "--listen", f"127.0.0.1:{rest}"],
                    ready="rest api listening on ")  # the REST/JSON API (docs/rest.md), on loopback

    def _examples(self, address: str) -> None:
        """The example schedules and job, created as an application would: through the Client."""
        from cronwheel.client import Client

        with Client(address) as client:
            for name, cron, tz in (("every-10s-london", "*/10 * * * * *", "Europe/London"),
                                   ("every-minute-new-york", "* * * * *", "America/New_York")):
                s = client.create_schedule(name, cron, "demo.print", timezone=tz, misfire_policy="run_once",
                                           payload={"schedule": name}, tenant=DEMO_TENANT)
                self._say(f"schedule  {name}: '{cron}' in {tz}, id {s.id}")
            job = client.submit("demo.print", {"hello": "delayed one-off"}, delay=timedelta(seconds=30),
                                tenant=DEMO_TENANT)
            when = job.run_at.isoformat() if job.run_at else "now"
            self._say(f"job       delayed one-off {job.id} runs at {when}")

    def _spawn(self, name: str, args: list[str], ready: str) -> Child:
        child = Child(name, self._popen(args), args, ready)
        self.children.append(child)
        self._watch(child)
        if not child.ready.wait(START_TIMEOUT_S):
            raise RuntimeError(f"{name} did not start: {child.lines[-20:]}")
        return child

    @staticmethod
    def _popen(args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "cronwheel", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                                # the nodes' key is the dev cluster's own key file (not both: refused)
                                env={**{k: v for k, v in os.environ.items() if k != KEY_ENV}, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=die_with_parent())  # even a SIGKILLed `dev` leaves none behind

    def _watch(self, child: Child) -> None:
        """Pump the child's output (shown per --logs) and report its exit the moment it happens."""
        proc, name, marker = child.proc, child.name, child.ready_marker

        def pump() -> None:
            assert proc.stdout is not None
            with proc.stdout:
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    child.lines.append(line)
                    if self.logs:
                        self._say(f"[{name}] {short_log(line)}")
                    if line.startswith("{"):
                        continue  # structured logs stay quiet in the dev console without --logs
                    if line.startswith(marker.strip()) or marker in line:
                        child.ready.set()
                    if line.startswith("ran ") and not self.logs:
                        self._say(f"[{name}] {line}")
            code = proc.wait()
            self._exited(child, proc, code)

        threading.Thread(target=pump, daemon=True, name=f"pump-{name}").start()

    def _exited(self, child: Child, proc: subprocess.Popen[str], code: int) -> None:
        with self._lock:
            if self._stopping or proc is not child.proc:
                return
            now = self.clock.monotonic()
            child.exits = [t for t in child.exits if now - t < RESTART_WINDOW_S] + [now]
            why = describe_exit(code)
            self._say(f"[dev] {child.name} (pid {proc.pid}) {why}")
            for line in child.lines[-5:]:
                self._say(f"[dev]   {child.name}> {short_log(line)}")
            if len(child.exits) >= MAX_RESTARTS:
                self._fail(f"{child.name} {why}, {len(child.exits)} times within {RESTART_WINDOW_S:g} s: "
                           "not restarting it")
                return
            self._say(f"[dev] restarting {child.name} ({len(child.exits)} of {MAX_RESTARTS - 1} restarts "
                      f"within {RESTART_WINDOW_S:g} s)")
            self._restarts.put(child)

    def service(self) -> None:
        """Carry out the restarts `_exited` asked for. Called by the thread that started the
        cluster (run_dev's main loop): a child's parent-death signal fires when the *thread* that
        forked it ends, so a child must never be forked by a short-lived pump thread."""
        while True:
            try:
                child = self._restarts.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                if self._stopping:
                    return
                child.ready = threading.Event()
                child.proc = self._popen(child.args)
            self._watch(child)
            threading.Thread(target=self._await_restart, args=(child, child.proc, child.ready), daemon=True,
                             name=f"restart-{child.name}").start()

    def _await_restart(self, child: Child, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        if ready.wait(START_TIMEOUT_S):
            self._say(f"[dev] {child.name} restarted (pid {proc.pid})")
        elif not self._stopping and proc is child.proc:
            self._fail(f"{child.name} did not come back up within {START_TIMEOUT_S:g} s")

    def _fail(self, reason: str) -> None:
        if not self.failure:
            self.failure = reason
        self.failed.set()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True  # exits from here on are ours: not reported, not restarted
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
        if self.key_file:
            shutil.rmtree(os.path.dirname(self.key_file), ignore_errors=True)

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def print_banner(self) -> None:
        i = self.info()
        self._say(f"postgres  {i['postgres']['dsn']}  (pid {i['postgres']['pid']})")
        self._say(f"etcd      {','.join(i['etcd']['endpoints'])}  (pids {i['etcd']['pids']})")
        for n in i["nodes"]:
            self._say(f"node      {n['name']}: gRPC {n['address']}, metrics {n['metrics']}  (pid {n['pid']})")
        self._say(f"secrets   encrypted with the key in {i['secret_key_file']} (removed at the end)")
        for con in i["console"]:
            self._say(f"console   {con['url']}  (dev mode: no login)")
        for r in i["rest"]:
            self._say(f"rest      {r['url']}  (curl {r['url']}/v1/schedules; OpenAPI at {r['url']}/openapi.json)")
        first = i["nodes"][0]["address"]
        self._say(f"try       cronwheel status --address {first}")
        self._say(f"          cronwheel schedule list --address {first}")
        self._say("ready " + json.dumps(i))
        self._say("Press Ctrl-C to stop everything.")


def make_key_file() -> str:
    """A new key (cronwheel.secret_store) in a file only this user can read, in a temp dir of its own."""
    path = os.path.join(tempfile.mkdtemp(prefix="cronwheel-dev-key-"), "secret.key")  # mkdtemp: mode 0700
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(new_key_line("dev") + "\n")
    return path


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


def run_dev(nodes: int, partitions: int, logs: bool = False) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    cluster = DevCluster(nodes=nodes, partitions=partitions, logs=logs)
    try:
        cluster.start()
        cluster.print_banner()
        while not stop.wait(0.2):
            cluster.service()
            if cluster.failed.is_set():
                print(f"stopping: {cluster.failure}", flush=True)
                return 1
        print("stopping...", flush=True)
        return 0
    finally:
        cluster.stop()
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        print("stopped", flush=True)
