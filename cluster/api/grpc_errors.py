"""Domain errors -> gRPC status codes: the one table.

Servicers raise cronwheel.errors exceptions and nothing else; the one server interceptor
(cluster.auth.AuthInterceptor, in front of every cronwheel.v1 service) aborts the call with the
mapped code and the error's message (which names the field for InvalidArgument), plus the rich
error of gRPC's conventions (`grpc-status-details-bin` trailer, a `google.rpc.Status`): an
INVALID_ARGUMENT carries a `google.rpc.BadRequest` detail whose field violation names the field
(`details`). Anything
unexpected (including `errors.Internal`, e.g. an unmapped database error) is logged with its
traceback and returned as INTERNAL with a generic message, never a stack trace to the client.
"""

from __future__ import annotations

import logging

import grpc
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

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


def details(exc: e.CronwheelError, code: grpc.StatusCode) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata of the rich error for `exc` (none where there is no detail to add):
    a `google.rpc.Status` with a `google.rpc.BadRequest` naming the field of an InvalidArgument."""
    if not isinstance(exc, e.InvalidArgument) or code is not grpc.StatusCode.INVALID_ARGUMENT:
        return ()
    return tuple(rpc_status.to_status(invalid_argument_status(exc.field, exc.message)).trailing_metadata)


def invalid_argument_status(field: str, message: str) -> status_pb2.Status:
    """INVALID_ARGUMENT as a `google.rpc.Status` carrying a `google.rpc.BadRequest` that names
    `field` (none for an empty field): the node's refusals (`details`) and the REST transcoder's
    own (cluster/api/rest.py) both."""
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message)
    if field:
        status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=message)]))
    return status
