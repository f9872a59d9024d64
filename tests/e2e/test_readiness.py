"""Readiness on real node processes: health (overall and per service) says NOT_SERVING until the
node has joined and owns its share of partitions, then SERVING (cluster/api/health.py)."""

from __future__ import annotations

import signal

import pytest

from cronwheel.devtools.harness import ProcessCluster

from .helpers import wait_until
from .ops_helpers import CRONWHEEL_SERVICES, NOT_SERVING, SERVING, health

pytestmark = [pytest.mark.e2e]


def test_a_single_node_is_ready_once_it_owns_every_partition() -> None:
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        n1 = c.start_node("n1")
        wait_until(lambda: health(n1.address) == SERVING, 30, "n1 SERVING")
        assert {owner for owner, _ in c.owners().values()} == {"n1"} and len(c.owners()) == 8
        assert any(ln.startswith("node n1 ready (8 partitions)") for ln in n1.lines)


def test_a_node_whose_share_is_still_held_by_a_frozen_node_is_not_serving_until_it_owns_it() -> None:
    # A long lease: the frozen n1 keeps its member key and partition keys for 10 s after its last
    # keep-alive, so n2 is listening (and answering health) long before it can own its share.
    with ProcessCluster(partitions=8, lease_ttl_s=10) as c:
        n1 = c.start_node("n1")
        wait_until(lambda: health(n1.address) == SERVING, 30, "n1 SERVING")
        n1.signal(signal.SIGSTOP)
        try:
            n2 = c.start_node("n2")  # returns at its "listening on" line
            for service in ("", *CRONWHEEL_SERVICES):
                assert health(n2.address, service) == NOT_SERVING, service
            assert not any(" ready (" in ln for ln in n2.lines)
            assert "n2" not in {owner for owner, _ in c.owners().values()}  # the frozen n1 holds them all
            # n1's lease expires: n2 is then assigned every partition and acquires them all.
            wait_until(lambda: health(n2.address) == SERVING, 40, "n2 SERVING after n1's lease expired")
            owners = c.owners()
            assert len(owners) == 8 and {o for o, _ in owners.values()} == {"n2"}
            for service in CRONWHEEL_SERVICES:
                assert health(n2.address, service) == SERVING, service
        finally:
            n1.signal(signal.SIGCONT)
