"""cronwheel.client over TLS: a node that serves TLS, reached with a CA file, sync and async.

A module of its own: its cluster is started before this process has any gRPC channel busy
(ProcessCluster forks as another user when run as root, and a fork while gRPC threads are active
can crash the child: initdb died with SIGSEGV when this test shared test_client.py's module)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from cronwheel.client import AsyncClient, Client, Unavailable
from cronwheel.devtools.harness import ProcessCluster

from .api_cluster import TOKENS, write_auth_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ACME = TOKENS["acme"][0]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls_with_a_ca_file(tmp_path: Path) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                   check=True, capture_output=True)
    ca = str(tmp_path / "cert.pem")
    with ProcessCluster(partitions=2, lease_ttl_s=3) as c:
        n = c.start_node("tls", "--auth-file", str(write_auth_file(tmp_path / "auth.json")),
                         "--tls-cert", ca, "--tls-key", str(tmp_path / "key.pem"))
        with Client(n.address, token=ACME, ca_file=ca) as cw:
            ex = cw.submit("tls")
            assert cw.get_execution(ex.id).id == ex.id

        async def read() -> str:
            async with AsyncClient(n.address, token=ACME, ca_file=ca) as aw:
                return str((await aw.get_execution(ex.id)).id)

        assert asyncio.run(read()) == ex.id
        with Client(n.address, token=ACME, retries=0) as plain, pytest.raises(Unavailable):
            plain.get_execution(ex.id)  # plaintext against a TLS node
