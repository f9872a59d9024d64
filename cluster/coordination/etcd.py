"""A small asyncio etcd v3 client over aetcd's generated v3 API (`aetcd.rpc`).

aetcd's high-level `transaction()` drops the response header, and the header's revision is the
fencing epoch, so cronwheel talks to the stubs directly; aetcd gives us maintained, protobuf-7
compatible stubs of etcd's API. One grpc.aio channel spans every endpoint (`ipv4:` target with
the pick_first policy), so a dead member is failed over by gRPC itself.

Every call has a deadline; every failure is raised as `Unavailable("etcd", ...)`. Concurrency:
task-safe (grpc.aio channels are; the auth token is fetched under a lock).

Security (`EtcdSecurity`; etcd holds the fencing truth, so whoever writes it can take partitions):
    TLS          `--etcd-cacert` (the CA that signed etcd's certificate; else the system's roots),
                 `--etcd-cert`/`--etcd-key` (a client certificate, for etcd's --client-cert-auth).
                 An `https://` endpoint turns TLS on too. One channel spans every member, so
                 one name is checked: the host of the FIRST endpoint as given. Every member's
                 certificate must carry it (a shared SAN, or every member's address in each).
    user/password `--etcd-user` and `$CRONWHEEL_ETCD_PASSWORD` (`--etcd-password` works but shows in
                 `ps`): etcd's Authenticate RPC gives a token sent as `token` metadata with every
                 call. A token etcd no longer knows (UNAUTHENTICATED: auth turned off and on, its TTL)
                 is dropped and fetched again, and the unary call retried once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from aetcd import rpc

from cronwheel.errors import InvalidArgument, Unavailable


@dataclass(frozen=True, slots=True)
class EtcdSecurity:
    """How a node reaches etcd: TLS files and user/password (empty: plaintext, no auth)."""

    cacert: str = ""
    cert: str = ""
    key: str = ""
    user: str = ""
    password: str = field(default="", repr=False)  # never in a log line or a traceback's repr

    def tls(self, endpoints: Sequence[str]) -> bool:
        return bool(self.cacert or self.cert) or any(e.startswith("https://") for e in endpoints)

    def validate(self) -> EtcdSecurity:
        """InvalidArgument naming the flag: a half pair, or a file that cannot be read."""
        if bool(self.cert) != bool(self.key):
            raise InvalidArgument("--etcd-key" if self.cert else "--etcd-cert",
                                  "--etcd-cert and --etcd-key go together")
        if bool(self.user) != bool(self.password):
            raise InvalidArgument("--etcd-password" if self.user else "--etcd-user",
                                  "--etcd-user needs a password ($CRONWHEEL_ETCD_PASSWORD or --etcd-password) "
                                  "and a password needs --etcd-user")
        self.credentials()
        return self

    def credentials(self) -> grpc.ChannelCredentials:
        def read(flag: str, path: str) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise InvalidArgument(flag, f"cannot read {path}: {exc.strerror or exc}") from None

        return grpc.ssl_channel_credentials(root_certificates=read("--etcd-cacert", self.cacert),
                                            private_key=read("--etcd-key", self.key),
                                            certificate_chain=read("--etcd-cert", self.cert))


@dataclass(frozen=True, slots=True)
class KV:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: str  # "put" | "delete"
    kv: KV


def prefix_end(prefix: bytes) -> bytes:
    b = bytearray(prefix)
    for i in range(len(b) - 1, -1, -1):
        if b[i] < 0xFF:
            b[i] += 1
            return bytes(b[: i + 1])
    return b"\x00"


def _resolve(endpoint: str) -> str:
    """host:port with the host resolved to an IPv4 address: gRPC's multi-address `ipv4:` target
    (the one that fails over between endpoints) takes only literals. Resolved once, at start."""
    hostport = endpoint.removeprefix("http://").removeprefix("https://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"etcd endpoint must be host:port, got {endpoint!r}")
    try:
        info = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        raise Unavailable("etcd", f"cannot resolve {host!r}: {exc}") from exc
    return f"{info[0][4][0]}:{port}"


def _kv(m: rpc.KeyValue) -> KV:
    return KV(m.key.decode(errors="replace"), bytes(m.value), m.create_revision, m.mod_revision, m.lease)


def _host(endpoint: str) -> str:
    return endpoint.removeprefix("http://").removeprefix("https://").rpartition(":")[0].strip("[]")


class Etcd:
    def __init__(self, endpoints: Sequence[str], timeout_s: float = 2.0,
                 security: EtcdSecurity | None = None) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        self.security = security or EtcdSecurity()
        target = "ipv4:" + ",".join(_resolve(e) for e in self.endpoints)
        options: list[tuple[str, Any]] = [
            ("grpc.lb_policy_name", "pick_first"),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.keepalive_time_ms", 5000),
            ("grpc.keepalive_timeout_ms", 2000),
        ]
        if self.security.tls(self.endpoints):
            # The ipv4: target names no host: check the certificate against the first endpoint's.
            options.append(("grpc.ssl_target_name_override", _host(self.endpoints[0])))
            self._channel = grpc.aio.secure_channel(target, self.security.credentials(), options=options)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=options)
        self._kv = rpc.KVStub(self._channel)
        self._lease = rpc.LeaseStub(self._channel)
        self._watch = rpc.WatchStub(self._channel)
        self._auth = rpc.AuthStub(self._channel)
        self._token = ""
        self._token_lock = asyncio.Lock()

    async def _metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The `token` metadata of an etcd with auth (fetched once, again after a rejection)."""
        if not self.security.user:
            return None
        async with self._token_lock:
            if not self._token:
                r = await self._auth.Authenticate(
                    rpc.AuthenticateRequest(name=self.security.user, password=self.security.password),
                    timeout=self.timeout_s)
                self._token = str(r.token)
        return (("token", self._token),)

    def _token_rejected(self, exc: grpc.RpcError) -> bool:
        """Whether etcd refused our token (then it is dropped, to be fetched again)."""
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        if self.security.user and code == grpc.StatusCode.UNAUTHENTICATED:
            self._token = ""
            return True
        return False

    async def _unary(self, call: Callable[..., Awaitable[Any]], request: Any, what: str) -> Any:
        """One unary call with its deadline and credentials; retried once after a token rejection."""
        for attempt in (1, 2):
            try:
                return await call(request, timeout=self.timeout_s, metadata=await self._metadata())
            except grpc.RpcError as exc:
                if attempt == 1 and self._token_rejected(exc):
                    continue
                raise self._err(exc, what) from exc
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._channel.close(grace=None)

    def _err(self, exc: grpc.RpcError, what: str) -> Unavailable:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
        return Unavailable("etcd", f"{what} failed at {','.join(self.endpoints)}: {code.name if code else ''} {detail}")

    # ------------------------------------------------------------------ leases

    async def grant(self, ttl_s: int) -> int:
        r = await self._unary(self._lease.LeaseGrant, rpc.LeaseGrantRequest(TTL=ttl_s), "lease grant")
        return int(r.ID)

    async def keepalive(self, lease_id: int) -> int:
        """Refresh a lease once; returns its TTL (0 or less: the lease is gone)."""
        try:
            call = self._lease.LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self.timeout_s,
                                              metadata=await self._metadata())
            async for r in call:
                call.cancel()
                return int(r.TTL)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.CANCELLED:
                return 0
            self._token_rejected(exc)
            raise self._err(exc, "lease keepalive") from exc
        return 0

    async def revoke(self, lease_id: int) -> None:
        try:
            await self._unary(self._lease.LeaseRevoke, rpc.LeaseRevokeRequest(ID=lease_id), "lease revoke")
        except Unavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, grpc.aio.AioRpcError) and cause.code() == grpc.StatusCode.NOT_FOUND:
                return
            raise

    async def cluster_id(self, key: str = "\x00") -> str:
        """The etcd cluster's id, as etcdctl prints it (hex): every response header carries it,
        and two etcd clusters never share one, even when cronwheel names them alike. Read from a
        count-only range of `key` (give a key of the cluster's own prefix: an etcd user limited to
        that prefix may read nothing else), with the call's credentials like every call."""
        r = await self._unary(self._kv.Range, rpc.RangeRequest(key=key.encode(), count_only=True), "cluster id")
        return f"{int(r.header.cluster_id):x}"

    # ------------------------------------------------------------------ keys

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        r = await self._unary(self._kv.Put, rpc.PutRequest(key=key.encode(), value=value, lease=lease), "put")
        return int(r.header.revision)

    async def create(self, key: str, value: bytes, lease: int) -> tuple[bool, int]:
        """Create `key` only if it does not exist. Returns (created, create_revision of the key
        now there, or 0). The create revision is the fencing epoch."""
        k = key.encode()
        req = rpc.TxnRequest(
            compare=[rpc.Compare(key=k, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0)],
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=k, value=value, lease=lease))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=k))],
        )
        r = await self._unary(self._kv.Txn, req, "create")
        if r.succeeded:
            return True, int(r.header.revision)
        kvs = r.responses[0].response_range.kvs if r.responses else []
        return False, int(kvs[0].create_revision) if kvs else 0

    async def delete_if(self, key: str, *, value: bytes | None = None, create_revision: int | None = None) -> bool:
        """Delete `key` only if its value (and/or create revision) still matches."""
        k = key.encode()
        cmp = []
        if value is not None:
            cmp.append(rpc.Compare(key=k, target=rpc.Compare.VALUE, result=rpc.Compare.EQUAL, value=value))
        if create_revision is not None:
            cmp.append(
                rpc.Compare(key=k, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=create_revision)
            )
        req = rpc.TxnRequest(compare=cmp, success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=k))])
        r = await self._unary(self._kv.Txn, req, "delete")
        return bool(r.succeeded)

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every key under prefix and the store revision the read was made at."""
        p = prefix.encode()
        r = await self._unary(self._kv.Range, rpc.RangeRequest(key=p, range_end=prefix_end(p)), "range")
        return [_kv(m) for m in r.kvs], int(r.header.revision)

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[list[WatchEvent]]:
        """Batches of events under prefix from start_revision on. Ends (raising Unavailable) when
        the stream breaks; the caller re-reads and watches again."""
        p = prefix.encode()
        create = rpc.WatchRequest(
            create_request=rpc.WatchCreateRequest(key=p, range_end=prefix_end(p), start_revision=start_revision)
        )

        async def requests() -> AsyncIterator[rpc.WatchRequest]:
            yield create
            # Keep the request side open for the life of the watch.
            import asyncio

            await asyncio.Event().wait()

        try:
            metadata = await self._metadata()
        except grpc.RpcError as exc:
            raise self._err(exc, "watch") from exc
        call = self._watch.Watch(requests(), metadata=metadata)
        try:
            async for resp in call:
                if resp.canceled or resp.compact_revision:
                    raise Unavailable("etcd", f"watch cancelled (compacted at {resp.compact_revision})")
                if resp.events:
                    yield [
                        WatchEvent("delete" if e.type == rpc.Event.DELETE else "put", _kv(e.kv)) for e in resp.events
                    ]
        except grpc.RpcError as exc:
            self._token_rejected(exc)
            raise self._err(exc, "watch") from exc
        finally:
            call.cancel()
