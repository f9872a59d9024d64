"""What the sync and async Clients share about reaching a cluster: the node addresses and
fail-over between them, token, TLS, the default deadline, and which failures are retried.

A call that is safe to repeat (calls.Call.safe) is retried on UNAVAILABLE with exponential
backoff, moving to the next address each time, `retries` times at most. A call that is not safe
(create, delete, retry) is moved to the next address only when it never reached a node (the
channel could not connect): it cannot have had an effect.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from cronwheel import errors
from cronwheel.v1 import admin_pb2_grpc, scheduler_pb2_grpc

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
        delay = self.backoff_s
        for attempt in range(1, self.retries + 1):
            if attempt % n:
                yield 0.0
            else:
                yield delay
                delay = min(self.backoff_max_s, delay * 2)


def never_sent(exc: grpc.RpcError) -> bool:
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    return any(s in details.lower() for s in _NOT_SENT)


def retryable(exc: grpc.RpcError, safe: bool) -> bool:
    code = exc.code() if hasattr(exc, "code") else None
    return code is grpc.StatusCode.UNAVAILABLE and (safe or never_sent(exc))


def stubs(channel: Any) -> dict[str, Any]:
    return {"scheduler": scheduler_pb2_grpc.SchedulerServiceStub(channel),
            "admin": admin_pb2_grpc.AdminServiceStub(channel),
            "webhooks": admin_pb2_grpc.WebhookServiceStub(channel),
            "tenants": admin_pb2_grpc.TenantServiceStub(channel)}
