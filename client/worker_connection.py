"""How a worker reaches a node: address, bearer token, TLS (CA, optional client certificate), and
the typed error a worker stops with.

    Connection("node:7070", token="...", tls=True, ca_file="ca.pem").channel()

Bad configuration (only one of cert/key, an unreadable file) fails at `validate()`, before any
call is made. A channel reconnects on its own; its reconnect backoff is capped low
(`max_reconnect_s`) so a node that restarts is found again within seconds, not minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cronwheel.errors import CronwheelError, InvalidArgument


class WorkerStopped(CronwheelError):
    """The worker stopped: an error no retry can fix."""

    def __init__(self, worker_id: str, code: str, message: str) -> None:
        self.worker_id = worker_id
        self.code = code  # the gRPC status code name, or "UNREACHABLE"
        super().__init__(f"worker {worker_id} stopped: {message}")

    @property
    def exit_code(self) -> int:
        """The CLI's exit codes: 3 when the node could not be reached, 2 for a refused
        configuration (INVALID_ARGUMENT), else 1."""
        return {"UNREACHABLE": 3, "INVALID_ARGUMENT": 2}.get(self.code, 1)


_HINTS = {
    "UNAUTHENTICATED": "the node refused the token (check --token / $CRONWHEEL_TOKEN)",
    "PERMISSION_DENIED": "the token may not lease these executions",
    "INVALID_ARGUMENT": "the node refused the worker's settings",
}


def permanent(worker_id: str, exc: grpc.aio.AioRpcError, rpc: str) -> WorkerStopped:
    code = exc.code().name
    return WorkerStopped(worker_id, code, f"{rpc} answered {code}: {exc.details() or ''} "
                                          f"({_HINTS.get(code, 'not retried')})")


def unreachable(worker_id: str, address: str, waited_s: float, last: str) -> WorkerStopped:
    return WorkerStopped(worker_id, "UNREACHABLE", f"no cronwheel node answered at {address} for "
                                                   f"{waited_s:.0f} s (last error: {last})")


@dataclass(frozen=True, slots=True)
class Connection:
    address: str = "127.0.0.1:7070"
    token: str | None = None
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    max_reconnect_s: float = 2.0
    interceptors: Sequence[Any] = field(default=())

    @property
    def secure(self) -> bool:
        return self.tls or bool(self.ca_file or self.cert_file)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def validate(self) -> Connection:
        if not self.address.strip():
            raise InvalidArgument("address", "is required (host:port)")
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidArgument("cert_file" if not self.cert_file else "key_file",
                                  "a client certificate needs both cert_file and key_file")
        for name in ("ca_file", "cert_file", "key_file"):
            self._read(name)
        return self

    def _read(self, name: str) -> bytes | None:
        path = getattr(self, name)
        if not path:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise InvalidArgument(name, f"cannot read {path}: {exc.strerror or exc}") from None

    def _options(self) -> list[tuple[str, int]]:
        ms = int(self.max_reconnect_s * 1000)
        return [("grpc.initial_reconnect_backoff_ms", min(200, ms)), ("grpc.min_reconnect_backoff_ms", min(200, ms)),
                ("grpc.max_reconnect_backoff_ms", ms)]

    def _credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self._read("ca_file"),
                                            private_key=self._read("key_file"),
                                            certificate_chain=self._read("cert_file"))

    def channel(self) -> grpc.aio.Channel:
        options = self._options()
        interceptors = list(self.interceptors) or None
        if not self.secure:
            return grpc.aio.insecure_channel(self.address, options=options, interceptors=interceptors)
        return grpc.aio.secure_channel(self.address, self._credentials(), options=options, interceptors=interceptors)

    def sync_channel(self) -> grpc.Channel:
        """The same channel for blocking calls (the sync Client); `interceptors` are sync ones."""
        options = self._options()
        if not self.secure:
            ch = grpc.insecure_channel(self.address, options=options)
        else:
            ch = grpc.secure_channel(self.address, self._credentials(), options=options)
        return grpc.intercept_channel(ch, *self.interceptors) if self.interceptors else ch
