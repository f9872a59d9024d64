"""The dispatcher against a real PostgreSQL on a FakeClock: what is claimable, every lease
deadline, start and finish time is the node's clock; a worker's failure at a long retry history
is decided by the one retry policy without overflow."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.cluster.metrics import Metrics
from cronwheel.errors import InvalidArgument
from cronwheel.limits import MAX_LEASE_COUNT
from cronwheel.storage import PgStore
from tests.integration.execution_rows import execution_row, insert_execution

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def queued(store: PgStore, *, run_at: datetime, attempt: int = 0, multiplier: float = 4.0,
                 max_attempts: int = 5, priority: str = "default") -> uuid.UUID:
    return await insert_execution(store, partition=1, scheduled_for=run_at, run_at=run_at, state="queued",
                                  attempt=attempt, max_attempts=max_attempts, retry_multiplier=multiplier,
                                  priority=priority)


times = execution_row


async def test_a_run_is_claimable_only_once_the_node_clock_reaches_its_run_at(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    ident = await queued(store, run_at=T0 + timedelta(seconds=5))
    d = Dispatcher(store, clock)
    assert await d.lease("w1", ["job"], 1, 30.0, 0.0) == []
    clock.advance(5)
    [got] = await d.lease("w1", ["job"], 1, 30.0, 0.0)
    t = await times(store, ident)
    assert t["started_at"] == t["heartbeat_at"] == clock.now()
    assert t["lease_expires"] == clock.now() + timedelta(seconds=30)
    clock.advance(2)
    expires, cancel = await d.heartbeat(ident, got.fencing_token, "w1", 60.0)
    assert expires == clock.now() + timedelta(seconds=60) and not cancel
    clock.advance(1)
    out = await d.complete(ident, got.fencing_token, "w1", "{}")
    assert out.state == "succeeded" and (await times(store, ident))["finished_at"] == clock.now()


async def test_failing_at_attempt_156_with_multiplier_100_is_retried_within_the_cap(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    ident = await queued(store, run_at=T0, attempt=155, multiplier=100.0, max_attempts=1000)
    d = Dispatcher(store, clock)
    [got] = await d.lease("w1", ["job"], 1, 30.0, 0.0)
    assert got.attempt == 156
    out = await d.fail(ident, got.fencing_token, "w1", "boom", True, "boom")
    assert out.state == "retry_scheduled" and out.attempt == 156
    assert out.run_at is not None and clock.now() <= out.run_at <= clock.now() + timedelta(seconds=21600)


async def test_failing_the_last_of_1000_attempts_is_dead_at_node_time(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    ident = await queued(store, run_at=T0, attempt=999, multiplier=100.0, max_attempts=1000)
    d = Dispatcher(store, clock, metrics=Metrics())
    [got] = await d.lease("w1", [], 1, 30.0, 0.0)
    clock.advance(3)
    out = await d.fail(ident, got.fencing_token, "w1", "boom", True, "boom")
    assert out.state == "dead" and (await times(store, ident))["finished_at"] == clock.now()


async def test_queue_depths_give_count_and_oldest_run_at_per_priority(store: PgStore) -> None:
    await queued(store, run_at=T0 + timedelta(seconds=1), priority="bulk")
    await queued(store, run_at=T0, priority="bulk")
    await queued(store, run_at=T0 + timedelta(seconds=9), priority="critical")
    depths = {d.priority: (d.queued, d.oldest_run_at) for d in await store.dispatch.queue_depths()}
    assert depths == {"bulk": (2, T0), "critical": (1, T0 + timedelta(seconds=9))}
    m = Metrics()
    await m.refresh_db(store.dispatch, T0 + timedelta(seconds=9), store.logs)  # every one's run_at come
    assert m.registry.get_sample_value("cronwheel_queue_depth", {"priority": "bulk"}) == 2
    assert m.registry.get_sample_value("cronwheel_queue_depth", {"priority": "default"}) == 0
    assert m.registry.get_sample_value("cronwheel_executions", {"state": "queued"}) == 3
    assert m.registry.get_sample_value("cronwheel_queue_ready", {"queue": "default", "priority": "bulk"}) == 2


async def test_history_retention_counts_days_back_from_the_node_clock(store: PgStore) -> None:
    # Events stamped relative to a pinned node time far from the database's: retention keeps
    # what is younger than `days` before that time and drops what is older (it used now()).
    old, young = T0 - timedelta(days=31), T0 - timedelta(days=29)
    async with store.connection() as conn:
        for at in (old, young):
            await conn.execute("INSERT INTO events (kind, actor, alert, data, at) VALUES ('x', 't', false, '{}', %s)",
                               (at,))
    assert await store.dispatch.prune_history(30, T0) == (1, 0)
    async with store.connection() as conn:
        cur = await conn.execute("SELECT at FROM events WHERE kind = 'x'")
        assert [r[0] for r in await cur.fetchall()] == [young]


async def test_one_lease_call_takes_up_to_the_node_limit_and_no_more(store: PgStore) -> None:
    # A herd's worth of runs comes back from ONE call (the limit was 100: ten claims, one at a
    # time, for 1,000 cron runs due at one instant); a call asking for more is refused, naming
    # the field, and leases nothing.
    clock = FakeClock(start_ts=T0.timestamp())
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state)"
            " SELECT cronwheel_uuid7(), 'default', 'job', 1, %(t)s, %(t)s, 'queued'"
            " FROM generate_series(1, %(n)s)", {"t": T0, "n": MAX_LEASE_COUNT + 5})
    d = Dispatcher(store, clock)
    with pytest.raises(InvalidArgument) as err:
        await d.lease("w1", ["job"], MAX_LEASE_COUNT + 1, 30.0, 0.0)
    assert err.value.field == "max_count"
    got = await d.lease("w1", ["job"], MAX_LEASE_COUNT, 30.0, 0.0)
    assert len(got) == MAX_LEASE_COUNT == 1000
    assert len({r.id for r in got}) == MAX_LEASE_COUNT
    async with store.connection() as conn:
        left = await (await conn.execute("SELECT count(*) FROM executions WHERE state = 'queued'")).fetchone()
    assert left == (5,)
