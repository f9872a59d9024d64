"""The node's server interceptors (auth, RPC metrics) build a method's handler once and keep it,
yet still authenticate, map errors and count every call: a real grpc.aio server on loopback with
the node's two interceptors in the node's order (`services.interceptors`) and a test service."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from cronwheel import errors as e
from cronwheel.clock import FakeClock
from cronwheel.cluster.api.auth import (
    AuthConfig,
    AuthInterceptor,
    Caller,
    authorization_check,
    current_caller,
    hash_token,
)
from cronwheel.cluster.api.tokens import TokenCache
from cronwheel.cluster.dispatch.polls import Polls
from cronwheel.cluster.metrics import Metrics, RpcMetricsInterceptor

ECHO = "/cronwheel.v1.TestService/Echo"


class CountingHandlers(grpc.GenericRpcHandler):
    """The test service, counting how often gRPC asks it for a method's handler."""

    def __init__(self) -> None:
        self.lookups: dict[str, int] = {}

        async def echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            if request == b"missing":
                raise e.NotFound("thing", "missing")
            return current_caller().name.encode()

        self.echo = grpc.unary_unary_rpc_method_handler(echo)

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        self.lookups[details.method] = self.lookups.get(details.method, 0) + 1
        return self.echo if details.method == ECHO else None


def test_a_method_is_wrapped_once_and_every_call_is_still_authenticated_mapped_and_counted() -> None:
    async def go() -> tuple[dict[str, int], list[Any], Metrics]:
        metrics = Metrics()
        config = AuthConfig(tokens={hash_token("tok-a"): Caller("alice", "acme"),
                                    hash_token("tok-b"): Caller("bob", "acme")})
        clock = FakeClock()
        service = CountingHandlers()
        server = grpc.aio.server(interceptors=[RpcMetricsInterceptor(metrics, clock),
                                               AuthInterceptor(config, None, clock)])
        server.add_generic_rpc_handlers((service,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        got: list[Any] = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                echo = channel.unary_unary(ECHO)
                other = channel.unary_unary("/cronwheel.v1.TestService/Nope")
                for token, request in (("tok-a", b""), ("tok-b", b""), ("tok-x", b""), ("tok-a", b"missing"),
                                       ("tok-a", b"")):
                    try:
                        got.append(await echo(request, metadata=(("authorization", f"Bearer {token}"),)))
                    except grpc.aio.AioRpcError as err:
                        got.append(err.code())
                for _ in range(2):
                    try:
                        await other(b"", metadata=(("authorization", "Bearer tok-a"),))
                    except grpc.aio.AioRpcError as err:
                        got.append(err.code())
        finally:
            await server.stop(None)
        return service.lookups, got, metrics

    lookups, got, metrics = asyncio.run(go())
    # Each call authenticated on its own: the kept handler holds no caller.
    assert got == [b"alice", b"bob", grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.NOT_FOUND, b"alice",
                   grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNIMPLEMENTED]
    # The method's handler was looked up and wrapped at its first call only; an unknown method is
    # looked up every time (not kept: its names are the callers').
    assert lookups == {ECHO: 1, "/cronwheel.v1.TestService/Nope": 2}

    def handled(code: str) -> float | None:
        return metrics.registry.get_sample_value("cronwheel_grpc_server_handled_total", {
            "service": "cronwheel.v1.TestService", "method": "Echo", "code": code})

    assert (handled("OK"), handled("UNAUTHENTICATED"), handled("NOT_FOUND")) == (3, 1, 1)
    assert metrics.registry.get_sample_value("cronwheel_grpc_server_handling_seconds_count", {
        "service": "cronwheel.v1.TestService", "method": "Echo"}) == 5



def test_held_calls_of_one_token_share_one_credential_check_that_refuses_them_once_revoked() -> None:
    """What a node's held long polls are re-checked with after each refresh of its token list
    (Dispatcher.recheck): the calls of one token share one check, which reads no metadata and
    hashes nothing, so 1,000 held calls of a tenant cost one lookup a second, not 1,000 hashes
    (4 ms on the event loop before); it still refuses a revoked token, and only that one."""
    clock = FakeClock()
    rows = [{"sha256": hash_token(t), "name": t, "tenant": "acme", "admin": False, "expires_at": None}
            for t in ("tok-a", "tok-b")]

    async def live() -> list[dict[str, Any]]:
        return list(rows)

    async def go() -> tuple[list[Any], TokenCache]:
        tokens = TokenCache(live, clock)
        await tokens.refresh()
        checks: list[Any] = []
        release = asyncio.Event()

        async def held(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            checks.append((request, authorization_check()))
            await release.wait()
            return b""

        server = grpc.aio.server(interceptors=[AuthInterceptor(AuthConfig(), tokens, clock)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "cronwheel.v1.TestService", {"Held": grpc.unary_unary_rpc_method_handler(held)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary("/cronwheel.v1.TestService/Held")
                calls = [asyncio.ensure_future(call(t.encode(), metadata=(("authorization", f"Bearer {t}"),)))
                         for t in ("tok-a", "tok-a", "tok-b")]
                while len(checks) < 3:
                    await asyncio.sleep(0.01)
                release.set()
                await asyncio.gather(*calls)
        finally:
            await server.stop(None)
        return sorted(checks, key=lambda c: c[0]), tokens

    checks, tokens = asyncio.run(go())
    (a1, check_a), (a2, check_a2), (b, check_b) = checks
    assert (a1, a2, b) == (b"tok-a", b"tok-a", b"tok-b")
    assert check_a is check_a2 and check_a is not check_b
    polls = Polls(max_per_tenant=10, max_per_worker=10)
    waiting = [polls.enter("acme", f"w{i}", [], check) for i, check in enumerate((check_a, check_a2, check_b))]
    assert polls.recheck() == 0
    rows.pop(0)  # tok-a revoked
    asyncio.run(tokens.refresh())
    assert polls.recheck() == 2
    assert [type(p.refused) for p in waiting] == [e.Unauthenticated, e.Unauthenticated, type(None)]
