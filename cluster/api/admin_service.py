"""AdminService: what operators ask a node about the cluster, and the audit and alert log.

ClusterStatus (admin-only, enforced by auth.AuthInterceptor) answers from etcd (members,
partition keys: owner and epoch), PostgreSQL (the fencing record: the owner and epoch the
database will accept writes from; queue depths) and each node's own view of itself (lease
deadline, partitions it acts for, auth mode). Peers are asked for their self-view with a short
deadline, over TLS when the node serves TLS, and WITHOUT the caller's credentials: a member
address is whatever was written to etcd, so a token sent there could be anyone's to keep (issue
48, item 6). The self-view needs no token (auth.py: `LOCAL_ONLY`; it is the figures the node's
public metrics endpoint shows). A peer that does not answer is listed without it.

ListEvents pages through the events table by ascending id; a tenant caller sees only its own
tenant's events (cluster events have no tenant and are admin-only).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from cronwheel.clock import Clock
from cronwheel.cluster.api import convert as cv
from cronwheel.cluster.api import pages
from cronwheel.cluster.api.auth import LOCAL_ONLY, current_caller, peer_channel, self_view_only
from cronwheel.cluster.api.status import StatusProvider
from cronwheel.cluster.commands.values import text
from cronwheel.errors import InvalidArgument
from cronwheel.storage import PgStore
from cronwheel.storage.api import EventFilter
from cronwheel.v1 import admin_pb2, admin_pb2_grpc
from cronwheel.v1.enums import PRIORITY


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    """Depends on the store (fencing records, queue depths, events), the clock and a
    `StatusProvider` (this node's and its coordinator's view), nothing else of the node."""

    def __init__(self, store: PgStore, clock: Clock, status: StatusProvider) -> None:
        self.store = store
        self.clock = clock
        self.status = status

    def self_member(self) -> admin_pb2.Member:
        me = self.status.self_view()
        now = self.clock.now_ts()
        m = admin_pb2.Member(node_id=me.node_id, address=me.address, partitions=list(me.partitions),
                             wheel_size=me.wheel_size, version=me.version, auth_mode=me.auth_mode,
                             egress_allow=list(me.egress_allow))
        m.lease_deadline.CopyFrom(cv.epoch_ts(now + me.lease_deadline_in_s))
        m.stats_at.CopyFrom(cv.epoch_ts(now))
        m.started_at.CopyFrom(cv.epoch_ts(me.started_at))
        if me.fire_lag_s is not None:
            m.fire_lag_p50.FromNanoseconds(int(max(0.0, me.fire_lag_s[0]) * 1e9))
            m.fire_lag_p99.FromNanoseconds(int(max(0.0, me.fire_lag_s[1]) * 1e9))
        return m

    async def ClusterStatus(  # noqa: N802 - gRPC method name
        self, request: admin_pb2.ClusterStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> admin_pb2.ClusterStatusResponse:
        st = self.status
        resp = admin_pb2.ClusterStatusResponse(cluster_name=st.cluster_name, partition_count=st.partitions,
                                               answered_by=st.node_id)
        resp.observed_at.CopyFrom(cv.epoch_ts(self.clock.now_ts()))
        if self_view_only(context.invocation_metadata()):
            resp.members.append(self.self_member())
            return resp
        view = st.cluster_view()
        peers = [(node, address) for node, address in view.members.items() if node != st.node_id]
        answers = await asyncio.gather(*(self._peer(address) for _, address in peers))
        resp.members.append(self.self_member())
        for (node, address), got in zip(peers, answers, strict=True):
            resp.members.append(got if got is not None else admin_pb2.Member(node_id=node, address=address))
        fenced = {r.partition: r for r in await self.store.partitions.list_partitions()}
        for p in range(st.partitions):
            key = view.partition_keys.get(p)
            row = fenced.get(p)
            ps = admin_pb2.PartitionStatus(
                id=p,
                owner=key.owner if key else "",
                epoch=key.epoch if key else 0,
                fenced_owner=(row.owner if row else None) or "",
                fenced_epoch=row.epoch if row else 0,
            )
            if row is not None and row.acquired_at is not None:
                ps.acquired_at.CopyFrom(cv.ts(row.acquired_at))
            resp.partitions.append(ps)
        depths = {d.priority: (d.queued, d.oldest_run_at) for d in await self.store.dispatch.queue_depths()}
        for number, name in PRIORITY.items():
            queued, oldest = depths.get(name, (0, None))
            d = admin_pb2.QueueDepth(priority=number, queued=queued)  # type: ignore[arg-type]
            if oldest is not None:
                d.oldest_run_at.CopyFrom(cv.ts(oldest))
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
        rows = await self.store.events.list(EventFilter(**filters, after_id=after, limit=size + 1))
        resp = admin_pb2.ListEventsResponse(events=[cv.event_out(r) for r in rows[:size]])
        if len(rows) > size:
            resp.next_page_token = pages.encode("events", {**filters, "after_id": request.after_id},
                                                [rows[size - 1]["id"]])
        return resp

    async def _peer(self, address: str) -> admin_pb2.Member | None:
        """The peer's self-view; no credential of any caller goes with the question."""
        try:
            async with peer_channel(address, self.status.tls_cert) as ch:
                stub = admin_pb2_grpc.AdminServiceStub(ch)
                r = await stub.ClusterStatus(
                    admin_pb2.ClusterStatusRequest(), timeout=0.5, metadata=((LOCAL_ONLY, "1"),)
                )
                return r.members[0] if r.members else None
        except grpc.RpcError:
            return None
