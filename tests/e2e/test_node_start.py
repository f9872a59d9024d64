"""A node refuses to start where it would share what must not be shared (issue 14, holes 4-6):
a port with another node, a database with another cluster, a database that was never migrated.
Each refusal is one clear line and the exit code docs/operating.md promises."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from cronwheel.cluster.coordination.etcd import Etcd
from cronwheel.devtools.harness import NodeProc, ProcessCluster
from cronwheel.devtools.localservers import LocalEtcd, free_port

from .helpers import run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        yield c


def exit_of(node: NodeProc, timeout_s: float = 30) -> tuple[int, str]:
    """The exit code of a node that must refuse to start, and the last line of its stderr."""
    code = node.proc.wait(timeout_s)
    lines = [ln for ln in node.log_path.read_text().splitlines() if ln.strip()]
    return code, lines[-1] if lines else ""


def test_second_node_on_a_busy_port_exits_2_with_address_already_in_use(cluster: ProcessCluster) -> None:
    listen = f"127.0.0.1:{free_port()}"
    first = cluster.start_node("port-a", "--listen", listen)
    second = cluster.start_node("port-b", "--listen", listen, wait=False)
    code, line = exit_of(second)
    assert code == 2, line
    assert line.startswith("cronwheel: error: --listen: ") and "address already in use" in line, line
    assert listen in line
    assert first.alive(), "the node that had the port keeps it"
    cluster.stop_node("port-a")


def test_node_of_another_cluster_is_refused_naming_both_clusters(cluster: ProcessCluster) -> None:
    node = cluster.start_node("other", "--cluster", "elsewhere", wait=False)
    code, line = exit_of(node)
    assert code == 1, line
    assert line.startswith("cronwheel: error: ") and "'cronwheel'" in line and "'elsewhere'" in line, line
    assert cluster.sql("SELECT count(*) FROM partition_history WHERE owner = 'other'") == [(0,)]


def test_node_of_a_second_etcd_cluster_of_the_same_name_is_refused_naming_both(cluster: ProcessCluster) -> None:
    first = cluster.start_node("etcd-a")  # records the first etcd cluster's id (adopted: migrate knows no etcd)
    recorded = cluster.sql("SELECT value #>> '{}' FROM cluster_meta WHERE key = 'etcd_cluster_id'")[0][0]
    with LocalEtcd() as other:  # a second etcd server: its own cluster id, and the same cluster name
        node = cluster.start_node("etcd-b", "--etcd", other.endpoint, wait=False)
        code, line = exit_of(node)
        theirs = asyncio.run(_cluster_id(other.endpoint))
    assert code == 1, line
    assert line.startswith("cronwheel: error: ") and "Traceback" not in node.log_path.read_text(), line
    assert recorded in line and theirs in line and recorded != theirs and "'cronwheel'" in line, line
    assert cluster.sql("SELECT count(*) FROM partition_history WHERE owner = 'etcd-b'") == [(0,)]
    assert first.alive()
    cluster.stop_node("etcd-a")


async def _cluster_id(endpoint: str) -> str:
    etcd = Etcd([endpoint])
    try:
        return await etcd.cluster_id()
    finally:
        await etcd.close()


def test_migrate_of_a_database_owned_by_another_cluster_is_refused(cluster: ProcessCluster) -> None:
    r = run_cli("migrate", "--dsn", cluster.dsn, "--partitions", "4", "--cluster", "elsewhere")
    assert r.returncode == 1, r.stderr
    assert "'cronwheel'" in r.stderr and "'elsewhere'" in r.stderr, r.stderr
    again = run_cli("migrate", "--dsn", cluster.dsn, "--partitions", "4")
    assert again.returncode == 0 and "cluster cronwheel" in again.stdout, again.stderr


def test_node_on_a_database_never_migrated_exits_3_database_is_not_migrated(cluster: ProcessCluster) -> None:
    empty = cluster.pg.create_database("never_migrated")
    node = cluster.start_node("fresh", "--dsn", empty, wait=False)
    code, line = exit_of(node)
    assert code == 3, line
    assert line.startswith("cronwheel: error: ") and "database is not migrated" in line, line


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--unowned-alert-after", "abc", "--unowned-alert-after must be a number of seconds, got 'abc'"),
    ("--unowned-alert-after", "0", "--unowned-alert-after must be between 1 and 86400 seconds, got 0"),
    ("--lease-ttl", "1", "--lease-ttl must be between 2 and 300, got 1"),
    # These two named a flag that does not exist (--retention-every) before the fix.
    ("--retention-pause", "-1", "--retention-pause: must be >= 0 seconds, got -1"),
    ("--retention-idle", "0", "--retention-idle: must be > 0 seconds, got 0"),
    ("--retention-gap-share", "1.5", "--retention-gap-share: must be in (0, 1], got 1.5"),
    ("--secret-key-file", "/nonexistent/secret.key", "--secret-key-file: cannot read /nonexistent/secret.key"),
])
def test_a_bad_node_flag_exits_2_naming_the_flag_before_anything_starts(flag: str, value: str, says: str) -> None:
    r = run_cli("node", "--etcd", "127.0.0.1:1", "--dsn", "postgresql://nobody@127.0.0.1:1/x", flag, value)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_a_node_stopped_right_after_its_start_exits_at_once(cluster: ProcessCluster) -> None:
    """SIGTERM as soon as the node listens (a deploy that changes its mind, a supervisor's quick
    restart): the node exits within its usual hand-over time. It hung, every time on the merge of
    the clock-skew guard: psycopg_pool's wait for a connection (the start's first samples and token
    read compete for the pool) handed a connection to a task whose cancellation had just arrived,
    swallowing it, so the token cache ran on and the node's TaskGroup waited for it forever
    (storage/db.py `_borrow` now re-raises the cancellation). Repeated: the race is the start's."""
    import signal

    for i in range(4):
        name = f"quick-{i}"
        node = cluster.start_node(name)
        node.signal(signal.SIGTERM)
        code, out = exit_of(node, timeout_s=15)
        assert code == 0, out
