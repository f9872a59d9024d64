"""The change listener on a FakeClock with a scripted storage Listener: a lost connection is
retried after retry_s of the clock's time, and every reconnect is followed by a full resync."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Self

from cronwheel.clock import FakeClock
from cronwheel.cluster.notifications import ChangeListener
from cronwheel.errors import Unavailable
from cronwheel.storage.notifications import DUE_CHANNEL, QUEUED_CHANNEL, Notification

ID = uuid.UUID("01a2311e-293d-71ce-9579-de4d0cb23be8")


class Script:
    """Connection attempts in order: an exception (the connect fails) or notifications to yield
    before the connection drops (Unavailable) — the last attempt stays open."""

    def __init__(self, *attempts: Exception | list[Notification]) -> None:
        self.attempts = list(attempts)
        self.opened = 0
        self.idle = asyncio.Event()

    def __call__(self, dsn: str) -> Conn:
        return Conn(self, self.attempts.pop(0), last=not self.attempts)


class Conn:
    def __init__(self, script: Script, attempt: Exception | list[Notification], last: bool) -> None:
        self.script, self.attempt, self.last = script, attempt, last

    async def __aenter__(self) -> Self:
        if isinstance(self.attempt, Exception):
            raise self.attempt
        self.script.opened += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def __aiter__(self) -> AsyncIterator[Notification]:
        assert isinstance(self.attempt, list)
        for n in self.attempt:
            yield n
        if self.last:
            self.script.idle.set()
            await asyncio.Event().wait()
        raise Unavailable("postgres", "connection lost")


async def test_a_lost_connection_is_retried_on_the_clock_and_followed_by_a_resync() -> None:
    clock = FakeClock()
    changes: list[tuple[int, str, uuid.UUID]] = []
    resyncs: list[float] = []
    queued: list[int] = []

    async def on_change(p: int, kind: str, ident: uuid.UUID) -> None:
        changes.append((p, kind, ident))

    async def on_resync() -> None:
        resyncs.append(clock.now_ts())

    script = Script(
        [Notification(DUE_CHANNEL, f"3:s:{ID}"), Notification(DUE_CHANNEL, "garbage")],
        Unavailable("postgres", "refused"),
        [Notification(QUEUED_CHANNEL, "")],
    )
    listener = ChangeListener("dsn", on_change, on_resync, lambda payload: queued.append(1), retry_s=0.5,
                              clock=clock, listener=script)
    task = asyncio.create_task(listener.run())
    try:
        start = clock.now_ts()
        while not script.idle.is_set():
            moved = await clock.jump_to_next()
            assert moved is not None or script.idle.is_set(), "the listener waits on the clock only"
        assert changes == [(3, "s", ID)], "a bad payload is ignored"
        assert queued == [1]
        assert script.opened == 2 and listener.connected.is_set()
        assert clock.now_ts() - start == 1.0, "two retries of 0.5 s of the clock's time"
        assert resyncs == [start + 1.0], "one resync, after the reconnect (not on the first connect)"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
