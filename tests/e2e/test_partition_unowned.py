"""The partition_unowned alert on a real cluster: a member that joined etcd but never takes its
partitions (a stuck node: a member key, no partition keys) leaves them without an owner; the live
nodes raise one partition_unowned event per such partition, delivered to a webhook, and none for
the partitions they own; when the stuck member goes, its partitions are taken and nothing more
is raised.

The "stuck node" is a member key the test writes in etcd itself (no lease, so it never expires),
which is what a node process frozen after registering looks like to the others.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from cronwheel.client import Client
from cronwheel.cluster.coordination.assignment import assign
from cronwheel.cluster.coordination.etcd import Etcd
from cronwheel.devtools.harness import ProcessCluster

from .helpers import observe_for, wait_until
from .test_webhooks import FLAGS
from .webhook_receiver import Receiver

pytestmark = [pytest.mark.e2e]

P = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=P, lease_ttl_s=3) as c:
        for name in ("n1", "n2"):
            c.start_node(name, "--unowned-alert-after", "1", *FLAGS)
        yield c


def etcd(c: ProcessCluster, op: str) -> None:
    async def run() -> None:
        e = Etcd(c.etcd.endpoints)
        try:
            key = f"/{c.cluster}/members/stuck"
            if op == "join":
                await e.put(key, json.dumps({"node": "stuck", "address": "127.0.0.1:9", "pid": None}).encode())
            else:
                await e.delete_if(key)
        finally:
            await e.close()

    asyncio.run(run())


def test_partitions_of_a_stuck_member_raise_one_partition_unowned_alert_each(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    wait_until(lambda: len(cluster.owners()) == P or None, 30, "the two nodes own every partition")
    with Client(cluster.addresses(), deadline_s=20) as cl:
        cl.create_webhook(receiver.url, kinds=["partition_unowned"])
        etcd(cluster, "join")
        # The live nodes hand the stuck member its share (rendezvous) and release those keys.
        stuck = {p for p, node in assign(["n1", "n2", "stuck"], P).items() if node == "stuck"}
        wait_until(lambda: set(range(P)) - set(cluster.owners()) == stuck or None, 30,
                   f"the member's share {sorted(stuck)} released")

        def alerted() -> dict[int, dict[str, object]]:
            docs = [json.loads(r.body)["event"] for r in receiver.requests()]
            return {d["partition"]: d for d in docs if d["kind"] == "partition_unowned"}

        wait_until(lambda: set(alerted()) == stuck or None, 20, f"an alert for each of {sorted(stuck)}")
        for ev in alerted().values():
            assert ev["alert"] is True and ev["tenant"] is None
            assert ev["data"]["threshold_s"] == 1.0 and ev["data"]["unowned_for_s"] >= 1.0
            assert ev["data"]["last_owner"] in ("n1", "n2"), ev
        # Two nodes saw every gap; each gap is one event, and partitions with an owner raise none.
        observe_for(3.0, lambda: len(receiver.requests()) == len(stuck) or pytest.fail(
            f"{len(receiver.requests())} deliveries for {len(stuck)} gaps"))
        etcd(cluster, "leave")
        wait_until(lambda: len(cluster.owners()) == P or None, 30, "the live nodes take the stuck share")
        observe_for(2.0, lambda: len(receiver.requests()) == len(stuck) or pytest.fail("alert after recovery"))
        body = receiver.requests()[0].body
        assert b"has had no owner for" in body and b"its ticks are not firing" in body  # Slack's text
