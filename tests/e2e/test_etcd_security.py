"""A node reaches an etcd that requires TLS (with client certificates) and a password (issue 48,
item 6: etcd holds the fencing truth). The test makes a CA and certificates with openssl, starts
a real etcd serving only https with --client-cert-auth, turns auth on with etcdctl (a user whose
role reads and writes the cluster's prefix only), and runs a real node process against it: the
node starts, takes every partition and fires. Clients without TLS, without a password or with a
wrong one are refused; the password is never on the node's command line."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cronwheel.cluster.coordination.etcd import Etcd, EtcdSecurity
from cronwheel.devtools.harness import ProcessCluster, create_schedules
from cronwheel.devtools.localservers import die_with_parent, find_etcd_bin, free_port
from cronwheel.errors import Unavailable

from .helpers import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make certificates")]

USER, PASSWORD, ROOT_PASSWORD = "cw-node", "cw-etcd-secret-7Qz", "root-secret-3Xk"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """ca.pem; server.pem/server-key.pem (127.0.0.1, localhost); client.pem/client-key.pem (its CN
    is no etcd user, so the certificate alone grants nothing once auth is on)."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-etcd-ca",
             "-keyout", str(d / "ca-key.pem"), "-out", str(d / "ca.pem"))
    for name, subject, ext in (("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                               ("client", "/CN=not-an-etcd-user", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                 "-keyout", str(d / f"{name}-key.pem"), "-out", str(d / f"{name}.csr"))
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"),
                 "-CAkey", str(d / "ca-key.pem"), "-CAcreateserial", "-days", "1",
                 "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.pem"))


@dataclass
class SecureEtcd:
    endpoint: str  # https://127.0.0.1:port
    pki: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.pki / "etcd.log", "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=die_with_parent(signal.SIGKILL))

    def kill(self) -> None:  # the fixture's end
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def security(self, user: str = USER, password: str = PASSWORD) -> EtcdSecurity:
        return EtcdSecurity(cacert=str(self.pki / "ca.pem"), cert=str(self.pki / "client.pem"),
                            key=str(self.pki / "client-key.pem"), user=user, password=password)

    def ctl(self, *args: str, user: str | None = None) -> None:
        """etcdctl over TLS with the client certificate (and `user`, once auth is on)."""
        cmd = [str(find_etcd_bin().with_name("etcdctl")), "--endpoints", self.endpoint,
               "--cacert", str(self.pki / "ca.pem"), "--cert", str(self.pki / "client.pem"),
               "--key", str(self.pki / "client-key.pem"), *(["--user", user] if user else []), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (args, r.stdout, r.stderr)


def _read(endpoint: str, security: EtcdSecurity | None, prefix: str = "/cronwheel/") -> object:
    """The keys under prefix, or the Unavailable this client gets."""
    async def run() -> object:
        e = Etcd([endpoint], timeout_s=2.0, security=security)
        try:
            return (await e.get_prefix(prefix))[0]
        except Unavailable as exc:
            return exc
        finally:
            await e.close()

    return asyncio.run(run())


@pytest.fixture
def secure_etcd(tmp_path: Path) -> Iterator[SecureEtcd]:
    make_pki(tmp_path)
    client, peer = free_port(), free_port()
    url = f"https://127.0.0.1:{client}"
    etcd = SecureEtcd(url, tmp_path, [
        str(find_etcd_bin()), "--name", "sec", "--data-dir", str(tmp_path / "data"),
        "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{peer}", "--initial-cluster", f"sec=http://127.0.0.1:{peer}",
        "--cert-file", str(tmp_path / "server.pem"), "--key-file", str(tmp_path / "server-key.pem"),
        "--trusted-ca-file", str(tmp_path / "ca.pem"), "--client-cert-auth",
        "--logger", "zap", "--log-level", "warn"])
    etcd.start()
    try:
        no_auth = EtcdSecurity(cacert=str(tmp_path / "ca.pem"), cert=str(tmp_path / "client.pem"),
                               key=str(tmp_path / "client-key.pem"))
        wait_until(lambda: isinstance(_read(url, no_auth), list), 30, "etcd to serve over TLS",
                   detail=lambda: (tmp_path / "etcd.log").read_text()[-2000:])
        etcd.ctl("user", "add", "root", "--new-user-password", ROOT_PASSWORD)
        etcd.ctl("user", "add", USER, "--new-user-password", PASSWORD)
        etcd.ctl("role", "add", "cronwheel")
        etcd.ctl("role", "grant-permission", "cronwheel", "--prefix=true", "readwrite", "/cronwheel/")
        etcd.ctl("user", "grant-role", USER, "cronwheel")
        etcd.ctl("auth", "enable")
        yield etcd
    finally:
        etcd.kill()


def test_a_node_takes_partitions_and_fires_on_an_etcd_requiring_tls_and_a_password(
    secure_etcd: SecureEtcd,
) -> None:
    url, good = secure_etcd.endpoint, secure_etcd.security()
    assert isinstance(_read(url, good), list), "the node's credentials work"
    refused = {
        "plaintext": _read(url.replace("https://", ""), None),
        "TLS without a password": _read(url, EtcdSecurity(cacert=good.cacert, cert=good.cert, key=good.key)),
        "a wrong password": _read(url, secure_etcd.security(password="not-it")),
        "outside its prefix": _read(url, good, prefix="/elsewhere/"),
    }
    assert all(isinstance(v, Unavailable) for v in refused.values()), refused

    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        node = c.start_node_with(
            "sec1", "--etcd", url, "--etcd-cacert", good.cacert, "--etcd-cert", good.cert,
            "--etcd-key", good.key, "--etcd-user", USER, env={"CRONWHEEL_ETCD_PASSWORD": PASSWORD})
        wait_until(lambda: any(" ready (4 partitions)" in ln for ln in node.lines), 30,
                   "the node to own every partition", detail=lambda: node.log_path.read_text()[-2000:])
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes()
        assert PASSWORD.encode() not in cmdline and b"--etcd-user" in cmdline
        keys = _read(url, good)
        assert isinstance(keys, list)
        assert {k.key for k in keys} >= {"/cronwheel/members/sec1", *(f"/cronwheel/partitions/{p}" for p in range(4))}
        [row] = create_schedules(c, [dict(tenant="t", name="every-second", cron="* * * * * *", timezone="UTC",
                                          job_type="x", misfire_policy="skip")])
        def fired() -> int:
            return int(c.sql("SELECT count(*) FROM executions WHERE schedule_id = %s", row.id)[0][0])

        wait_until(lambda: fired() >= 2, 30, "the schedule to fire twice")
        # Turning auth off and on again invalidates every token etcd gave ("invalid auth token").
        # Keep-alives and an open watch need none, so a second node joins: sec1 must release two
        # partitions (a write) with a token it fetches again, and sec2 must take them.
        secure_etcd.ctl("auth", "disable", user=f"root:{ROOT_PASSWORD}")
        secure_etcd.ctl("auth", "enable")
        c.start_node_with(
            "sec2", "--etcd", url, "--etcd-cacert", good.cacert, "--etcd-cert", good.cert,
            "--etcd-key", good.key, "--etcd-user", USER, env={"CRONWHEEL_ETCD_PASSWORD": PASSWORD})

        def owners() -> set[str]:
            kvs = _read(url, good, prefix="/cronwheel/partitions/")
            return {kv.value.decode() for kv in kvs} if isinstance(kvs, list) else set()

        wait_until(lambda: owners() == {"sec1", "sec2"}, 40, "sec1 to hand two partitions to sec2",
                   detail=lambda: node.log_path.read_text()[-3000:])
        before = fired()
        wait_until(lambda: fired() >= before + 3, 30, "the cluster to fire on")
        assert node.alive()
        assert PASSWORD not in node.log_path.read_text() and PASSWORD not in "\n".join(node.lines)
