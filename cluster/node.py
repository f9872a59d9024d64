"""A scheduler node: one process, one asyncio TaskGroup.

    Node
    ├── PgStore           (psycopg pool; fencing enforced in storage)
    ├── Etcd + Coordinator (membership, partition leases, epochs)
    ├── ClockSkewGuard     (this node's clock against PostgreSQL's: beyond --max-clock-skew it
    │                       stands down: no partitions, no claims; coordination/clock_skew.py)
    ├── gRPC server        (AdminService, ...; health per service; reflection v1 + v1alpha)
    ├── Firer, Reaper, Pruner (retention) for the partitions it owns
    └── listeners of partition gains and losses (the firing path subscribes here)

Start, in this order (`run()`): open the pool; read P and claim the database for this cluster
(`PartitionsPort.claim_cluster`: a database serves one cluster, its name and its etcd cluster's
id, and a node of another is refused);
bind the port (no port reuse: a second node on a busy port fails, `--listen: ... address already
in use`); build every component; serve with health NOT_SERVING; start the tasks and print the `listening
on` line; health turns SERVING (and `ready` is printed) once the node has joined and owns its share
of partitions (cluster/api/health.py). Nothing that a call can reach is missing meanwhile.

A crashed task takes the node down (TaskGroup). SIGTERM/SIGINT: release every partition
(in-flight batches finish first), revoke the lease, stop the server, close the pool.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
from dataclasses import dataclass, field

import grpc

from cronwheel import __version__, tracing
from cronwheel.clock import Clock, SystemClock
from cronwheel.cluster.api import reflection, services
from cronwheel.cluster.api.dispatch_service import DispatchService
from cronwheel.cluster.api.health import Health, wait_ready
from cronwheel.cluster.api.tokens import TokenCache
from cronwheel.cluster.coordination.clock_skew import ClockSkewConfig, ClockSkewGuard, SkewState
from cronwheel.cluster.coordination.coordinator import Coordinator, OwnershipListener
from cronwheel.cluster.coordination.etcd import Etcd, EtcdSecurity
from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.cluster.dispatch.reaper import Reaper
from cronwheel.cluster.firing.firer import Firer, FiringConfig
from cronwheel.cluster.metrics import Metrics
from cronwheel.cluster.notifications import ChangeListener
from cronwheel.cluster.retention.policy import RetentionConfig
from cronwheel.cluster.retention.pruner import Pruner, RetentionMetrics
from cronwheel.cluster.webhooks.config import WebhookConfig
from cronwheel.cluster.webhooks.sender import WebhookMetrics, WebhookSender
from cronwheel.errors import CronwheelError, InvalidArgument, Unavailable
from cronwheel.heap import freeze_startup_heap
from cronwheel.limits import MAX_ANSWER_BYTES, MAX_PENDING_CALLS
from cronwheel.secret_store import KeyRing, SecretStore
from cronwheel.storage import PgStore, SessionLimits, StoreConfig
from cronwheel.storage.db import Database, OverrunSweep
from cronwheel.storage.notifications import parse_queued_at
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

log = logging.getLogger("cronwheel.cluster.node")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    dsn: str
    etcd_endpoints: tuple[str, ...]
    listen: str = "127.0.0.1:0"
    etcd_security: EtcdSecurity = field(default_factory=EtcdSecurity)  # TLS files, user and password
    advertise: str = ""
    lease: PartitionLeaseConfig = field(default_factory=PartitionLeaseConfig)
    firing: FiringConfig = field(default_factory=FiringConfig)
    webhooks: WebhookConfig = field(default_factory=WebhookConfig)
    metrics_listen: str = "127.0.0.1:0"  # empty: no metrics endpoint
    retention_days: int = 30  # events and ownership history; ExplainSchedule windows
    retention: RetentionConfig = field(default_factory=RetentionConfig)  # finished executions
    clock_skew: ClockSkewConfig = field(default_factory=ClockSkewConfig)  # --max-clock-skew
    db_pool_max: int = 10
    # Test-only: keep acting past the local lease-trust window (shows the DB fence alone holds).
    ignore_local_trust: bool = False
    # API security (cluster/api/auth.py): the bearer-token file (empty: dev mode, every call admin) and TLS.
    auth_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    # The operator's key ring (--secret-key-file / $CRONWHEEL_SECRET_KEY; None: secrets in plaintext).
    secret_keys: KeyRing | None = None

    def validate(self) -> NodeConfig:
        if not self.node_id or "/" in self.node_id:
            raise ValueError(f"node id must be non-empty without '/', got {self.node_id!r}")
        if not self.etcd_endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self.lease.validate()
        self.firing.validate()
        self.webhooks.validate()
        self.retention.validate()
        self.clock_skew.validate()
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
            dsn=config.dsn, max_connections=config.db_pool_max, limits=session_limits(config.lease),
            secrets=SecretStore(config.secret_keys),
        ))
        self.etcd = Etcd(config.etcd_endpoints, timeout_s=config.lease.etcd_timeout_s,
                         security=config.etcd_security)
        self.listeners = Listeners()
        self.partitions = 0
        # Built by run() once the database is known to be this cluster's (see _build).
        self.coordinator: Coordinator
        self.skew_guard: ClockSkewGuard
        self.firer: Firer
        self.reaper: Reaper
        self.pruner: Pruner
        self.changes: ChangeListener
        self.health: Health
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.advertise = config.advertise
        self._stop = asyncio.Event()
        self.metrics = Metrics()
        self.dispatcher = Dispatcher(self.store, self.clock, metrics=self.metrics)
        self.tokens = TokenCache(self.store.tokens.live, self.clock)  # API-made tokens (cluster/api/tokens.py)
        self.tokens.listeners.append(self.dispatcher.recheck)  # waiting lease calls of revoked tokens end

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

    def _bind(self) -> None:
        """The gRPC server with its port bound, nothing registered or served yet.
        `grpc.so_reuseport` is off: with gRPC's default a second node on the same port would
        start and the kernel would share the connections between the two (issue 14, hole 4)."""
        _refuse_busy_port(self.config.listen)
        self.server = grpc.aio.server(interceptors=services.interceptors(self), options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_send_message_length", MAX_ANSWER_BYTES),  # answers are cut to fit (cronwheel.limits)
            ("grpc.server.max_pending_requests", MAX_PENDING_CALLS),  # a burst reaches the node's own refusals
            ("grpc.server.max_pending_requests_hard_limit", MAX_PENDING_CALLS)])
        creds = services.credentials(self)
        cause: RuntimeError | None = None
        try:
            self.port = (self.server.add_secure_port(self.config.listen, creds) if creds is not None
                         else self.server.add_insecure_port(self.config.listen))
        except RuntimeError as exc:  # grpcio raises this when no address could be bound
            self.port, cause = 0, exc
        if self.port == 0:
            raise InvalidArgument("--listen", f"cannot listen on {self.config.listen} (address already in use "
                                  "or not available)") from cause

    def _register_services(self) -> None:
        """Every service, once every component exists (servicers may take them at construction)."""
        assert self.server is not None
        names: list[str] = []
        dispatch_pb2_grpc.add_DispatchServiceServicer_to_server(DispatchService(self.dispatcher), self.server)
        names.append(dispatch_pb2.DESCRIPTOR.services_by_name["DispatchService"].full_name)
        for register, servicer, name in services.grpc_services(self):
            register(servicer, self.server)
            names.append(name)
        self.health = Health(names, always=reflection.SERVICE_NAMES)
        self.health.register(self.server)
        reflection.enable([*names, *self.health.always], self.server)

    def _build(self) -> None:
        """Every component, wired, before anything serves (a call must never meet a half-built
        node: ClusterStatus reads `coordinator`, the dispatch service the firer's signals)."""
        host = self.config.listen.rsplit(":", 1)[0]
        self.advertise = self.config.advertise or f"{host}:{self.port}"
        self.coordinator = Coordinator(
            self.config.node_id, self.advertise, self.etcd, self.store.partitions, self.partitions, self.clock,
            self.config.lease, self.listeners, ignore_local_trust=self.config.ignore_local_trust,
        )
        self.firer = Firer(
            self.store.firing, self.clock, self.config.firing,
            epoch_if_trusted=self.coordinator.epoch_if_trusted,
            on_stale=self.coordinator.partition_stale,
            on_fired=self.dispatcher.wake_at,
            metrics=self.metrics,
        )
        self.reaper = Reaper(self.store, lambda: self.coordinator.owned.snapshot().items(), self.dispatcher.wake,
                             clock=self.clock, retention_days=self.config.retention_days, metrics=self.metrics)
        self.webhook_sender = WebhookSender(self.store.webhooks, self.config.node_id, self.clock, self.config.webhooks,
                                            metrics=WebhookMetrics(self.metrics.registry))
        self.pruner = Pruner(self.store.retention, lambda: self.coordinator.owned.snapshot().items(),
                             clock=self.clock, config=self.config.retention,
                             metrics=RetentionMetrics(self.metrics.registry), fires=self.firer)
        self.listeners.subscribers.append(self.firer)
        self.skew_guard = ClockSkewGuard(self.store.partitions.database_ts, self.clock, self.config.clock_skew,
                                         self._clock_skew_changed, on_sample=self._clock_skew_sampled)
        self.changes = ChangeListener(self.config.dsn, self._on_change, self._after_reconnect,
                                      lambda payload: self.dispatcher.wake_at(parse_queued_at(payload)),
                                      clock=self.clock,
                                      on_oneoffs=self.firer.add_oneoffs)

    async def run(self) -> None:
        """Open the store, check the database is this cluster's, bind the port, build every
        component, serve (health NOT_SERVING until the tasks run), run until stopped."""
        try:
            await self.store.open()
            self.partitions = await self.store.partitions.partition_count()
            etcd_id = await self.etcd.cluster_id(f"/{self.config.lease.cluster}/")  # within the user's prefix
            await self.store.partitions.claim_cluster(self.config.lease.cluster, etcd_id)
            await self._seal_secrets()  # refuses a database whose secrets this node's keys cannot open
            await self.tokens.refresh()  # before serving: API-made tokens work from the first call
            self._bind()  # first: the advertised address names the bound port
            self._build()
            self._register_services()
            assert self.server is not None
            await self.health.start()
            await self.server.start()
            await self._run_tasks()
        finally:
            if self.server is not None:
                await self.server.stop(grace=1.0)
            await self.etcd.close()
            await self.store.close()
            self.metrics.close()
            if self.server is not None and self.port:
                log.info("node stopped", extra={"event": "node_stopped"})

    async def _seal_secrets(self) -> None:
        """Secrets at rest (cronwheel/secret_store.py): refuse to start without a key a stored
        secret needs; re-seal under the first key what it did not seal (the first start with a
        key encrypts the plaintext ones; a start after a key rotation re-seals the old key's)."""
        reports = await self.store.seal_at_rest()
        stored = sum(n for r in reports.values() for n in r.by_key.values())
        resealed = sum(r.resealed for r in reports.values())
        if self.config.secret_keys is None:
            if stored:
                log.warning("stored secrets are in plaintext: start the nodes with --secret-key-file",
                            extra={"event": "secrets_plaintext", "secrets": stored})
        elif resealed:
            log.info("stored secrets sealed with key %s", self.config.secret_keys.primary,
                     extra={"event": "secrets_sealed", "resealed": resealed, "key_id": self.config.secret_keys.primary})

    async def _clock_skew_changed(self, skewed: bool, skew_s: float) -> None:
        """The guard's verdict (clock_skew.py): stand down (no partitions, no claims) or up again."""
        if skewed:
            why = f"clock skew {skew_s:+.3f}s beyond --max-clock-skew {self.config.clock_skew.max_skew_s:g}s"
            self.dispatcher.hold_claims(why)
            self.coordinator.stand_down(why)
        else:
            self.coordinator.stand_up()
            self.dispatcher.hold_claims(None)

    def _clock_skew_sampled(self, state: SkewState) -> None:
        if state.skew_s is not None:
            self.metrics.clock_skew.set(state.skew_s)
        self.metrics.clock_skew_exceeded.set(1 if state.skewed else 0)

    async def _become_ready(self) -> None:
        await wait_ready(self.coordinator, self.firer.owned, self.clock)
        if not self._stop.is_set():
            await self.health.set_ready(True)
            freeze_startup_heap()
            log.info("node ready", extra={"event": "node_ready", "partitions": len(self.coordinator.owned.epochs)})
            print(f"node {self.config.node_id} ready ({len(self.coordinator.owned.epochs)} partitions)", flush=True)

    async def _end_overrun_transactions(self) -> None:
        """PostgreSQL 15 and 16 have no `transaction_timeout`: once a second, end any node's
        session whose transaction outlived its limit (storage/db.py SessionLimits), and report
        the ones this node's role cannot end (`sweep_overruns`). Returns at once on PostgreSQL 17
        and later, where each session carries the limit itself."""
        reported = 0
        while not self._stop.is_set():
            sweep = await sweep_overruns(self.store, self.metrics, reported)
            if sweep is None:
                return
            reported = sweep.unpoliced
            await self.clock.sleep(OVERRUN_SWEEP_EVERY_S)

    async def _run_tasks(self) -> None:
        log.info("node started", extra={"event": "node_started", "address": self.advertise,
                                        "partitions": self.partitions,
                                        # the settings the chaos checker judges against (chaos/collect.py)
                                        "queue_ahead_s": self.config.firing.queue_ahead_s,
                                        "max_clock_skew_s": self.config.clock_skew.max_skew_s})
        if self.config.metrics_listen:
            port = self.metrics.serve(self.config.metrics_listen)
            host = self.config.metrics_listen.rpartition(":")[0] or "127.0.0.1"
            print(f"node {self.config.node_id} metrics on http://{host}:{port}/metrics", flush=True)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(self.coordinator.run(), name="coordinator"),
                    tg.create_task(self.skew_guard.run(), name="clock-skew-guard"),
                    tg.create_task(self.firer.run(), name="firer"),
                    tg.create_task(self.changes.run(), name="change-listener"),
                    tg.create_task(self.reaper.run(), name="reaper"),
                    tg.create_task(self.webhook_sender.run(), name="webhook-sender"),
                    tg.create_task(self._become_ready(), name="readiness"),
                    tg.create_task(self.pruner.run(), name="pruner"),
                    tg.create_task(self.tokens.run(), name="token-cache"),
                    tg.create_task(self._end_overrun_transactions(), name="overrun-sweeper"),
                    tg.create_task(self.metrics.refresh_loop(
                        self.store, self.coordinator.owned.snapshot, self.wheel_size,
                        self.coordinator.lease_deadline_s, clock=self.clock, refresh_s=15.0), name="metrics"),
                ]
                print(f"node {self.config.node_id} listening on {self.advertise}", flush=True)
                await self._stop.wait()
                log.info("node stopping", extra={"event": "node_stopping"})
                await self.health.set_ready(False)
                await self.coordinator.shutdown()
                for t in tasks:
                    t.cancel()
        except* Exception as eg:
            # A crashed task takes the node down (by design); say which and why, with tracebacks
            # in the log, and one clear line for the operator.
            for exc in eg.exceptions:
                log.error("node task crashed", exc_info=exc, extra={"event": "node_crashed"})
            first = eg.exceptions[0]
            raise NodeCrashed(f"node crashed: {type(first).__name__}: {first}") from first


def _refuse_busy_port(listen: str) -> None:
    """Name the port's problem in one line before gRPC tries it (gRPC's own refusal is a bare
    "Failed to bind" plus a C-level log line on stderr). Best effort: gRPC's bind, without port
    reuse, is what actually refuses a second node; this only words it."""
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit() or int(port_text) == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, int(port_text), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return  # unresolvable: gRPC reports it
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no conflict
        try:
            probe.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidArgument("--listen", f"{listen}: address already in use "
                                      "(is another node running on this port?)") from exc
            raise InvalidArgument("--listen", f"{listen}: {exc.strerror or exc}") from exc


# How often a node on PostgreSQL < 17 ends the sessions past their transaction limit: a stalled
# transaction holds its locks up to the lease TTL plus this.
OVERRUN_SWEEP_EVERY_S = 1.0


async def sweep_overruns(db: Database, metrics: Metrics, reported: int = 0) -> OverrunSweep | None:
    """One round of the sweep (`Node._end_overrun_transactions`): the server processes ended,
    counted and logged; the node sessions it cannot police, the gauge set to their count and a
    warning logged when that count is above 0 and differs from `reported`, the previous round's
    (a lasting misconfiguration is logged once, not every second). A failed round ends nothing
    and keeps `reported` as its count. None where the server enforces the limit itself
    (PostgreSQL >= 17)."""
    try:
        sweep = await db.end_overrun_transactions()
    except Unavailable:  # the database away: the fire and the claims say so already
        return OverrunSweep(ended=(), unpoliced=reported)
    except CronwheelError as exc:  # unexpected (the statement ends only what it may): next round
        log.warning("overrun sweep failed: %s", exc, extra={"event": "overrun_sweep_failed"})
        return OverrunSweep(ended=(), unpoliced=reported)
    if sweep is None:
        return None
    if sweep.ended:
        metrics.overrun_sessions_ended.inc(len(sweep.ended))
        log.warning(
            "ended %d session(s) whose transaction outlived the lease TTL",
            len(sweep.ended),
            extra={"event": "overrun_transactions_ended", "pids": list(sweep.ended)},
        )
    metrics.overrun_sessions_unpoliced.set(sweep.unpoliced)
    if sweep.unpoliced and sweep.unpoliced != reported:
        log.warning(
            "%d node session(s) the overrun sweep cannot end: grant the nodes' role pg_signal_backend "
            "and pg_read_all_stats, or run every node as one role",
            sweep.unpoliced,
            extra={"event": "overrun_sweep_unpoliced", "sessions": sweep.unpoliced},
        )
    return sweep


def session_limits(lease: PartitionLeaseConfig) -> SessionLimits:
    """A node's sessions never hold a lock past its lease: a node stopped in the middle of a
    transaction (paused, cut off) cannot block a takeover, a fire or a claim of the others for
    longer than its own lease would have held its partitions (storage/db.py SessionLimits)."""
    return SessionLimits(idle_s=2.0, total_s=float(lease.ttl_s))


async def serve(config: NodeConfig) -> None:
    tracing.setup_tracing("cronwheel-node")  # before the node: its parts decide once whether to trace
    node = Node(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.request_stop)
    try:
        await node.run()
    finally:
        tracing.shutdown()
