"""The two walls of fire-once and submit-once, against a real PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from cronwheel.errors import AlreadyExists
from cronwheel.storage import FireBatchParams, PgStore, Tick
from cronwheel.storage.executions import SubmittedJob

from .test_fencing import T0, make_schedule

pytestmark = pytest.mark.integration


async def test_second_fire_of_a_tick_is_a_duplicate_not_a_row(store: PgStore) -> None:
    sid = await make_schedule(store, 0)
    await store.partitions.record_epoch(0, 1, "a")
    first = await store.firing.fire(FireBatchParams(partition=0, epoch=1, ticks=[Tick(sid, T0, T0)]))
    await store.partitions.record_epoch(0, 2, "b")
    second = await store.firing.fire(FireBatchParams(partition=0, epoch=2, ticks=[Tick(sid, T0, T0)]))
    assert len(first.fired) == 1
    assert second.fired == () and second.duplicates == 1
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM executions WHERE schedule_id = %s", (sid,))
        assert await cur.fetchone() == (1,)


async def test_unique_schedule_tick_rejects_a_raw_duplicate(store: PgStore) -> None:
    sid = await make_schedule(store, 0)
    insert = (
        "INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at,"
        " state) VALUES (%s, %s, 't1', 'x', 0, %s, %s, 'queued')"
    )
    async with store.connection() as conn:
        await conn.execute(insert, (uuid.uuid4(), sid, T0, T0))
    with pytest.raises(AlreadyExists, match="executions_schedule_tick"):
        async with store.connection() as conn:
            await conn.execute(insert, (uuid.uuid4(), sid, T0, T0))



async def test_the_tick_key_indexes_cron_rows_only(store: PgStore) -> None:
    """executions_schedule_tick is partial (migration 0019): a one-off job (no schedule) can never
    conflict on it, so neither its insert nor a later version of its row (claim, completion) adds
    an entry to it. The rule is unchanged: one-offs of one instant all go in, a cron tick's second
    row does not (and the ON CONFLICT of the fire, which names the predicate, still skips it:
    test_second_fire_of_a_tick_is_a_duplicate_not_a_row)."""
    sid = await make_schedule(store, 0)
    insert = (
        "INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at,"
        " state) VALUES (%s, %s, 't1', 'x', 0, %s, %s, 'queued')"
    )
    async with store.connection() as conn:
        cur = await conn.execute("SELECT pg_get_indexdef('executions_schedule_tick'::regclass)")
        assert await cur.fetchone() == (
            "CREATE UNIQUE INDEX executions_schedule_tick ON public.executions USING btree (schedule_id, "
            "scheduled_for) WHERE (schedule_id IS NOT NULL)",)
        for _ in range(3):
            await conn.execute(insert, (uuid.uuid4(), None, T0, T0))
        await conn.execute(insert, (uuid.uuid4(), sid, T0, T0))
    with pytest.raises(AlreadyExists, match="executions_schedule_tick"):
        async with store.connection() as conn:
            await conn.execute(insert, (uuid.uuid4(), sid, T0, T0))


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def submitted(key: str | None, tenant: str = "t1") -> SubmittedJob:
    return SubmittedJob(id=uuid.uuid4(), tenant=tenant, type="x", payload="{}", partition=0, run_at=NOW,
                        priority="default", state="queued", max_attempts=5, retry_initial_s=30,
                        retry_multiplier=4, retry_max_s=21600, timeout_s=None, idempotency_key=key)


async def test_idempotency_key_dedupes_per_tenant(store: PgStore) -> None:
    ex = store.executions
    async with store.connection() as conn:
        [a] = await ex.insert_submitted_many(conn, [submitted("k1")], NOW)
        again = await ex.insert_submitted_many(conn, [submitted("k1")], NOW)
        other_tenant = await ex.insert_submitted_many(conn, [submitted("k1", tenant="t2")], NOW)
        assert a is not None and again == [] and len(other_tenant) == 1
        existing = await ex.by_idempotency_key(conn, "t1", "k1")
        assert existing is not None and existing["id"] == a["id"]
        # Without a key there is no dedupe.
        assert len(await ex.insert_submitted_many(conn, [submitted(None)], NOW)) == 1
        assert len(await ex.insert_submitted_many(conn, [submitted(None)], NOW)) == 1


async def test_raw_duplicate_idempotency_key_is_rejected_by_the_database(dsn: str) -> None:
    with psycopg.connect(dsn) as c:
        c.execute("INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state,"
                  " idempotency_key) VALUES (%s, 't1', 'x', 0, now(), now(), 'queued', 'dup')", (uuid.uuid4(),))
        c.commit()
        with pytest.raises(psycopg.errors.UniqueViolation):
            c.execute(
                "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state,"
                " idempotency_key) VALUES (%s, 't1', 'x', 0, now(), now(), 'queued', 'dup')",
                (uuid.uuid4(),),
            )
