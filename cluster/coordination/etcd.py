"""A small asyncio etcd v3 client over aetcd's generated v3 API (`aetcd.rpc`).

aetcd's high-level `transaction()` drops the response header, and the header's revision is the
fencing epoch, so cronwheel talks to the stubs directly; aetcd gives us maintained, protobuf-7
compatible stubs of etcd's API. One grpc.aio channel spans every endpoint (`ipv4:` target with
the pick_first policy), so a dead member is failed over by gRPC itself.

Every call has a deadline; every failure is raised as `Unavailable("etcd", ...)`. Concurrency:
task-safe (grpc.aio channels are).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
from aetcd import rpc

from cronwheel.errors import Unavailable


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


class Etcd:
    def __init__(self, endpoints: Sequence[str], timeout_s: float = 2.0) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        target = "ipv4:" + ",".join(_resolve(e) for e in self.endpoints)
        self._channel = grpc.aio.insecure_channel(
            target,
            options=[
                ("grpc.lb_policy_name", "pick_first"),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.keepalive_time_ms", 5000),
                ("grpc.keepalive_timeout_ms", 2000),
            ],
        )
        self._kv = rpc.KVStub(self._channel)
        self._lease = rpc.LeaseStub(self._channel)
        self._watch = rpc.WatchStub(self._channel)

    async def close(self) -> None:
        await self._channel.close(grace=None)

    def _err(self, exc: grpc.RpcError, what: str) -> Unavailable:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
        return Unavailable("etcd", f"{what} failed at {','.join(self.endpoints)}: {code.name if code else ''} {detail}")

    # ------------------------------------------------------------------ leases

    async def grant(self, ttl_s: int) -> int:
        try:
            r = await self._lease.LeaseGrant(rpc.LeaseGrantRequest(TTL=ttl_s), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._err(exc, "lease grant") from exc
        return int(r.ID)

    async def keepalive(self, lease_id: int) -> int:
        """Refresh a lease once; returns its TTL (0 or less: the lease is gone)."""
        try:
            call = self._lease.LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self.timeout_s)
            async for r in call:
                call.cancel()
                return int(r.TTL)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.CANCELLED:
                return 0
            raise self._err(exc, "lease keepalive") from exc
        return 0

    async def revoke(self, lease_id: int) -> None:
        try:
            await self._lease.LeaseRevoke(rpc.LeaseRevokeRequest(ID=lease_id), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.NOT_FOUND:
                return
            raise self._err(exc, "lease revoke") from exc

    async def cluster_id(self) -> str:
        """The etcd cluster's id, as etcdctl prints it (hex): every response header carries it,
        and two etcd clusters never share one, even when cronwheel names them alike."""
        try:
            r = await self._kv.Range(rpc.RangeRequest(key=b"\x00", count_only=True), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._err(exc, "cluster id") from exc
        return f"{int(r.header.cluster_id):x}"

    # ------------------------------------------------------------------ keys

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        try:
            r = await self._kv.Put(rpc.PutRequest(key=key.encode(), value=value, lease=lease), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._err(exc, "put") from exc
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
        try:
            r = await self._kv.Txn(req, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._err(exc, "create") from exc
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
        try:
            r = await self._kv.Txn(req, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._err(exc, "delete") from exc
        return bool(r.succeeded)

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every key under prefix and the store revision the read was made at."""
        p = prefix.encode()
        try:
            r = await self._kv.Range(rpc.RangeRequest(key=p, range_end=prefix_end(p)), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._err(exc, "range") from exc
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

        call = self._watch.Watch(requests())
        try:
            async for resp in call:
                if resp.canceled or resp.compact_revision:
                    raise Unavailable("etcd", f"watch cancelled (compacted at {resp.compact_revision})")
                if resp.events:
                    yield [
                        WatchEvent("delete" if e.type == rpc.Event.DELETE else "put", _kv(e.kv)) for e in resp.events
                    ]
        except grpc.RpcError as exc:
            raise self._err(exc, "watch") from exc
        finally:
            call.cancel()
