"""The one place where psycopg errors become cronwheel errors (River's `interpretError`).

Every borrow of a connection (`Database.connection()`, hence `transaction()` and `fenced()`)
passes driver errors through `map_error`, so no caller above storage sees a psycopg exception:

    unique violation        AlreadyExists(kind, key), kind and wording from UNIQUE_KEYS
                            (constraint name -> which object and which key)
    connection / operational Unavailable("postgres")
    a session limit ended it Unavailable("postgres"): the server ended a transaction that outlived
                            the session's limits (db.py SessionLimits), nothing of it was written
    undefined table         Unavailable("postgres", "database is not migrated ...")
    anything else           Internal("postgres", SQLSTATE and class): a bug or a broken database,
                            never passed through raw
    a pipeline's end failed `commit_error`: the server's error at the COMMIT if psycopg read it,
                            else Internal naming what the driver raised

The key of an AlreadyExists is PostgreSQL's own description of the clash ("(tenant, name)=(acme,
nightly)"), so the message names the value without this module parsing user data.
"""

from __future__ import annotations

import re

import psycopg

from cronwheel.errors import AlreadyExists, CronwheelError, Internal, Unavailable

# constraint or unique index name (storage/sql/schema.sql) -> (kind, what the key is)
UNIQUE_KEYS: dict[str, tuple[str, str]] = {
    "schedules_pkey": ("schedule", "schedule id"),
    "schedule_due_pkey": ("schedule", "schedule id"),
    "schedules_tenant_name": ("schedule", "schedule name (unique per tenant among live schedules)"),
    "executions_pkey": ("execution", "execution id"),
    "executions_schedule_tick": ("execution", "execution of this schedule tick"),
    "executions_idempotency": ("execution", "idempotency key (unique per tenant)"),
    "executions_unique": ("execution", "unique job key (another execution of the same unique job holds it)"),
    "tenants_pkey": ("tenant", "tenant"),
}
# idle_in_transaction_session_timeout, transaction_timeout: the transaction was rolled back
SESSION_LIMIT_ENDED = frozenset({"25P03", "25P04"})
_KEY = re.compile(r"Key (.*) already exists\.?$")


class NotMigrated(Unavailable):
    """The database has no cronwheel schema: run `cronwheel migrate` first (CLI exit 3)."""

    def __init__(self) -> None:
        super().__init__("postgres", "database is not migrated (run `cronwheel migrate`)")


def _already_exists(exc: psycopg.errors.UniqueViolation) -> AlreadyExists:
    constraint = exc.diag.constraint_name or "unique key"
    kind, what = UNIQUE_KEYS.get(constraint, ("row", f"unique key {constraint}"))
    m = _KEY.match(exc.diag.message_detail or "")
    key = m.group(1) if m else constraint
    return AlreadyExists(kind, key, f"{what} already exists: {key} ({constraint})")


def map_error(exc: psycopg.Error) -> CronwheelError:
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return _already_exists(exc)
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return NotMigrated()
    if isinstance(exc, psycopg.OperationalError) or exc.sqlstate in SESSION_LIMIT_ENDED:
        return Unavailable("postgres", str(exc).strip().splitlines()[0] if str(exc) else None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Internal("postgres", f"{exc.sqlstate or '-'} {type(exc).__name__}: {first}")


def commit_error(exc: BaseException) -> CronwheelError:
    """The error of a pipelined transaction whose statements all ran and whose COMMIT (the Sync)
    failed, from what psycopg raised ending the pipeline (`Database.pipelined_transaction`): the
    server's own error if it is in the chain (psycopg 3.3 may raise "cannot exit pipeline mode
    while busy" over it), else Internal naming the driver's exception (psycopg 3.3 raises
    IndexError when it reads the COMMIT's error and the Sync's result together: the server's
    message is lost, the transaction was not committed)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.Error) and seen.sqlstate:
            return map_error(seen)
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, psycopg.Error):
        return map_error(exc)
    return Internal("postgres", f"the transaction's COMMIT failed and the driver lost its error "
                                f"({type(exc).__name__}: {exc})")
