"""Reception of PostgreSQL notifications (LISTEN), the storage side of `cluster/notifications.py`.

Channels (the senders are in the SQL: `pg_notify(...)` in the API's and the firing path's queries):
    cronwheel_due      '<partition>:<s|o>:<id>': a schedule or one-off job changed (sent in the
                       changing transaction, so it arrives only once the change is visible)
    cronwheel_queued   work was queued somewhere (wakes waiting workers)

`Listener(dsn)` is one dedicated autocommit connection: `async with Listener(dsn) as notes:` LISTENs
to both channels, then `async for note in notes` yields `Notification`s until the connection
fails. Every psycopg error leaves as a cronwheel error (`Unavailable` for a lost connection), so
the caller needs no driver import. Not task-safe: one task owns a listener.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Self

import psycopg

from cronwheel.storage.errors import map_error
from cronwheel.storage.queries import q

DUE_CHANNEL = "cronwheel_due"
QUEUED_CHANNEL = "cronwheel_queued"


@dataclass(frozen=True, slots=True)
class Notification:
    channel: str
    payload: str


class Listener:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def __aenter__(self) -> Self:
        try:
            self._conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            await self._conn.execute(q("listen_due"))
            await self._conn.execute(q("listen_queued"))
        except psycopg.Error as exc:
            await self.__aexit__()
            raise map_error(exc) from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:  # closing a connection that is already gone
                pass

    async def __aiter__(self) -> AsyncIterator[Notification]:
        assert self._conn is not None, "use inside `async with Listener(dsn)`"
        try:
            async for n in self._conn.notifies():
                yield Notification(n.channel, n.payload)
        except psycopg.Error as exc:
            raise map_error(exc) from exc
