"""Domain errors -> gRPC status codes: one table, applied by one server interceptor.

Servicers raise cronwheel.errors exceptions and nothing else; the interceptor aborts the call
with the mapped code and the error's message (which names the field for InvalidArgument).
Anything unexpected is logged with its traceback and returned as INTERNAL with a generic message,
never a stack trace to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from cronwheel import errors as e

log = logging.getLogger("cronwheel.cluster.grpc")

# Order matters: the first matching class wins (subclasses before their parents).
STATUS: tuple[tuple[type[e.CronwheelError], grpc.StatusCode], ...] = (
    (e.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (e.NotFound, grpc.StatusCode.NOT_FOUND),
    (e.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (e.StaleEpoch, grpc.StatusCode.UNAVAILABLE),  # a node-internal condition: retry elsewhere
    (e.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),  # stale token, version conflict
    (e.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (e.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (e.Unavailable, grpc.StatusCode.UNAVAILABLE),
)


def status_of(exc: BaseException) -> grpc.StatusCode | None:
    for cls, code in STATUS:
        if isinstance(exc, cls):
            return code
    return None


def _wrap_unary(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await fn(request, context)
        except e.CronwheelError as exc:
            code = status_of(exc)
            assert code is not None
            await context.abort(code, exc.message)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("unexpected error in RPC", extra={"event": "rpc_internal_error"})
            await context.abort(grpc.StatusCode.INTERNAL, "internal error (logged on the server)")

    return wrapper


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            _wrap_unary(handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
