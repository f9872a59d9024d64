"""What a Client call raises: gRPC status codes mapped to typed exceptions, once, here.

Each class subclasses the matching class of cronwheel.errors (so `except
cronwheel.errors.NotFound` works too) and ApiError, which keeps the status code name (`.code`)
and the server's message verbatim (`str(exc)`). InvalidArgument's `.field` is the field path the
server's message starts with ("schedule.cron: expected 5 or 6 fields" -> "schedule.cron").
"""

from __future__ import annotations

import grpc

from cronwheel import errors


class ApiError(errors.CronwheelError):
    """A cronwheel node refused or failed a call. From submit_many, `.submitted` holds the results
    of the jobs the calls before the failing one stored (jobs[0:len(submitted)])."""

    code: str = "UNKNOWN"
    # submit_many only: the results of the jobs stored by the calls before the one that failed.
    submitted: tuple[object, ...] = ()

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        errors.CronwheelError.__init__(self, message or code)


class InvalidArgument(ApiError, errors.InvalidArgument):
    """Invalid argument; `.field` names the offending field."""

    def __init__(self, code: str, message: str) -> None:
        head, sep, _ = message.partition(": ")
        self.field = head if sep and " " not in head else ""
        ApiError.__init__(self, code, message)


class NotFound(ApiError, errors.NotFound):
    """Not found (or not visible to this caller)."""

    kind = ""
    ident: object = None


class AlreadyExists(ApiError, errors.AlreadyExists):
    """Already exists."""

    kind = ""
    key: object = None


class FailedPrecondition(ApiError, errors.FailedPrecondition):
    """The object is not in a state that allows the call (e.g. a version conflict)."""


class ResourceExhausted(ApiError, errors.ResourceExhausted):
    """A quota is used up."""


class Unauthenticated(ApiError, errors.Unauthenticated):
    """Missing or unknown token."""


class PermissionDenied(ApiError, errors.PermissionDenied):
    """The token may not do this."""


class Unavailable(ApiError, errors.Unavailable):
    """No node answered (after the retries the call allows)."""

    what = "cronwheel node"


class DeadlineExceeded(ApiError, TimeoutError):
    """The call's deadline passed."""


class Internal(ApiError, errors.Internal):
    """The node failed (a bug or a broken dependency); its log has the details."""

    what = "cronwheel node"


_BY_CODE: dict[grpc.StatusCode, type[ApiError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.INTERNAL: Internal,
}


def from_rpc_error(exc: grpc.RpcError) -> ApiError:
    """The typed exception for a failed call."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    return _BY_CODE.get(code, ApiError)(code.name, " ".join(details.split()))
