"""Rewrapping a gRPC method handler, for the server interceptors (auth, RPC metrics).

grpc.aio interceptors see a method's `RpcMethodHandler` and return a new one; the four call shapes
(unary/stream request x unary/stream response) each need their own constructor. The one place that
knows them: an interceptor gives a wrapper for unary-response behaviours and one for streaming-
response behaviours, and `rewrap` builds the handler of the right shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

Wrap = Callable[[Callable[..., Any], str], Callable[..., Any]]


def rewrap(handler: grpc.RpcMethodHandler, method: str, unary: Wrap, streaming: Wrap,
           request_deserializer: Callable[[bytes], Any] | None = None) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour wrapped by `unary` (unary response) or `streaming` (streaming
    response); `request_deserializer` replaces the handler's own when given."""
    ser = {"request_deserializer": request_deserializer or handler.request_deserializer,
           "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary, method), **ser)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary, method), **ser)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream, method), **ser)
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream, method), **ser)


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]
Build = Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler]


async def wrapped_once(cache: dict[str, grpc.RpcMethodHandler], continuation: Continuation,
                       details: grpc.HandlerCallDetails, build: Build) -> grpc.RpcMethodHandler | None:
    """An interceptor's handler for `details.method`, built by `build` on the method's first call
    and kept: grpc.aio asks the interceptors for every call, and a method's handler and its
    wrapping never change, so later calls cost a dict lookup instead of the rest of the chain and
    a new handler (about 5 % of a node's CPU under 64 callers of SubmitJob). Methods no service
    has (None: UNIMPLEMENTED) are not kept: their names are the callers'."""
    method = details.method
    handler = cache.get(method)
    if handler is None:
        found = await continuation(details)
        if found is None:
            return None
        handler = cache[method] = build(found, method)
    return handler


async def responses(result: Any) -> AsyncIterator[Any]:
    """The responses of a streaming behaviour, which grpc.aio lets be an async generator or a
    coroutine that writes with context.write()."""
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    else:
        await result
