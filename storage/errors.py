"""The one place where psycopg errors become cronwheel errors (River's `interpretError`).

Every borrow of a connection (`Database.connection()`, hence `transaction()` and `fenced()`)
passes driver errors through `map_error`, so no caller above storage sees a psycopg exception.
"""

from __future__ import annotations

import psycopg

from cronwheel.errors import AlreadyExists, Unavailable


def map_error(exc: psycopg.Error) -> Exception:
    if isinstance(exc, psycopg.errors.UniqueViolation):
        diag = exc.diag.constraint_name or "unique key"
        return AlreadyExists("row", diag, f"already exists ({diag})")
    if isinstance(exc, psycopg.OperationalError):
        return Unavailable("postgres", str(exc).strip().splitlines()[0] if str(exc) else None)
    return exc


