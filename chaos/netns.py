"""Network partitions of one node, with Linux network namespaces.

Each node of a scenario that partitions nodes runs in a namespace of its own, joined to the host
by a veth pair (a /30 of 10.213.0.0/16). PostgreSQL and etcd listen on 127.0.0.1 only, so a small
TCP forwarder in the host namespace (`python -m chaos.netns forward IP PORT...`, one per node)
listens on the host end of the pair and forwards each port to 127.0.0.1. The node's gRPC server
listens on its end of the pair, so workers reach it through the same link.

A partition puts a `blackhole` queueing discipline on both ends of the pair: every packet either
way is silently dropped (TCP connections hang, new ones time out), which is what a cut cable or a
dead switch port does; nothing is reset or refused. Healing deletes the two qdiscs. (netem and tc
filters are often missing from small kernels; the blackhole qdisc is in every one.)

Needs root (CAP_NET_ADMIN), `ip` and `tc`; `available()` probes it once. Names carry the runner's
pid, and `cleanup_stale()` deletes namespaces left by runners that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

NS_PREFIX = "cwc"
NET = ipaddress.ip_network("10.213.0.0/16")
LOCK = Path("/tmp/cronwheel-chaos-netns.lock")


def _run(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and r.returncode != 0:
        raise OSError(f"{' '.join(cmd)} failed: {r.stderr.strip()[:300]}")
    return r


def _die_with_parent() -> None:
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def available() -> tuple[bool, str]:
    """Can this process make namespaces, veth pairs and blackhole qdiscs? (False, why) if not."""
    if sys.platform != "linux":
        return False, "network namespaces are Linux only"
    if os.geteuid() != 0:
        return False, "network namespaces need root (CAP_NET_ADMIN)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return False, "the `ip` and `tc` commands (iproute2) are not installed"
    ns, host_if, ns_if = f"{NS_PREFIX}{os.getpid()}-probe", f"cw{os.getpid()}p", f"cw{os.getpid()}q"
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _run("ip", "link", "set", ns_if, "netns", ns)
        _run("tc", "qdisc", "add", "dev", host_if, "root", "blackhole")
        return True, ""
    except OSError as exc:
        return False, f"cannot build a namespace with a blackholed veth pair here: {exc}"
    finally:
        _run("ip", "link", "del", host_if, check=False)
        _run("ip", "netns", "del", ns, check=False)


def cleanup_stale() -> list[str]:
    """Delete namespaces whose runner process is gone (their veth pairs go with them)."""
    removed = []
    r = _run("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.fullmatch(rf"{NS_PREFIX}(\d+)-\w+", name)
        if m and not _alive(int(m.group(1))):
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Slot:
    node: str
    ns: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str
    forwarder: subprocess.Popen[str] | None = None
    partitioned: bool = False

    @property
    def launcher(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]


@dataclass
class NetnsPool:
    """One namespace per node name, made on first use and reused across restarts of that node.
    Not thread-safe: the runner's thread only."""

    forward_ports: list[int]
    log_dir: Path
    slots: dict[str, Slot] = field(default_factory=dict)

    def slot(self, node: str) -> Slot:
        if node not in self.slots:
            self.slots[node] = self._make(node, len(self.slots))
        return self.slots[node]

    def _make(self, node: str, k: int) -> Slot:
        pid = os.getpid()
        ns, host_if, ns_if = f"{NS_PREFIX}{pid}-{k}", f"cw{pid}h{k}", f"cw{pid}n{k}"
        LOCK.touch(exist_ok=True)
        with open(LOCK) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            net = self._free_subnet()
            host_ip, ns_ip = str(net[1]), str(net[2])
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            _run("ip", "link", "set", ns_if, "netns", ns)
            _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
            _run("ip", "link", "set", host_if, "up")
        _run("ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if, ns=ns)
        _run("ip", "link", "set", ns_if, "up", ns=ns)
        _run("ip", "link", "set", "lo", "up", ns=ns)
        slot = Slot(node, ns, host_if, ns_if, host_ip, ns_ip)
        slot.forwarder = self._forwarder(slot)
        return slot

    @staticmethod
    def _free_subnet() -> ipaddress.IPv4Network:
        used = set()
        out = _run("ip", "-o", "-4", "addr", "show", check=False).stdout
        for m in re.finditer(r"inet (10\.213\.\d+\.\d+)/", out):
            used.add(ipaddress.ip_network(f"{m.group(1)}/30", strict=False))
        for net in NET.subnets(new_prefix=30):
            if net not in used:
                return net  # type: ignore[return-value]
        raise OSError("no free /30 left in 10.213.0.0/16")

    def _forwarder(self, slot: Slot) -> subprocess.Popen[str]:
        log = open(self.log_dir / f"forward-{slot.node}.log", "a")  # noqa: SIM115 - handed to the child
        cmd = [sys.executable, "-m", "chaos.netns", "forward", slot.host_ip, *map(str, self.forward_ports)]
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=_die_with_parent)
        log.close()
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("ready"):
            proc.kill()
            raise OSError(f"forwarder for {slot.node} did not start: {line!r}")
        return proc

    def partition(self, node: str) -> None:
        s = self.slots[node]
        _run("tc", "qdisc", "add", "dev", s.host_if, "root", "blackhole")
        _run("tc", "qdisc", "add", "dev", s.ns_if, "root", "blackhole", ns=s.ns)
        s.partitioned = True

    def heal(self, node: str) -> None:
        s = self.slots[node]
        _run("tc", "qdisc", "del", "dev", s.host_if, "root", check=False)
        _run("tc", "qdisc", "del", "dev", s.ns_if, "root", ns=s.ns, check=False)
        s.partitioned = False

    def close(self) -> None:
        for s in self.slots.values():
            if s.forwarder is not None and s.forwarder.poll() is None:
                s.forwarder.kill()
                s.forwarder.wait()
            _run("ip", "link", "del", s.host_if, check=False)
            _run("ip", "netns", "del", s.ns, check=False)
        self.slots.clear()


# ---------------------------------------------------------------------------------- forwarder


async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """Copy one direction of a TCP connection until it ends, then close the writer (the chaos
    forwarder here; tests/integration/wire.py for the server's side of its proxy)."""
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        w.close()


async def _forward(host: str, ports: list[int]) -> None:
    def handler(port: int):  # type: ignore[no-untyped-def]
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                ur, uw = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pump(reader, uw), pump(ur, writer))

        return handle

    servers = [await asyncio.start_server(handler(p), host, p) for p in ports]
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for s in servers:
            s.close()


def main(argv: list[str]) -> int:
    import asyncio

    if len(argv) < 3 or argv[0] != "forward":
        print("usage: python -m chaos.netns forward HOST_IP PORT [PORT...]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(_forward(argv[1], [int(p) for p in argv[2:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
