"""Never exposed (issue 48, items 5 and 6): no admin-for-all on a public address, and no token
sent to whatever address etcd names.

- `cronwheel node` and `cronwheel console --no-login` refuse to listen beyond loopback without
  authentication unless told `--insecure` (one line naming the flags, exit 2);
- ClusterStatus and `cronwheel status` show each member's auth mode;
- ClusterStatus asks its peers for their self-view without the caller's token: a member key put
  in etcd by the test, naming a listener the test runs, receives the question but no
  `authorization`, and the real members still answer with their figures under auth.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from cronwheel.cluster.coordination.etcd import Etcd
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.devtools.localservers import free_port
from cronwheel.v1 import admin_pb2

from .api_cluster import TOKENS, Api, write_auth_file
from .helpers import one_line_error, run_cli, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADMIN = TOKENS["admin"][0]


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", ""])
def test_node_beyond_loopback_without_auth_file_exits_2_naming_auth_file_and_insecure(host: str) -> None:
    listen = f"{host}:{free_port()}"
    r = run_cli("node", "--dsn", "postgresql://nobody@127.0.0.1:1/none", "--etcd", "127.0.0.1:1",
                "--listen", listen, env={"CRONWHEEL_AUTH_FILE": ""})
    line = one_line_error(r, 2, "--auth-file", "--insecure", listen)
    assert line.startswith("cronwheel: error: --listen: "), line


def test_console_no_login_beyond_loopback_exits_2_naming_no_login_and_insecure() -> None:
    listen = f"0.0.0.0:{free_port()}"
    r = run_cli("console", "--address", "127.0.0.1:1", "--no-login", "--listen", listen)
    one_line_error(r, 2, "--no-login", "--insecure", listen)


class Recorder(grpc.GenericRpcHandler):
    """A gRPC listener that answers nothing (UNIMPLEMENTED) and records every call's metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> None:
        with self.lock:
            self.calls.append((details.method, dict(details.invocation_metadata or ())))  # type: ignore[attr-defined]
        return None


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    rec = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[rec])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield rec, f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait()


def _etcd(c: ProcessCluster, op: str, key: str, value: bytes = b"") -> None:
    async def run() -> None:
        e = Etcd(c.etcd.endpoints)
        try:
            if op == "put":
                await e.put(key, value)
            else:
                await e.delete_if(key, value=value)
        finally:
            await e.close()

    asyncio.run(run())


def test_auth_modes_show_and_no_token_reaches_a_member_address_written_to_etcd(
    recorder: tuple[Recorder, str], tmp_path: Any
) -> None:
    rec, fake_address = recorder
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        auth = str(write_auth_file(c.workdir / "auth.json"))
        n1 = c.start_node("tok1", "--auth-file", auth)
        c.start_node("tok2", "--auth-file", auth)
        port = free_port()
        c.start_node("open", "--listen", f"0.0.0.0:{port}", "--advertise", f"127.0.0.1:{port}", "--insecure")
        c.start_node("local")
        c.wait_converged(["tok1", "tok2", "open", "local"])

        # `cronwheel status` shows each member's auth mode, peers' included (their self-view).
        r = run_cli("status", "--address", n1.address, "--token", ADMIN, "--json")
        assert r.returncode == 0, r.stderr
        modes = {m["node_id"]: m["auth_mode"] for m in json.loads(r.stdout)["members"]}
        assert modes == {"tok1": "tokens", "tok2": "tokens", "open": "insecure", "local": "loopback-only"}
        table = run_cli("status", "--address", n1.address, "--token", ADMIN)
        assert table.returncode == 0, table.stderr
        header, *rows = [ln.split() for ln in table.stdout.splitlines()[1:6]]
        assert "AUTH" in header
        col = header.index("AUTH")
        assert {row[0]: row[col] for row in rows} == modes

        # A member key naming the test's listener: asked, without any token.
        record = json.dumps({"node": "fake", "address": fake_address, "pid": 1}).encode()
        key = f"/{c.cluster}/members/fake"
        _etcd(c, "put", key, record)
        admin = Api(n1.address, "admin")

        def asked() -> admin_pb2.ClusterStatusResponse | None:
            st = admin.call("ClusterStatus", admin_pb2.ClusterStatusRequest())
            return st if rec.calls and "fake" in {m.node_id for m in st.members} else None

        st = wait_until(asked, 20, "ClusterStatus to ask the member written to etcd")
        _etcd(c, "delete", key, record)
        assert rec.calls, "the fake member was asked (the test shows what it received)"
        for method, md in rec.calls:
            assert method == "/cronwheel.v1.AdminService/ClusterStatus"
            assert "authorization" not in md, f"a token reached {fake_address}: {md}"
            assert TOKENS["admin"][0] not in json.dumps(md)
        members = {m.node_id: m for m in st.members}
        assert set(members) == {"tok1", "tok2", "open", "local", "fake"}
        for name in ("tok1", "tok2", "open", "local"):  # every real member answered, under auth
            assert members[name].HasField("stats_at") and members[name].version, name
        assert not members["fake"].HasField("stats_at")
        # The self-view needs no token; everything else still does.
        anon = Api(n1.address, None)
        assert anon.fails("ClusterStatus", admin_pb2.ClusterStatusRequest()).code == grpc.StatusCode.UNAUTHENTICATED
        me = anon.call("ClusterStatus", admin_pb2.ClusterStatusRequest(),
                       metadata=(("x-cronwheel-local-only", "1"),))
        assert [m.node_id for m in me.members] == ["tok1"] and not me.partitions and not me.queue_depths
