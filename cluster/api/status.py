"""What AdminService.ClusterStatus needs to know about the node serving it, as a narrow
protocol (`StatusProvider`), and its implementation over a running `Node` (`NodeStatus`, built
once by `services.grpc_services`). The servicer never sees the Node itself.

Start-up: the node may serve gRPC before its coordinator exists. `NodeStatus` then reports no
partitions, no lease deadline and an empty cluster view instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from cronwheel.cluster.api.auth import auth_mode

if TYPE_CHECKING:
    from cronwheel.cluster.node import Node


@dataclass(frozen=True, slots=True)
class SelfView:
    """This node as it sees itself."""

    node_id: str
    address: str
    partitions: tuple[int, ...]
    lease_deadline_in_s: float  # from now; 0 when it holds no lease yet
    wheel_size: int
    version: str
    started_at: float  # Unix seconds
    fire_lag_s: tuple[float, float] | None  # (p50, p99), None before any fire
    auth_mode: str = ""  # auth.auth_mode: "tokens", "loopback-only" or "insecure"
    egress_allow: tuple[str, ...] = ()  # its egress allow list, normalized (cronwheel/egress.py describe)


@dataclass(frozen=True, slots=True)
class PartitionKey:
    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster as this node's coordinator sees it in etcd."""

    members: dict[str, str] = field(default_factory=dict)  # node id -> address
    partition_keys: dict[int, PartitionKey] = field(default_factory=dict)


class StatusProvider(Protocol):
    cluster_name: str
    node_id: str
    tls_cert: str  # to call peers over TLS when this node serves TLS

    @property
    def partitions(self) -> int: ...

    def self_view(self) -> SelfView: ...

    def cluster_view(self) -> ClusterView: ...


class NodeStatus:
    """`StatusProvider` over a Node (reads its coordinator and firer when they exist)."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self.cluster_name = node.config.lease.cluster
        self.node_id = node.config.node_id
        self.tls_cert = getattr(node.config, "tls_cert", "")
        self.auth_mode = auth_mode(getattr(node.config, "auth_file", ""), getattr(node.config, "listen", ""))
        webhooks = getattr(node.config, "webhooks", None)  # its egress policy: fixed for the node's life
        self.egress_allow: tuple[str, ...] = webhooks.egress.describe() if webhooks is not None else ()

    @property
    def partitions(self) -> int:
        return self._node.partitions  # known once the node has read the database

    def self_view(self) -> SelfView:
        n = self._node
        coord = getattr(n, "coordinator", None)
        firer = getattr(n, "firer", None)
        return SelfView(
            node_id=self.node_id, address=n.advertise,
            partitions=tuple(sorted(coord.owned.epochs)) if coord is not None else (),
            lease_deadline_in_s=coord.lease_deadline_s() if coord is not None else 0.0,
            wheel_size=n.wheel_size(), version=n.version, started_at=n.started_at,
            fire_lag_s=firer.lag_percentiles() if firer is not None else None,
            auth_mode=self.auth_mode,
            egress_allow=self.egress_allow,
        )

    def cluster_view(self) -> ClusterView:
        coord = getattr(self._node, "coordinator", None)
        if coord is None:
            return ClusterView()
        view = coord.view
        return ClusterView(
            members={m.node: m.address for m in view.members.values()},
            partition_keys={p: PartitionKey(kv.value.decode(errors="replace"), kv.create_revision)
                            for p, kv in view.partition_keys.items()},
        )
