"""Coordination with real etcd, PostgreSQL and node processes (issue: cluster/)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from cronwheel.cluster.coordination.assignment import assign, moved
from cronwheel.devtools.harness import ProcessCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TTL = 3
P = 24


@pytest.fixture
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=P, lease_ttl_s=TTL) as c:
        yield c


def test_three_nodes_own_every_partition_once_balanced(cluster: ProcessCluster) -> None:
    for n in ("n1", "n2", "n3"):
        cluster.start_node(n)
    cluster.wait_converged(["n1", "n2", "n3"], timeout=20)
    owners = cluster.owners()
    assert sorted(owners) == list(range(P))
    # What the nodes did equals the pure assignment every node computes.
    assert {p: o for p, (o, _) in owners.items()} == assign(["n1", "n2", "n3"], P)


def test_sigkill_partitions_owned_again_within_ttl_plus_one_with_greater_epochs(cluster: ProcessCluster) -> None:
    for n in ("n1", "n2", "n3"):
        cluster.start_node(n)
    cluster.wait_converged(["n1", "n2", "n3"], timeout=20)
    before = cluster.owners()
    victims = {p: e for p, (o, e) in before.items() if o == "n2"}
    cluster.kill_node("n2")
    took = cluster.wait_owned_without("n2", timeout=TTL + 5)
    assert took <= TTL + 1, f"takeover took {took:.2f}s with TTL {TTL}s"
    after = cluster.owners()
    for p, old_epoch in victims.items():
        assert after[p][1] > old_epoch
    assert {p: o for p, (o, _) in after.items()} == assign(["n1", "n3"], P)
    # A partition that changed hands has a new, greater epoch; one that did not keeps its own.
    for p, (owner, epoch) in after.items():
        if owner == before[p][0]:
            assert epoch == before[p][1]
        else:
            assert epoch > before[p][1]


def test_sigterm_hands_over_within_one_second(cluster: ProcessCluster) -> None:
    for n in ("n1", "n2", "n3"):
        cluster.start_node(n)
    cluster.wait_converged(["n1", "n2", "n3"], timeout=20)
    t0 = time.monotonic()
    cluster.nodes["n1"].signal(signal.SIGTERM)
    took = cluster.wait_owned_without("n1", timeout=10)
    assert took < 1.0, f"deploy hand-over took {took:.2f}s"
    assert cluster.nodes["n1"].proc.wait(10) == 0
    assert time.monotonic() - t0 < 10
    released = [e for e in cluster.nodes["n1"].log_events("partition_released") if e["reason"] == "shutdown"]
    assert len(released) == P // 3


def test_scale_3_to_5_to_2_converges_and_moves_about_p_over_n(cluster: ProcessCluster) -> None:
    report = []
    for n in ("n1", "n2", "n3"):
        cluster.start_node(n)
    cluster.wait_converged(["n1", "n2", "n3"], timeout=20)
    steps = [
        (["n1", "n2", "n3", "n4", "n5"], lambda: [cluster.start_node("n4"), cluster.start_node("n5")]),
        (["n1", "n5"], lambda: [cluster.stop_node(n) for n in ("n2", "n3", "n4")]),
    ]
    for members, act in steps:
        before = {p: o for p, (o, _) in cluster.owners().items()}
        act()
        took = cluster.wait_converged(members, timeout=30)
        after = {p: o for p, (o, _) in cluster.owners().items()}
        n_moved = moved(before, after)
        ideal = moved(assign(sorted(set(before.values())), P), assign(members, P))
        report.append((len(set(before.values())), len(members), took, n_moved))
        # Ownership moved exactly as the pure assignment says, which moves about P/N.
        assert after == assign(members, P)
        assert n_moved == ideal
    print("scale report (from, to, seconds, moved):", report)


def test_malformed_keys_in_etcd_are_ignored(cluster: ProcessCluster) -> None:
    import asyncio

    from cronwheel.cluster.coordination.etcd import Etcd

    async def garbage() -> None:
        c = Etcd(cluster.etcd.endpoints)
        try:
            await c.put("/cronwheel/members/ghost", b"\x00not json")
            await c.put("/cronwheel/members/liar", b'{"node": "someone-else", "address": "x"}')
            await c.put("/cronwheel/partitions/banana", b"n1")
            await c.put(f"/cronwheel/partitions/{P + 7}", b"n1")
            await c.put("/cronwheel/partitions/0", b"nobody-knows-me")  # no lease, unknown owner
        finally:
            await c.close()

    asyncio.run(garbage())
    for n in ("n1", "n2"):
        cluster.start_node(n)
    cluster.wait_converged(["n1", "n2"], timeout=20)
    assert all(cluster.nodes[n].alive() for n in ("n1", "n2"))
    warnings = cluster.nodes["n1"].log_events("malformed_key")
    assert {w["key"] for w in warnings} >= {"/cronwheel/members/ghost", "/cronwheel/partitions/banana"}
