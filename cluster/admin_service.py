"""AdminService: what operators ask a node about the cluster.

ClusterStatus answers from etcd (members, partition keys: owner and epoch), PostgreSQL (the
fencing record: the owner and epoch the database will accept writes from) and each node's own
view of itself (lease deadline, partitions it acts for). Peers are asked for their self-view
with a short deadline; a peer that does not answer is listed without it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from cronwheel.cluster.node import Node

LOCAL_ONLY = "x-cronwheel-local-only"


def ts(seconds: float) -> Timestamp:
    t = Timestamp()
    t.FromNanoseconds(int(seconds * 1e9))
    return t


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, node: Node) -> None:
        self.node = node

    def self_member(self) -> admin_pb2.Member:
        n = self.node
        now = n.clock.now_ts()
        m = admin_pb2.Member(
            node_id=n.config.node_id,
            address=n.advertise,
            partitions=sorted(n.coordinator.owned.epochs),
            wheel_size=n.wheel_size(),
            version=n.version,
        )
        m.lease_deadline.CopyFrom(ts(now + n.coordinator.lease_deadline_s()))
        m.stats_at.CopyFrom(ts(now))
        m.started_at.CopyFrom(ts(n.started_at))
        return m

    async def ClusterStatus(  # noqa: N802 - gRPC method name
        self, request: admin_pb2.ClusterStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> admin_pb2.ClusterStatusResponse:
        n = self.node
        md = dict(context.invocation_metadata() or ())
        resp = admin_pb2.ClusterStatusResponse(
            cluster_name=n.config.lease.cluster,
            partition_count=n.partitions,
            answered_by=n.config.node_id,
        )
        resp.observed_at.CopyFrom(ts(n.clock.now_ts()))
        if md.get(LOCAL_ONLY):
            resp.members.append(self.self_member())
            return resp
        view = n.coordinator.view
        peers = [m for m in view.members.values() if m.node != n.config.node_id]
        answers = await asyncio.gather(*(self._peer(m.address) for m in peers))
        resp.members.append(self.self_member())
        for m, got in zip(peers, answers, strict=True):
            resp.members.append(got if got is not None else admin_pb2.Member(node_id=m.node, address=m.address))
        fenced = {r["id"]: r for r in await n.store.list_partitions()}
        for p in range(n.partitions):
            kv = view.partition_keys.get(p)
            row = fenced.get(p, {})
            ps = admin_pb2.PartitionStatus(
                id=p,
                owner=kv.value.decode(errors="replace") if kv else "",
                epoch=kv.create_revision if kv else 0,
                fenced_owner=row.get("owner") or "",
                fenced_epoch=int(row.get("epoch") or 0),
            )
            if row.get("acquired_at"):
                ps.acquired_at.CopyFrom(ts(row["acquired_at"].timestamp()))
            resp.partitions.append(ps)
        return resp

    async def _peer(self, address: str) -> admin_pb2.Member | None:
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stub = admin_pb2_grpc.AdminServiceStub(ch)
                r = await stub.ClusterStatus(
                    admin_pb2.ClusterStatusRequest(), timeout=0.5, metadata=((LOCAL_ONLY, "1"),)
                )
                return r.members[0] if r.members else None
        except grpc.RpcError:
            return None
