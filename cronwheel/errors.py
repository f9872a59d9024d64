"""The one error hierarchy of cronwheel.

    CronwheelError                      something went wrong in cronwheel
    ├── InvalidArgument(field)          bad input; `field` names the offending field or flag
    ├── NotFound(kind, id)              no such object (or not visible to this tenant)
    ├── AlreadyExists(kind, key)        a unique key already holds an object
    ├── FailedPrecondition              the object is not in a state that allows the call
    │   ├── StaleEpoch(partition, epoch)        a fenced write for a partition this node no longer owns
    │   ├── StaleFencingToken(execution, token) a worker call with an outdated lease token
    │   ├── VersionConflict(kind, id, expected, actual)
    │   └── SecretUnavailable           a stored secret is sealed with a key this process lacks
    ├── ResourceExhausted               a tenant quota is used up
    ├── Unauthenticated                 no or unknown credentials
    ├── PermissionDenied                the caller may not do this
    ├── Unavailable(what)               a dependency (PostgreSQL, etcd) cannot be reached
    └── Internal(what)                  a bug or a broken dependency (an unexpected database error)

Storage maps driver errors into this tree once; the gRPC edge maps this tree to status codes
once (one table, one interceptor). The root class's docstring is its default message.
"""

from __future__ import annotations


class CronwheelError(Exception):
    """Something went wrong in cronwheel."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "error").strip().splitlines()[0])

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgument(CronwheelError):
    """Invalid argument."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class NotFound(CronwheelError):
    """Not found."""

    def __init__(self, kind: str, ident: object) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} {ident} not found")


class AlreadyExists(CronwheelError):
    """Already exists."""

    def __init__(self, kind: str, key: object, message: str | None = None) -> None:
        self.kind = kind
        self.key = key
        super().__init__(message or f"{kind} {key} already exists")


class FailedPrecondition(CronwheelError):
    """The object is not in a state that allows this call."""


class StaleEpoch(FailedPrecondition):
    """The partition's epoch has moved on: this node no longer owns it."""

    def __init__(self, partition: int, epoch: int, current: int | None = None) -> None:
        self.partition = partition
        self.epoch = epoch
        self.current = current
        cur = "unknown" if current is None else str(current)
        super().__init__(
            f"partition {partition}: write with epoch {epoch} refused, current epoch is {cur}"
        )


class StaleFencingToken(FailedPrecondition):
    """The execution has been leased again: this worker must stop."""

    def __init__(self, execution_id: object, token: int, current: int | None = None) -> None:
        self.execution_id = execution_id
        self.token = token
        self.current = current
        super().__init__(
            f"execution {execution_id}: fencing token {token} is stale"
            + ("" if current is None else f" (current {current})")
        )


class VersionConflict(FailedPrecondition):
    """The object was changed by someone else."""

    def __init__(self, kind: str, ident: object, expected: int, actual: int | None) -> None:
        self.kind = kind
        self.ident = ident
        self.expected = expected
        self.actual = actual
        super().__init__(f"version conflict: expected {expected}, found {actual}")


class SecretUnavailable(FailedPrecondition):
    """A stored secret cannot be opened with the keys this process holds."""


class ResourceExhausted(CronwheelError):
    """A quota is used up."""


class Unauthenticated(CronwheelError):
    """Missing or unknown credentials."""


class PermissionDenied(CronwheelError):
    """The caller may not do this."""


class Unavailable(CronwheelError):
    """A dependency cannot be reached."""

    def __init__(self, what: str, message: str | None = None) -> None:
        self.what = what
        super().__init__(f"{what} unavailable" + (f": {message}" if message else ""))


class Internal(CronwheelError):
    """An internal error (a bug, or a dependency in a state cronwheel does not expect)."""

    def __init__(self, what: str, message: str | None = None) -> None:
        self.what = what
        super().__init__(f"internal error in {what}" + (f": {message}" if message else ""))
