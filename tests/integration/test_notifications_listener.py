"""storage's LISTEN side (storage/notifications.py) against real PostgreSQL."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from cronwheel.errors import Unavailable
from cronwheel.storage.notifications import DUE_CHANNEL, QUEUED_CHANNEL, Listener, Notification

pytestmark = pytest.mark.integration


async def test_listener_receives_both_channels_in_commit_order(dsn: str) -> None:
    async with Listener(dsn) as notes:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            await c.execute("SELECT pg_notify('cronwheel_due', '1:s:x'), pg_notify('cronwheel_queued', 'p')")
        got: list[Notification] = []

        async def two() -> None:
            async for n in notes:
                got.append(n)
                if len(got) == 2:
                    return

        await asyncio.wait_for(two(), 10)
    assert got == [Notification(DUE_CHANNEL, "1:s:x"), Notification(QUEUED_CHANNEL, "p")]


async def test_an_unreachable_database_is_unavailable_not_a_driver_error() -> None:
    with pytest.raises(Unavailable):
        async with Listener("postgresql://postgres@127.0.0.1:1/nope?connect_timeout=2"):
            pass
