"""`cronwheel rest`: the REST/JSON API (cluster/api/rest.py) served over HTTP/1.1, in a process of
its own that calls a node over gRPC.

Why a process of its own: the transcoding (JSON in and out, HTTP parsing) runs on another event
loop than the node's firing, so HTTP load cannot slow firing beyond what the same calls over gRPC
cost the node (issue 51, item 3); and since it is a gRPC client of the node, every interceptor
(auth, tenant rules, limits, the error table) applies unchanged. `cronwheel dev` starts one.

Secure by default (cluster/api/auth.py `exposure_refusal`, the one rule): the server checks no
token itself, it forwards the caller's `Authorization` header; so it listens beyond loopback
only when the node it calls requires tokens (asked at start with the tokenless self-view of
ClusterStatus: every member's `auth_mode` is "tokens") or with `--insecure`.

HTTP: keep-alive, `Content-Length` bodies (a chunked request body is refused with 411),
`Expect: 100-continue` answered, bodies up to MAX_BODY_BYTES. A request the transcoder fails on
unexpectedly is logged and answered 500 INTERNAL (as cluster/api/grpc_errors.py does on gRPC).
`GET /openapi.json` serves the committed OpenAPI document (proto/cronwheel/v1/openapi.json, made
by tools/openapi.py).

Concurrency: one asyncio loop; each connection is a task serving its requests in order; the
gRPC channel is shared.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any

import grpc
from google.protobuf import message_factory

from cronwheel.cluster.api import rest
from cronwheel.cluster.api.auth import LOCAL_ONLY, exposure_refusal, is_loopback
from cronwheel.errors import InvalidArgument
from cronwheel.v1 import admin_pb2, admin_pb2_grpc

log = logging.getLogger("cronwheel.cluster.api.rest_server")

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 411: "Length Required", 413: "Payload Too Large",
           429: "Too Many Requests", 431: "Request Header Fields Too Large", 499: "Client Closed Request",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
           504: "Gateway Timeout"}
JSON = "application/json"


def openapi_document() -> bytes:
    return resources.files("cronwheel.v1").joinpath("openapi.json").read_bytes()


def node_channel(addresses: list[str], ca: bytes | None = None, tls: bool = False) -> grpc.aio.Channel:
    """One channel to the nodes: several IPv4 `host:port` are balanced (round robin) and fail
    over; otherwise the first address."""
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    target = addresses[0]
    if len(addresses) > 1 and all(a.split(":")[0].replace(".", "").isdigit() for a in addresses):
        target = "ipv4:" + ",".join(addresses)
        options.append(("grpc.lb_policy_name", "round_robin"))
    if tls or ca is not None:
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca), options=options)
    return grpc.aio.insecure_channel(target, options=options)


class Transcoder:
    """HTTP request -> gRPC call -> HTTP answer. Task-safe."""

    def __init__(self, channel: grpc.aio.Channel, routes: rest.Routes | None = None) -> None:
        self.channel = channel
        self.routes = routes or rest.Routes()
        self._calls: dict[str, Any] = {}

    def _call(self, route: rest.Route) -> Any:
        call = self._calls.get(route.method)
        if call is None:
            answer = message_factory.GetMessageClass(route.response)
            call = self.channel.unary_unary(route.method, request_serializer=lambda m: m.SerializeToString(),
                                            response_deserializer=answer.FromString)
            self._calls[route.method] = call
        return call

    async def handle(self, verb: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        """(HTTP status, JSON body) of one request."""
        path, _, query = target.partition("?")
        if verb == "GET" and path == "/openapi.json":
            return 200, openapi_document()
        route, found = self.routes.match(verb, path)
        if route is None:
            code = grpc.StatusCode.UNIMPLEMENTED if found else grpc.StatusCode.NOT_FOUND
            why = f"{verb} is not a method of {path}" if found else f"no route {verb} {path}"
            return (405 if found else 404), rest.error_json(code, why)
        try:
            request = rest.request_message(route, found, query, body)
        except rest.BadRequest as exc:
            status = rest.bad_request_status(exc)
            return 400, rest.error_json(grpc.StatusCode.INVALID_ARGUMENT, status.message, status)
        auth = headers.get("authorization")
        try:
            answer = await self._call(route)(request, metadata=(("authorization", auth),) if auth else None)
        except grpc.aio.AioRpcError as err:
            code = err.code()
            return rest.HTTP_STATUS.get(code, 500), rest.error_json(code, err.details() or "", rest.status_of_call(err))
        return 200, rest.answer_json(answer)


@dataclass(frozen=True, slots=True)
class RestConfig:
    listen: str = "127.0.0.1:7090"
    addresses: tuple[str, ...] = ("127.0.0.1:7070",)
    insecure: bool = False
    tls: bool = False
    ca_file: str | None = None

    def validate(self) -> RestConfig:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidArgument("--listen", f"expected host:port, got {self.listen!r}")
        if not self.addresses:
            raise InvalidArgument("--address", "give at least one node address")
        return self


class RestServer:
    """Serves the REST API until `stop()`. `bound` is set once listening (`url` then valid)."""

    def __init__(self, config: RestConfig) -> None:
        self.config = config.validate()
        self.url = ""
        self.bound = asyncio.Event()
        self._stop = asyncio.Event()
        self._open: set[asyncio.StreamWriter] = set()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        ca = None
        if self.config.ca_file:
            with open(self.config.ca_file, "rb") as f:
                ca = f.read()
        channel = node_channel(list(self.config.addresses), ca, self.config.tls)
        try:
            await self._check_exposure(channel)
            transcoder = Transcoder(channel)
            host, _, port = self.config.listen.rpartition(":")
            server = await asyncio.start_server(lambda r, w: self._connection(transcoder, r, w), host.strip("[]"),
                                                int(port))
            async with server:
                sock = server.sockets[0].getsockname()
                self.url = f"http://{host}:{sock[1]}"
                self.bound.set()
                log.info("rest api listening", extra={"event": "rest_listening", "url": self.url})
                await self._stop.wait()
                for w in list(self._open):  # keep-alive clients do not hold the stop
                    w.close()
        finally:
            await channel.close()

    async def _connection(self, transcoder: Transcoder, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self._open.add(w)
        try:
            await _serve(transcoder, r, w)
        finally:
            self._open.discard(w)

    async def _check_exposure(self, channel: grpc.aio.Channel) -> None:
        """Beyond loopback only when the nodes require tokens, or with --insecure."""
        if self.config.insecure or is_loopback(self.config.listen):
            return  # exposure_refusal would pass it whatever the nodes say: do not ask them
        try:
            status = await admin_pb2_grpc.AdminServiceStub(channel).ClusterStatus(
                admin_pb2.ClusterStatusRequest(), timeout=10, metadata=((LOCAL_ONLY, "1"),))
            tokens = bool(status.members) and all(m.auth_mode == "tokens" for m in status.members)
        except grpc.aio.AioRpcError as err:
            raise InvalidArgument("--address", f"cannot ask the node whether it requires tokens: {err.details()}; "
                                  "needed to listen beyond loopback (or give --insecure)") from None
        refused = exposure_refusal(self.config.listen, tokens, False,
                                   without="while the nodes run without an auth file (every caller would be an admin)",
                                   remedy="start the nodes with --auth-file")
        if refused:
            raise InvalidArgument("--listen", refused)


async def _serve(transcoder: Transcoder, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection's requests, in order, until the client closes or asks to."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            except asyncio.LimitOverrunError:
                _write(writer, 431, rest.error_json(grpc.StatusCode.INVALID_ARGUMENT, "headers too large"), False)
                return
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                _write(writer, 400, rest.error_json(grpc.StatusCode.INVALID_ARGUMENT, "malformed request line"), False)
                return
            verb, target, version = parts
            keep = headers.get("connection", "").lower() != "close" if version == "HTTP/1.1" \
                else headers.get("connection", "").lower() == "keep-alive"
            refusal = _body_refusal(headers)
            if refusal is not None:
                _write(writer, refusal[0], rest.error_json(grpc.StatusCode.INVALID_ARGUMENT, refusal[1]), False)
                return
            if headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            try:
                status, payload = await transcoder.handle(verb.upper(), target, headers, body)
            except Exception:  # a bug: INTERNAL with a generic message, as the gRPC edge answers one
                log.exception("unexpected error in a REST request",
                              extra={"event": "rest_internal_error", "verb": verb, "target": target})
                status, payload = 500, rest.error_json(grpc.StatusCode.INTERNAL, "internal error")
            _write(writer, status, payload, keep)
            await writer.drain()
            if not keep:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


def _body_refusal(headers: dict[str, str]) -> tuple[int, str] | None:
    if "transfer-encoding" in headers:
        return 411, "send the body with a Content-Length (chunked request bodies are not read)"
    length = headers.get("content-length", "0") or "0"
    if not length.isdigit():
        return 400, "Content-Length must be a number"
    if int(length) > MAX_BODY_BYTES:
        return 413, f"the body is larger than {MAX_BODY_BYTES} bytes"
    return None


def _write(writer: asyncio.StreamWriter, status: int, body: bytes, keep: bool) -> None:
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\nContent-Type: {JSON}\r\n"
            f"Content-Length: {len(body)}\r\n{'' if keep else 'Connection: close' + chr(13) + chr(10)}\r\n")
    writer.write(head.encode("latin-1") + body)
