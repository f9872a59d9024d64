"""Domain errors -> gRPC status codes: the one table.

Servicers raise cronwheel.errors exceptions and nothing else; the one server interceptor
(cluster.auth.AuthInterceptor, in front of every cronwheel.v1 service) aborts the call with the
mapped code and the error's message (which names the field for InvalidArgument). Anything
unexpected (including `errors.Internal`, e.g. an unmapped database error) is logged with its
traceback and returned as INTERNAL with a generic message, never a stack trace to the client.
"""

from __future__ import annotations

import logging

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
    (e.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),  # quotas
    (e.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (e.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (e.Unavailable, grpc.StatusCode.UNAVAILABLE),
)


def status_of(exc: BaseException) -> grpc.StatusCode | None:
    for cls, code in STATUS:
        if isinstance(exc, cls):
            return code
    return None
