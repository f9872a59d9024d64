"""Change notifications from PostgreSQL, as the node reacts to them.

Work queued anywhere (`cronwheel_queued`) wakes this node's waiting workers (`on_queued` gets the
payload: runs queued ahead of their run_at name when, storage.notifications.parse_queued_at).

The API writes `pg_notify('cronwheel_due', '<partition>:<s|o>:<id>')` in the same transaction as
a change to a schedule or a one-off job, so the notification arrives only after the change is
visible. The owner of the partition reloads that one entry. A notification can be missed only
while the listening connection is down; every reconnect is therefore followed by a full resync
of the owned partitions. A submit group sends its new scheduled one-off jobs as 'n:' batches
carrying each job's partition, id and run_at (`on_oneoffs`: the owner arms them with no
lookup); without `on_oneoffs` each entry is handled as a change of that job. Reception (the
connection, LISTEN) is storage's `Listener`; this module
runs no SQL. Time is the injected clock's (the pause before a reconnect).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from cronwheel.clock import Clock, SystemClock
from cronwheel.errors import Unavailable
from cronwheel.storage.notifications import (
    DUE_CHANNEL,
    ONEOFF_BATCH_PREFIX,
    QUEUED_CHANNEL,
    Listener,
    parse_oneoff_batch,
)

log = logging.getLogger("cronwheel.cluster.notifications")

CHANNEL = DUE_CHANNEL
__all__ = ["CHANNEL", "QUEUED_CHANNEL", "ChangeListener", "parse_payload"]


def parse_payload(payload: str) -> tuple[int, str, uuid.UUID] | None:
    try:
        p, kind, ident = payload.split(":", 2)
        if kind not in ("s", "o"):
            return None
        return int(p), kind, uuid.UUID(ident)
    except ValueError:
        return None


class ChangeListener:
    """Owns one `Listener`; run() never returns (reconnects forever). Not task-safe."""

    def __init__(
        self,
        dsn: str,
        on_change: Callable[[int, str, uuid.UUID], Awaitable[None]],
        on_resync: Callable[[], Awaitable[None]],
        on_queued: Callable[[str], None] | None = None,
        retry_s: float = 0.5,
        clock: Clock | None = None,
        listener: Callable[[str], Listener] = Listener,
        on_oneoffs: Callable[[list[tuple[int, uuid.UUID, float]]], Awaitable[None]] | None = None,
    ) -> None:
        self.on_oneoffs = on_oneoffs
        self.dsn = dsn
        self.on_queued = on_queued
        self.on_change = on_change
        self.on_resync = on_resync
        self.retry_s = retry_s
        self.clock: Clock = clock or SystemClock()
        self.listener = listener
        self.connected = asyncio.Event()

    async def run(self) -> None:
        first = True
        while True:
            try:
                async with self.listener(self.dsn) as notes:
                    if not first:
                        await self.on_resync()
                    first = False
                    self.connected.set()
                    async for n in notes:
                        if n.channel == QUEUED_CHANNEL:
                            if self.on_queued is not None:
                                self.on_queued(n.payload)
                            continue
                        if n.payload.startswith(ONEOFF_BATCH_PREFIX):
                            await self._oneoffs(n.payload)
                            continue
                        parsed = parse_payload(n.payload)
                        if parsed is None:
                            log.warning("bad notification ignored", extra={"event": "bad_notification",
                                                                           "payload": n.payload[:200]})
                            continue
                        await self.on_change(*parsed)
            except Unavailable as exc:
                # Lost the connection (or the resync after a reconnect failed): reconnect, and
                # resync again once connected, since notifications may have been missed.
                first = False
                self.connected.clear()
                log.warning("change listener reconnecting", extra={"event": "listen_reconnect", "error": str(exc)})
                await self.clock.sleep(self.retry_s)

    async def _oneoffs(self, payload: str) -> None:
        entries = parse_oneoff_batch(payload)
        if entries is None:
            log.warning("bad notification ignored", extra={"event": "bad_notification", "payload": payload[:200]})
            return
        if self.on_oneoffs is not None:
            await self.on_oneoffs(entries)
            return
        for p, ident, _ in entries:
            await self.on_change(p, "o", ident)
