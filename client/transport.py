"""What the sync and async Clients share about reaching a cluster: the node addresses and
fail-over between them, token, TLS, the default deadline, which failures are retried, and the
transport that makes one attempt of one RPC.

The Clients keep the rules (fail-over, retries, idempotency keys, error mapping); a transport
only answers one `Request` (the RPC, its protobuf request, the address of this attempt) with the
protobuf response, or raises a `grpc.RpcError`. `GrpcTransport` / `AsyncGrpcTransport` (the
default) send it over a channel per address; `cronwheel.client.testing.MockTransport` answers it
from a test's handler, like httpx's transports.

A call that is safe to repeat (calls.Call.safe) is retried on UNAVAILABLE with exponential
backoff, moving to the next address each time, `retries` times at most. A call that is not safe
(create, delete, retry) is moved to the next address only when it never reached a node (the
channel could not connect): it cannot have had an effect.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from cronwheel import errors
from cronwheel.backoff import backoff_s
from cronwheel.v1 import admin_pb2, admin_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

from .errors import InvalidArgument
from .worker_connection import Connection

# What gRPC says when a channel could not reach any address: the request was never sent.
_NOT_SENT = ("failed to connect to all addresses", "connection refused", "name resolution", "dns resolution",
             "connections to all backends failing", "socket closed before")


@dataclass(frozen=True, slots=True)
class Settings:
    addresses: tuple[str, ...]
    token: str | None = None
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    deadline_s: float = 10.0  # per attempt
    retries: int = 5  # further attempts of a safe call after UNAVAILABLE
    backoff_s: float = 0.1  # first pause once every address failed; doubled up to backoff_max_s
    backoff_max_s: float = 2.0
    interceptors: Sequence[Any] = field(default=())

    @classmethod
    def of(cls, address: str | Sequence[str], **kw: Any) -> Settings:
        addresses = (address,) if isinstance(address, str) else tuple(address)
        addresses = tuple(a for part in addresses for a in part.split(",") if a.strip())
        got = cls(addresses=tuple(a.strip() for a in addresses), **kw)
        if not got.addresses:
            raise InvalidArgument("INVALID_ARGUMENT", "address: at least one node address (host:port) is required")
        try:
            for conn in got.connections():
                conn.validate()
        except errors.InvalidArgument as exc:  # the domain's class: re-raised as the Client's
            raise InvalidArgument("INVALID_ARGUMENT", str(exc)) from None
        return got

    def connections(self) -> list[Connection]:
        base = Connection(address="-", token=self.token, tls=self.tls, ca_file=self.ca_file,
                          cert_file=self.cert_file, key_file=self.key_file, interceptors=self.interceptors)
        return [dataclasses.replace(base, address=a) for a in self.addresses]

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def pauses(self) -> Iterator[float]:
        """The pause before each retry: none while untried addresses remain, then backoff."""
        n = len(self.addresses)
        for attempt in range(1, self.retries + 1):
            yield backoff_s(attempt // n, self.backoff_s, self.backoff_max_s) if attempt % n == 0 else 0.0


def never_sent(exc: grpc.RpcError) -> bool:
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    return any(s in details.lower() for s in _NOT_SENT)


def retryable(exc: grpc.RpcError, safe: bool) -> bool:
    code = exc.code() if hasattr(exc, "code") else None
    return code is grpc.StatusCode.UNAVAILABLE and (safe or never_sent(exc))


# calls.Call.service -> the gRPC service (its descriptor) and the stub that calls it.
_SERVICES: dict[str, tuple[Any, Any]] = {
    "scheduler": (scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"],
                  scheduler_pb2_grpc.SchedulerServiceStub),
    "admin": (admin_pb2.DESCRIPTOR.services_by_name["AdminService"], admin_pb2_grpc.AdminServiceStub),
    "webhooks": (admin_pb2.DESCRIPTOR.services_by_name["WebhookService"], admin_pb2_grpc.WebhookServiceStub),
    "tenants": (admin_pb2.DESCRIPTOR.services_by_name["TenantService"], admin_pb2_grpc.TenantServiceStub),
}
SERVICE_NAMES = {key: desc.full_name for key, (desc, _) in _SERVICES.items()}
SERVICES_BY_NAME = {desc.full_name: desc for desc, _ in _SERVICES.values()}
_STUBS = {desc.full_name: stub for desc, stub in _SERVICES.values()}


@dataclass(frozen=True, slots=True)
class Request:
    """One attempt of one RPC, as a transport receives it.

    service: the gRPC service's full name ("cronwheel.v1.SchedulerService"); method: the RPC
    ("SubmitJob"); message: the protobuf request the Client built; address: the node this
    attempt goes to (the next one after a fail-over); metadata: what is sent with it (the bearer
    token); timeout_s: the attempt's deadline.
    """

    service: str
    method: str
    message: Any
    address: str
    metadata: tuple[tuple[str, str], ...] = ()
    timeout_s: float | None = None

    @property
    def path(self) -> str:
        """The gRPC method path, "/cronwheel.v1.SchedulerService/SubmitJob"."""
        return f"/{self.service}/{self.method}"


class Transport(Protocol):
    """What `Client(transport=...)` takes: one attempt of one RPC, blocking."""

    def handle_request(self, request: Request) -> Any:
        """The protobuf response, or raises grpc.RpcError (its code() and details() are mapped)."""
        ...

    def close(self) -> None: ...


class AsyncTransport(Protocol):
    """What `AsyncClient(transport=...)` takes: one attempt of one RPC, awaited."""

    async def handle_async_request(self, request: Request) -> Any:
        """The protobuf response, or raises grpc.RpcError (its code() and details() are mapped)."""
        ...

    async def aclose(self) -> None: ...


def request(settings: Settings, index: int, service: str, method: str, message: Any) -> Request:
    """The Request of one attempt at `settings.addresses[index]` (service: a calls.Call.service)."""
    return Request(SERVICE_NAMES[service], method, message, settings.addresses[index], settings.metadata,
                   settings.deadline_s)


def chosen(settings: Settings, given: Any) -> None:
    """Refuses channel settings next to a given transport: the transport makes the channel, so
    they would be silently ignored."""
    if given is None:
        return
    for name in ("interceptors", "tls", "ca_file", "cert_file", "key_file"):
        if getattr(settings, name):
            raise InvalidArgument("INVALID_ARGUMENT", f"{name}: configures the gRPC channel, which a given "
                                                      f"transport replaces: give one or the other")


class GrpcTransport:
    """The sync Client's default: a gRPC channel per address (opened at its first call, reopened
    after close()), with the Client's token, TLS and interceptors. Thread-safe."""

    def __init__(self, settings: Settings) -> None:
        self._connections = {c.address: c for c in settings.connections()}
        self._channels: dict[str, tuple[grpc.Channel, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def _stub(self, address: str, service: str, method: str) -> Any:
        with self._lock:
            if address not in self._channels:
                ch = self._connections[address].sync_channel()
                self._channels[address] = (ch, {name: stub(ch) for name, stub in _STUBS.items()})
            return getattr(self._channels[address][1][service], method)

    def handle_request(self, request: Request) -> Any:
        return self._stub(request.address, request.service, request.method)(
            request.message, metadata=request.metadata, timeout=request.timeout_s)

    def close(self) -> None:
        with self._lock:
            for ch, _ in self._channels.values():
                ch.close()
            self._channels.clear()


class AsyncGrpcTransport:
    """The AsyncClient's default: a grpc.aio channel per address, bound to the event loop that
    first uses it."""

    def __init__(self, settings: Settings) -> None:
        self._connections = {c.address: c for c in settings.connections()}
        self._channels: dict[str, tuple[grpc.aio.Channel, dict[str, Any]]] = {}

    async def handle_async_request(self, request: Request) -> Any:
        if request.address not in self._channels:
            ch = self._connections[request.address].channel()
            self._channels[request.address] = (ch, {name: stub(ch) for name, stub in _STUBS.items()})
        rpc = getattr(self._channels[request.address][1][request.service], request.method)
        return await rpc(request.message, metadata=request.metadata, timeout=request.timeout_s)

    async def aclose(self) -> None:
        channels, self._channels = self._channels, {}
        for ch, _ in channels.values():
            await ch.close()
