"""AdminService.ClusterStatus depends on a narrow StatusProvider, not on the Node: it answers
from fakes, and `NodeStatus` answers for a node whose coordinator does not exist yet (gRPC is
served before it is built)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from cronwheel.clock import FakeClock
from cronwheel.cluster.api.admin_service import AdminService
from cronwheel.cluster.api.status import ClusterView, NodeStatus, PartitionKey, SelfView
from cronwheel.storage.dispatch import QueueDepth
from cronwheel.storage.partitions import FencingRecord
from cronwheel.v1 import admin_pb2, common_pb2


class Status:
    cluster_name, node_id, partitions, tls_cert = "prod", "n1", 3, ""

    def self_view(self) -> SelfView:
        return SelfView("n1", "127.0.0.1:1", (0, 2), 4.0, 17, "1.0", 1_600_000_000.0, None, "tokens")

    def cluster_view(self) -> ClusterView:
        return ClusterView({"n1": "127.0.0.1:1"}, {0: PartitionKey("n1", 11), 2: PartitionKey("n1", 12)})


async def _partitions() -> list[FencingRecord]:
    return [FencingRecord(0, 11, "n1", None)]


async def _depths() -> list[QueueDepth]:
    return [QueueDepth("bulk", 5, None)]


class Store:
    partitions = SimpleNamespace(list_partitions=_partitions)
    dispatch = SimpleNamespace(queue_depths=_depths)


class Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()


def test_cluster_status_answers_from_a_status_provider_and_the_store() -> None:
    svc = AdminService(Store(), FakeClock(), Status())  # type: ignore[arg-type]
    resp = asyncio.run(svc.ClusterStatus(admin_pb2.ClusterStatusRequest(), Context()))  # type: ignore[arg-type]
    assert (resp.cluster_name, resp.partition_count, resp.answered_by) == ("prod", 3, "n1")
    assert [m.node_id for m in resp.members] == ["n1"] and list(resp.members[0].partitions) == [0, 2]
    assert resp.members[0].auth_mode == "tokens"
    assert [(p.owner, p.epoch, p.fenced_epoch) for p in resp.partitions] == [("n1", 11, 11), ("", 0, 0),
                                                                           ("n1", 12, 0)]
    assert {d.priority: d.queued for d in resp.queue_depths} == {
        common_pb2.PRIORITY_CRITICAL: 0, common_pb2.PRIORITY_DEFAULT: 0, common_pb2.PRIORITY_BULK: 5}


def test_node_status_before_the_coordinator_exists_reports_nothing_owned() -> None:
    node = SimpleNamespace(config=SimpleNamespace(lease=SimpleNamespace(cluster="c"), node_id="n1", tls_cert="",
                                                  listen="127.0.0.1:0", auth_file=""),
                           partitions=0, advertise="a:1", version="v", started_at=1.0, wheel_size=lambda: 0)
    st = NodeStatus(node)  # type: ignore[arg-type]
    me = st.self_view()
    assert me.partitions == () and me.lease_deadline_in_s == 0.0 and me.fire_lag_s is None
    assert me.auth_mode == "loopback-only"
    assert st.cluster_view() == ClusterView()
    node.partitions = 64  # read at the database later in start-up
    assert st.partitions == 64
