"""A scheduler node: one process, one asyncio TaskGroup.

    Node
    ├── PgStore           (psycopg pool; fencing enforced in storage)
    ├── Etcd + Coordinator (membership, partition leases, epochs)
    ├── gRPC server        (AdminService; health; reflection)
    └── listeners of partition gains and losses (the firing path subscribes here)

A crashed task takes the node down (TaskGroup). SIGTERM/SIGINT: release every partition
(in-flight batches finish first), revoke the lease, stop the server, close the pool.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cronwheel import __version__
from cronwheel.clock import Clock, SystemClock
from cronwheel.cluster.api import services
from cronwheel.cluster.coordination.coordinator import Coordinator, OwnershipListener
from cronwheel.cluster.coordination.etcd import Etcd
from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.cluster.dispatch.reaper import Reaper
from cronwheel.cluster.dispatch.service import DispatchService
from cronwheel.cluster.firing.firer import Firer, FiringConfig
from cronwheel.cluster.metrics import Metrics
from cronwheel.cluster.notifications import ChangeListener
from cronwheel.errors import CronwheelError
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

log = logging.getLogger("cronwheel.cluster.node")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    dsn: str
    etcd_endpoints: tuple[str, ...]
    listen: str = "127.0.0.1:0"
    advertise: str = ""
    lease: PartitionLeaseConfig = field(default_factory=PartitionLeaseConfig)
    firing: FiringConfig = field(default_factory=FiringConfig)
    metrics_listen: str = "127.0.0.1:0"  # empty: no metrics endpoint
    retention_days: int = 30  # events and ownership history; ExplainSchedule windows
    db_pool_max: int = 10
    # Test-only: keep acting past the local lease-trust window (shows the DB fence alone holds).
    ignore_local_trust: bool = False
    # API security (cluster/api/auth.py): the bearer-token file (empty: dev mode, every call admin) and TLS.
    auth_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    def validate(self) -> NodeConfig:
        if not self.node_id or "/" in self.node_id:
            raise ValueError(f"node id must be non-empty without '/', got {self.node_id!r}")
        if not self.etcd_endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self.lease.validate()
        self.firing.validate()
        return self


class NodeCrashed(CronwheelError):
    """A node task failed; the node stopped."""


class Listeners:
    """Fans ownership changes out to every subscriber, in order."""

    def __init__(self) -> None:
        self.subscribers: list[OwnershipListener] = []

    async def partition_gained(self, partition: int, epoch: int) -> None:
        for s in self.subscribers:
            await s.partition_gained(partition, epoch)

    async def partition_releasing(self, partition: int, epoch: int) -> None:
        for s in self.subscribers:
            await s.partition_releasing(partition, epoch)

    def partition_lost(self, partition: int, epoch: int, reason: str) -> None:
        for s in self.subscribers:
            s.partition_lost(partition, epoch, reason)


class Node:
    def __init__(self, config: NodeConfig, clock: Clock | None = None) -> None:
        self.config = config.validate()
        self.clock: Clock = clock or SystemClock()
        self.version = __version__
        self.started_at = self.clock.now_ts()
        self.store = PgStore(StoreConfig(
            dsn=_with_session_limits(config.dsn), max_connections=config.db_pool_max,
        ))
        self.etcd = Etcd(config.etcd_endpoints, timeout_s=config.lease.etcd_timeout_s)
        self.listeners = Listeners()
        self.partitions = 0
        self.coordinator: Coordinator
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.advertise = config.advertise
        self._stop = asyncio.Event()
        self.metrics = Metrics()
        self.dispatcher = Dispatcher(self.store, self.clock, metrics=self.metrics)

    def wheel_size(self) -> int:
        return self.firer.wheel_size() if hasattr(self, "firer") else 0

    def request_stop(self) -> None:
        self._stop.set()

    async def _after_reconnect(self) -> None:
        """The change listener lost PostgreSQL and is back: sweep the pool's dead connections,
        then reload every owned partition (notifications may have been missed)."""
        await self.store.check_pool()
        await self.firer.resync()

    async def _on_change(self, partition: int, kind: str, ident: object) -> None:
        import uuid

        if isinstance(ident, uuid.UUID):
            await self.firer.reload(partition, kind, ident)

    async def start_server(self) -> None:
        self.server = grpc.aio.server(interceptors=services.interceptors(self))
        names = [health.SERVICE_NAME, reflection.SERVICE_NAME]
        dispatch_pb2_grpc.add_DispatchServiceServicer_to_server(DispatchService(self.dispatcher), self.server)
        names.append(dispatch_pb2.DESCRIPTOR.services_by_name["DispatchService"].full_name)
        for register, servicer, name in services.grpc_services(self):
            register(servicer, self.server)
            names.append(name)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(names, self.server)
        creds = services.credentials(self)
        self.port = (self.server.add_secure_port(self.config.listen, creds) if creds is not None
                     else self.server.add_insecure_port(self.config.listen))
        if self.port == 0:
            raise OSError(f"cannot listen on {self.config.listen}")
        await self.server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)

    async def run(self) -> None:
        await self.store.open()
        self.partitions = await self.store.partition_count()
        await self.start_server()
        host = self.config.listen.rsplit(":", 1)[0]
        advertise = self.config.advertise or f"{host}:{self.port}"
        self.advertise = advertise
        self.coordinator = Coordinator(
            self.config.node_id, advertise, self.etcd, self.store, self.partitions, self.clock,
            self.config.lease, self.listeners, ignore_local_trust=self.config.ignore_local_trust,
        )
        self.firer = Firer(
            self.store.firing, self.clock, self.config.firing,
            epoch_if_trusted=self.coordinator.epoch_if_trusted,
            on_stale=self.coordinator.partition_stale,
            on_fired=lambda fired: self.dispatcher.wake(),
            metrics=self.metrics,
        )
        reaper = Reaper(self.store, lambda: self.coordinator.owned.snapshot().items(), self.dispatcher.wake,
                        clock=self.clock,
                        retention_days=self.config.retention_days, metrics=self.metrics)
        self.listeners.subscribers.append(self.firer)
        changes = ChangeListener(self.config.dsn, self._on_change, self._after_reconnect, self.dispatcher.wake)
        log.info("node started", extra={"event": "node_started", "address": advertise,
                                        "partitions": self.partitions})
        if self.config.metrics_listen:
            port = self.metrics.serve(self.config.metrics_listen)
            host = self.config.metrics_listen.rpartition(":")[0] or "127.0.0.1"
            print(f"node {self.config.node_id} metrics on http://{host}:{port}/metrics", flush=True)
        print(f"node {self.config.node_id} listening on {advertise}", flush=True)
        try:
            async with asyncio.TaskGroup() as tg:
                coord = tg.create_task(self.coordinator.run(), name="coordinator")
                firing = tg.create_task(self.firer.run(), name="firer")
                listen = tg.create_task(changes.run(), name="change-listener")
                reap = tg.create_task(reaper.run(), name="reaper")
                metrics = tg.create_task(self.metrics.refresh_loop(
                    self.store, self.coordinator.owned.snapshot, self.wheel_size,
                    self.coordinator.lease_deadline_s, clock=self.clock, refresh_s=15.0), name="metrics")
                await self._stop.wait()
                log.info("node stopping", extra={"event": "node_stopping"})
                await self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
                await self.coordinator.shutdown()
                for t in (coord, firing, listen, reap, metrics):
                    t.cancel()
        except* Exception as eg:
            # A crashed task takes the node down (by design); say which and why, with tracebacks
            # in the log, and one clear line for the operator.
            for exc in eg.exceptions:
                log.error("node task crashed", exc_info=exc, extra={"event": "node_crashed"})
            first = eg.exceptions[0]
            raise NodeCrashed(f"node crashed: {type(first).__name__}: {first}") from first
        finally:
            if self.server is not None:
                await self.server.stop(grace=1.0)
            await self.etcd.close()
            await self.store.close()
            self.metrics.close()
            log.info("node stopped", extra={"event": "node_stopped"})


def _with_session_limits(dsn: str) -> str:
    """A node's sessions must never hold the partition row lock while paused: a transaction idle
    for longer than this is ended by the server, so a SIGSTOPped node cannot block takeover."""
    opt = "options=-c%20idle_in_transaction_session_timeout%3D2000"
    return dsn + ("&" if "?" in dsn else "?") + opt


async def serve(config: NodeConfig) -> None:
    node = Node(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.request_stop)
    await node.run()
