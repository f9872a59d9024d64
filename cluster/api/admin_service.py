"""AdminService: what operators ask a node about the cluster, and the audit and alert log.

ClusterStatus (admin-only, enforced by auth.AuthInterceptor) answers from etcd (members,
partition keys: owner and epoch), PostgreSQL (the fencing record: the owner and epoch the
database will accept writes from; queue depths) and each node's own view of itself (lease
deadline, partitions it acts for). Peers are asked for their self-view with a short deadline,
forwarding the caller's (admin) credentials and over TLS when the node serves TLS; a peer that
does not answer is listed without it.

ListEvents pages through the events table by ascending id; a tenant caller sees only its own
tenant's events (cluster events have no tenant and are admin-only).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.cluster.api import convert as cv
from cronwheel.cluster.api import pages
from cronwheel.cluster.api.auth import current_caller, peer_channel
from cronwheel.cluster.commands.values import fetch, text
from cronwheel.errors import InvalidArgument
from cronwheel.v1 import admin_pb2, admin_pb2_grpc, common_pb2

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
        pct = n.firer.lag_percentiles() if hasattr(n, "firer") else None
        if pct is not None:
            m.fire_lag_p50.FromNanoseconds(int(max(0.0, pct[0]) * 1e9))
            m.fire_lag_p99.FromNanoseconds(int(max(0.0, pct[1]) * 1e9))
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
        auth = tuple((k, v) for k, v in md.items() if k == "authorization")
        answers = await asyncio.gather(*(self._peer(m.address, auth) for m in peers))
        resp.members.append(self.self_member())
        for m, got in zip(peers, answers, strict=True):
            resp.members.append(got if got is not None else admin_pb2.Member(node_id=m.node, address=m.address))
        fenced = {r.partition: r for r in await n.store.partitions.list_partitions()}
        for p in range(n.partitions):
            kv = view.partition_keys.get(p)
            row = fenced.get(p)
            ps = admin_pb2.PartitionStatus(
                id=p,
                owner=kv.value.decode(errors="replace") if kv else "",
                epoch=kv.create_revision if kv else 0,
                fenced_owner=(row.owner if row else None) or "",
                fenced_epoch=row.epoch if row else 0,
            )
            if row is not None and row.acquired_at is not None:
                ps.acquired_at.CopyFrom(ts(row.acquired_at.timestamp()))
            resp.partitions.append(ps)
        depths = {r["priority"]: r for r in await fetch(n.store, "api_queue_depths", {})}
        for name, prio in (("critical", common_pb2.PRIORITY_CRITICAL), ("default", common_pb2.PRIORITY_DEFAULT),
                           ("bulk", common_pb2.PRIORITY_BULK)):
            d = admin_pb2.QueueDepth(priority=prio, queued=int(depths[name]["queued"]) if name in depths else 0)
            if name in depths and depths[name]["oldest_run_at"] is not None:
                d.oldest_run_at.CopyFrom(cv.ts(depths[name]["oldest_run_at"]))
            resp.queue_depths.append(d)
        return resp

    async def ListEvents(  # noqa: N802 - gRPC method name
        self, request: admin_pb2.ListEventsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> admin_pb2.ListEventsResponse:
        tenant = current_caller().filter(request.tenant, "tenant")
        if request.after_id < 0:
            raise InvalidArgument("after_id", f"must be >= 0, got {request.after_id}")
        size = cv.page_size(request.page_size)
        filters = {
            "tenant": tenant, "schedule_id": cv.uuid_of(request.schedule_id, "schedule_id", required=False),
            "execution_id": cv.uuid_of(request.execution_id, "execution_id", required=False),
            "kind": text("kind", request.kind, required=False) or None, "alerts_only": request.alerts_only,
        }
        cursor = pages.decode(request.page_token, "events", {**filters, "after_id": request.after_id})
        after = pages.id_cursor(cursor) if cursor is not None else request.after_id
        rows = await fetch(self.node.store, "api_list_events", {**filters, "after_id": after, "limit": size + 1})
        resp = admin_pb2.ListEventsResponse(events=[cv.event_out(r) for r in rows[:size]])
        if len(rows) > size:
            resp.next_page_token = pages.encode("events", {**filters, "after_id": request.after_id},
                                                [rows[size - 1]["id"]])
        return resp

    async def _peer(self, address: str, auth: tuple[tuple[str, str], ...]) -> admin_pb2.Member | None:
        try:
            async with peer_channel(address, self.node.config.tls_cert) as ch:
                stub = admin_pb2_grpc.AdminServiceStub(ch)
                r = await stub.ClusterStatus(
                    admin_pb2.ClusterStatusRequest(), timeout=0.5, metadata=((LOCAL_ONLY, "1"), *auth)
                )
                return r.members[0] if r.members else None
        except grpc.RpcError:
            return None
