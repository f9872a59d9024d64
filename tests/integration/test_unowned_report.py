"""The partition_unowned alert against real PostgreSQL: every node that saw a gap may report it,
one event is written per gap (a gap = the partition's last recorded epoch), and the event owes
its webhook deliveries once fanned out."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from cronwheel.storage.store import PgStore
from cronwheel.storage.webhooks import NewWebhook

pytestmark = pytest.mark.integration


async def unowned_events(store: PgStore) -> list[tuple[int, dict[str, object]]]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT partition, data FROM events WHERE kind = 'partition_unowned' ORDER BY id")
        return [(r[0], r[1]) for r in await cur.fetchall()]


async def test_many_nodes_reporting_one_gap_at_once_write_one_event_with_its_deliveries(store: PgStore) -> None:
    now = datetime.now(UTC)
    await store.partitions.record_epoch(3, 41, "n-old")
    hook = await store.webhooks.create(NewWebhook(uuid.uuid4(), None, "http://127.0.0.1:9/h", "s" * 20,
                                                  ("partition_unowned",), None, "", "ops", now, 100))
    tenant_hook = await store.webhooks.create(NewWebhook(uuid.uuid4(), "acme", "http://127.0.0.1:9/t", "s" * 20,
                                                         ("partition_unowned",), None, "", "acme", now, 100))
    got = await asyncio.gather(*(store.partitions.report_unowned(3, 31.5, 30.0, f"n{i}", now) for i in range(6)))
    assert sorted(got) == [False] * 5 + [True]
    events = await unowned_events(store)
    assert events == [(3, {"epoch": 41, "last_owner": "n-old", "unowned_for_s": 31.5, "threshold_s": 30.0})]
    assert await store.webhooks.fan_out(100) == (1, 1)  # the event is its deliveries' outbox
    async with store.connection() as conn:
        cur = await conn.execute("SELECT webhook_id FROM webhook_deliveries")
        owed = [r[0] for r in await cur.fetchall()]
    assert owed == [hook["id"]], "a cluster event goes to webhooks without a tenant only"
    assert tenant_hook["id"] not in owed


async def test_a_new_owner_in_between_makes_the_next_gap_a_new_event(store: PgStore) -> None:
    now = datetime.now(UTC)
    assert await store.partitions.report_unowned(5, 40.0, 30.0, "n1", now)
    assert not await store.partitions.report_unowned(5, 80.0, 30.0, "n2", now)
    await store.partitions.record_epoch(5, 7, "n2")  # held again, then lost again
    assert await store.partitions.report_unowned(5, 35.0, 30.0, "n1", now)
    assert [(p, d["epoch"]) for p, d in await unowned_events(store)] == [(5, 0), (5, 7)]


async def test_a_report_waits_for_a_concurrent_report_of_the_same_partition_and_then_writes_nothing(
        store: PgStore, dsn: str) -> None:
    import psycopg

    from cronwheel.storage.queries import q

    now = datetime.now(UTC)
    params = {"partition": 2, "unowned_for_s": 30.0, "threshold_s": 30.0, "actor": "n1", "at": now}
    async with await psycopg.AsyncConnection.connect(dsn) as first:  # n1's report, not committed yet
        await first.execute(q("lock_unowned_report"), params)
        await first.execute(q("insert_unowned_event"), params)
        second = asyncio.create_task(store.partitions.report_unowned(2, 30.5, 30.0, "n2", now))

        async def waiting_on_the_lock() -> bool:
            async with store.connection() as c:
                cur = await c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                got = await cur.fetchone()
            return bool(got and got[0])

        for _ in range(400):
            if second.done() or await waiting_on_the_lock():
                break
            await asyncio.sleep(0.01)
        assert not second.done(), "the second report did not wait for the first: two events for one gap"
        await first.commit()
    assert await second is False
    assert len(await unowned_events(store)) == 1
