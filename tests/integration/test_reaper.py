"""The reaper against a real PostgreSQL, on a FakeClock: every decision is the one retry policy's,
every time is the clock's, and no single row can stop it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.dispatch.reaper import Reaper
from cronwheel.cluster.metrics import Metrics
from cronwheel.storage import PgStore
from tests.integration.execution_rows import execution_row, insert_execution

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P, EPOCH = 2, 41


async def running(store: PgStore, *, attempt: int, max_attempts: int = 1000, multiplier: float = 4.0,
                  initial_s: float = 30.0, max_s: float = 21600.0, timeout_s: float | None = None,
                  started_at: datetime = T0, lease_expires: datetime = T0 + timedelta(hours=1)) -> uuid.UUID:
    """A running execution of partition P as a worker's claim would have left it."""
    return await insert_execution(
        store, partition=P, scheduled_for=started_at, run_at=started_at, state="running", attempt=attempt,
        max_attempts=max_attempts, retry_initial_s=initial_s, retry_multiplier=multiplier, retry_max_s=max_s,
        timeout_s=timeout_s, lease_owner="w1", lease_expires=lease_expires, fencing_token=attempt,
        started_at=started_at, heartbeat_at=started_at)


row = execution_row


def reaper(store: PgStore, clock: FakeClock, metrics: Metrics | None = None) -> Reaper:
    return Reaper(store, lambda: [(P, EPOCH)], lambda: None, clock=clock, metrics=metrics)


@pytest.fixture
async def owned(store: PgStore) -> PgStore:
    assert await store.partitions.record_epoch(P, EPOCH, "node-a")
    return store


@pytest.mark.parametrize(("attempt", "multiplier"), [(600, 4.0), (156, 100.0), (999, 100.0)])
async def test_timed_out_run_with_a_long_history_is_retried_within_the_cap(
        owned: PgStore, attempt: int, multiplier: float) -> None:
    clock = FakeClock(start_ts=(T0 + timedelta(minutes=5)).timestamp())
    ident = await running(owned, attempt=attempt, multiplier=multiplier, timeout_s=60.0)
    assert await reaper(owned, clock).reap(P, EPOCH) == 1
    r = await row(owned, ident)
    assert r["state"] == "retry_scheduled" and r["error_type"] == "timeout" and r["lease_owner"] is None
    assert clock.now() <= r["run_at"] <= clock.now() + timedelta(seconds=21600)
    assert r["finished_at"] is None


@pytest.mark.parametrize(("attempt", "multiplier"), [(1000, 4.0), (1000, 100.0), (600, 4.0)])
async def test_timed_out_run_on_its_last_attempt_is_dead_at_node_time(
        owned: PgStore, attempt: int, multiplier: float) -> None:
    clock = FakeClock(start_ts=(T0 + timedelta(minutes=5)).timestamp())
    ident = await running(owned, attempt=attempt, max_attempts=attempt, multiplier=multiplier, timeout_s=60.0)
    assert await reaper(owned, clock).reap(P, EPOCH) == 1
    r = await row(owned, ident)
    assert r["state"] == "dead" and r["finished_at"] == clock.now()
    async with owned.connection() as conn:
        cur = await conn.execute("SELECT alert FROM events WHERE kind = 'dead_letter' AND execution_id = %s",
                                 (ident,))
        assert await cur.fetchall() == [(True,)]


async def test_one_bad_row_is_logged_counted_and_the_rest_are_reaped(
        owned: PgStore, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(start_ts=(T0 + timedelta(minutes=5)).timestamp())
    bad = await running(owned, attempt=3, multiplier=float("nan"), timeout_s=60.0)  # no API accepts it
    good = await running(owned, attempt=600, multiplier=100.0, timeout_s=60.0)
    metrics = Metrics()
    r = reaper(owned, clock, metrics)
    assert await r.reap(P, EPOCH) == 1
    assert (await row(owned, good))["state"] == "retry_scheduled"
    assert (await row(owned, bad))["state"] == "running", "left for the next round"
    assert r.failures == 1 and metrics.registry.get_sample_value("cronwheel_reap_failures_total") == 1.0
    assert [rec.__dict__.get("execution_id") for rec in caplog.records
            if rec.__dict__.get("event") == "reap_row_failed"] == [str(bad)]



async def test_a_buffered_run_the_reaper_releases_is_counted_as_queued(owned: PgStore) -> None:
    """The run ahead of a buffered one (overlap buffer_*) dies of its timeout: the reaper releases
    the buffered run and, once committed, counts it `queued` under its job type (it was not
    counted before: fails without the change)."""
    from tests.integration.test_fencing import make_schedule

    clock = FakeClock(start_ts=(T0 + timedelta(minutes=5)).timestamp())
    sid = await make_schedule(owned, P)
    ahead = await insert_execution(
        owned, schedule_id=sid, type="noop", trigger="cron", partition=P, scheduled_for=T0, run_at=T0,
        state="running", attempt=1, max_attempts=1, timeout_s=60.0, lease_owner="w1",
        lease_expires=T0 + timedelta(hours=1), fencing_token=1, started_at=T0, heartbeat_at=T0)
    behind = await insert_execution(
        owned, schedule_id=sid, type="noop", trigger="cron", partition=P, scheduled_for=T0 + timedelta(minutes=1),
        run_at=T0 + timedelta(minutes=1), state="scheduled", state_reason="buffered")
    metrics = Metrics()
    assert await reaper(owned, clock, metrics).reap(P, EPOCH) == 1
    assert (await row(owned, ahead))["state"] == "dead"
    assert (await row(owned, behind))["state"] == "queued"
    entered = "cronwheel_executions_entered_total"
    assert metrics.registry.get_sample_value(entered, {"state": "dead", "job_type": "noop"}) == 1.0
    assert metrics.registry.get_sample_value(entered, {"state": "queued", "job_type": "noop"}) == 1.0


async def test_reaper_loop_on_a_fake_clock_requeues_a_lapsed_lease_only_once_the_clock_passes_it(
        owned: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    lapses = T0 + timedelta(seconds=10)
    ident = await running(owned, attempt=2, lease_expires=lapses)
    r = reaper(owned, clock)
    task = asyncio.create_task(r.run())
    try:
        async def one_round() -> None:
            r.round_done.clear()
            await clock.until_asleep()
            clock.advance(r.interval_s)
            await asyncio.wait_for(r.round_done.wait(), 10)

        for _ in range(10):  # T0+1 .. T0+10: the lease has not lapsed (expiry is strictly after)
            await one_round()
            assert (await row(owned, ident))["state"] == "running", clock.now()
        await one_round()  # T0+11
        got = await row(owned, ident)
        assert got["state"] == "queued" and got["queued_at"] == clock.now() == lapses + timedelta(seconds=1)
        assert got["error_type"] == "lease_expired" and got["attempt"] == 2 and got["finished_at"] is None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_reaper_survives_a_round_that_fails_for_a_whole_partition(owned: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    ident = await running(owned, attempt=1, lease_expires=T0)
    r = Reaper(owned, lambda: [(P, EPOCH), (P, EPOCH)], lambda: None, clock=clock)
    calls = 0
    real = r.port.reap_candidates

    async def flaky(*a: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("poisoned partition")
        return await real(*a, **kw)

    r.port.reap_candidates = flaky  # type: ignore[method-assign]
    clock.advance(1)
    await r.round()
    assert r.failures == 1 and (await row(owned, ident))["state"] == "queued"


async def test_a_round_opens_a_fenced_transaction_only_for_partitions_with_work(owned: PgStore) -> None:
    clock = FakeClock(start_ts=(T0 + timedelta(minutes=5)).timestamp())
    port = owned.dispatch
    assert await port.reap_due_partitions([P, P + 1], clock.now()) == set()
    await running(owned, attempt=1, lease_expires=T0 + timedelta(hours=1))  # healthy: nothing to do
    assert await port.reap_due_partitions([P, P + 1], clock.now()) == set()
    lapsed = await running(owned, attempt=1, lease_expires=T0)
    timed_out = await running(owned, attempt=1, timeout_s=60.0)
    assert await port.reap_due_partitions([P, P + 1], clock.now()) == {P}
    assert await port.reap_due_partitions([P + 1], clock.now()) == set()  # only the partitions asked about
    r = reaper(owned, clock)
    await r.round()
    assert r.reaped == 2
    assert {(await row(owned, i))["state"] for i in (lapsed, timed_out)} <= {"queued", "retry_scheduled"}
    assert await port.reap_due_partitions([P], clock.now()) == set()
