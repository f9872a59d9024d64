"""The claim statement's limits against a real PostgreSQL on a FakeClock (issue 18 item 3): a
tenant's token bucket is spent in the claim (a claim takes at most floor(tokens), concurrent
claimers never both spend the last token), backlogged tenants share starts by weight, and a
concurrency key never has more than its limit running while other keys and key-less runs go on."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.cluster.dispatch.policy import PRIORITIES
from cronwheel.storage import PgStore, StoreConfig

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def sql(store: PgStore, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
    async with store.connection() as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def tenant(store: PgStore, name: str, *, rate: float | None = None, burst: float | None = None,
                 weight: int = 1, max_concurrency: int = 1000) -> None:
    await sql(store, "INSERT INTO tenants (id, rate_per_s, burst, weight, max_concurrency) VALUES (%s, %s, %s, %s, %s)",
              (name, rate, burst, weight, max_concurrency))


async def backlog(store: PgStore, name: str, n: int, *, key: str | None = None, limit: int | None = None,
                  at: datetime = T0, priority: str = "default") -> None:
    """n queued runs of tenant `name`, due at `at` (one statement), run_at a microsecond apart."""
    await sql(store, """
        INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger,
                                concurrency_key, concurrency_limit, priority)
        SELECT cronwheel_uuid7(), %(t)s, 'job', g %% 8, %(at)s, %(at)s - (%(n)s - g) * interval '1 microsecond',
               'queued', 'submit', %(key)s, %(limit)s, %(priority)s
          FROM generate_series(1, %(n)s) g""", {"t": name, "n": n, "key": key, "limit": limit, "at": at,
                                              "priority": priority})


async def finish_all(store: PgStore, ids: list[str]) -> None:
    await sql(store, "UPDATE executions SET state = 'succeeded', lease_owner = NULL WHERE id = ANY(%s::uuid[])",
              (ids,))


def dispatcher(store: PgStore, clock: FakeClock) -> Dispatcher:
    return Dispatcher(store, clock)


async def test_a_claim_takes_at_most_the_whole_tokens_of_a_rate_limited_tenants_bucket(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "r", rate=10, burst=5)
    await backlog(store, "r", 100)
    d = dispatcher(store, clock)
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 5  # a full bucket: burst
    assert await d.lease("w", [], 100, 30.0, 0.0) == []  # spent; no time has passed
    clock.advance(0.35)  # 3.5 tokens refilled
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 3
    clock.advance(0.05)  # 0.5 left + 0.5: one whole token
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 1
    clock.advance(60)  # refills to the bucket's size, not beyond
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 5


async def test_no_rate_limit_is_a_null_rate_and_the_default_of_a_new_tenant(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await sql(store, "INSERT INTO tenants (id) VALUES ('u')")
    assert await sql(store, "SELECT rate_per_s, burst FROM tenants WHERE id = 'u'") == [(None, None)]
    await backlog(store, "u", 250)
    d = dispatcher(store, clock)
    got = [len(await d.lease("w", [], 100, 30.0, 0.0)) for _ in range(3)]
    assert got == [100, 100, 50]


async def test_a_burst_of_null_is_one_seconds_worth_of_the_rate(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "r", rate=20)
    await backlog(store, "r", 100)
    assert len(await dispatcher(store, clock).lease("w", [], 100, 30.0, 0.0)) == 20


async def test_concurrent_claimers_on_several_connections_never_spend_more_than_the_bucket(dsn: str) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    stores = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2)) for _ in range(6)]
    for s in stores:
        await s.open()
    try:
        await tenant(stores[0], "r", rate=1, burst=7)
        await backlog(stores[0], "r", 100)
        # Six dispatchers (six nodes' worth: each its own pool, its own per-node claim lock),
        # each claiming twice at the same instant.
        ds = [dispatcher(s, clock) for s in stores]
        got = await asyncio.gather(*(d.lease(f"w{i}", [], 100, 30.0, 0.0) for i, d in enumerate(ds * 2)))
        assert sum(len(g) for g in got) == 7
        running = await sql(stores[0], "SELECT count(*) FROM executions WHERE state = 'running'")
        assert running == [(7,)]
    finally:
        for s in stores:
            await s.close()


async def claim_wait(store: PgStore, clock: FakeClock, tenant: str | None = None) -> float | None:
    async with store.transaction() as conn:
        return await store.dispatch.claim_wait(conn, tenant, clock.now(), PRIORITIES)


async def test_the_claim_wait_says_when_the_next_whole_token_is_due(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "r", rate=4, burst=2)
    await backlog(store, "r", 10)
    d = dispatcher(store, clock)
    assert await claim_wait(store, clock) is None  # a full bucket waits for nothing
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 2
    assert await claim_wait(store, clock) == pytest.approx(0.25)
    clock.advance(0.1)
    assert await claim_wait(store, clock) == pytest.approx(0.15)
    assert await claim_wait(store, clock, "other") is None


async def test_a_run_queued_ahead_of_its_run_at_is_claimed_at_it_and_not_before(store: PgStore) -> None:
    """A delayed one-off job is queued queue_ahead_s before its run_at (FiringConfig): no claim
    takes it sooner, the claim wait says when it comes due (per tenant, the soonest of every
    priority), and a waiting lease call returns with it at its run_at, not at the fallback poll
    (1 s). Fails without the change (no wait for a run_at: the call waits for the poll)."""
    clock = FakeClock(start_ts=T0.timestamp())
    await backlog(store, "a", 3, at=T0 + timedelta(seconds=0.6))
    await backlog(store, "b", 2, at=T0 + timedelta(seconds=0.3), priority="bulk")
    d = dispatcher(store, clock)
    assert await d.lease("w", [], 100, 30.0, 0.0) == []
    assert await claim_wait(store, clock) == pytest.approx(0.3, abs=1e-3)
    assert await claim_wait(store, clock, "a") == pytest.approx(0.6, abs=1e-3)
    assert await claim_wait(store, clock, "other") is None
    waiting = asyncio.create_task(d.lease("w", [], 100, 30.0, 30.0, tenant="a"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.advance(0.3)  # b's runs are due, not a's: a's call stays waiting
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.advance(0.3)
    got = await asyncio.wait_for(waiting, 5)
    assert len(got) == 3 and clock.monotonic() - T0.timestamp() < 0.9


async def test_a_waiting_lease_of_a_rate_limited_tenant_returns_at_its_next_token(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "r", rate=10, burst=1)
    await backlog(store, "r", 10)
    d = Dispatcher(store, clock)
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 1
    waiting = asyncio.create_task(d.lease("w", [], 100, 30.0, 30.0))  # fallback poll: 1 s
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.advance(0.1)  # the next token
    got = await asyncio.wait_for(waiting, 5)
    assert len(got) == 1 and clock.monotonic() - T0.timestamp() < 0.5


async def test_a_call_waiting_with_nothing_queued_is_woken_when_runs_queued_ahead_come_due(store: PgStore) -> None:
    """wake_at: runs queued ahead of their run_at are announced with it; a call waiting with
    nothing queued (its next claim at the fallback poll, 1 s) claims them at that instant, not at
    the poll, and is not woken before it. Fails if wake_at wakes now, or never (then the call
    returns at the poll)."""
    clock = FakeClock(start_ts=T0.timestamp())
    d = dispatcher(store, clock)
    waiting = asyncio.create_task(d.lease("w", [], 100, 30.0, 30.0))
    await clock.until_asleep()  # claimed nothing, nothing queued: waits for the fallback poll
    await backlog(store, "a", 4, at=T0 + timedelta(seconds=0.5))
    d.wake_at((T0 + timedelta(seconds=0.5)).timestamp())
    # the call still asleep, beside the timer until 0.5 s (woken now, the call would have claimed
    # nothing and slept again alone: no timer)
    await asyncio.wait_for(clock.until_asleep(2), 5)
    clock.advance(0.3)
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.advance(0.2)
    got = await asyncio.wait_for(waiting, 5)
    assert len(got) == 4 and clock.monotonic() - T0.timestamp() < 0.9


async def test_backlogged_tenants_with_weights_3_and_1_get_starts_3_to_1(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "a", weight=3)
    await tenant(store, "b", weight=1)
    await backlog(store, "a", 1000)
    await backlog(store, "b", 1000)
    d = dispatcher(store, clock)
    starts: Counter[str] = Counter()
    for _ in range(40):  # workers take 10 at a time, finishing what they took
        got = await d.lease("w", [], 10, 30.0, 0.0)
        starts.update(r.tenant for r in got)
        await finish_all(store, [r.id for r in got])
        clock.advance(0.01)
    assert starts["a"] + starts["b"] == 400
    assert starts["a"] / starts["b"] == pytest.approx(3.0, rel=0.03)


async def test_fair_share_holds_across_claims_of_one_run_each(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    for name, w in (("a", 5), ("b", 2), ("c", 1)):
        await tenant(store, name, weight=w)
        await backlog(store, name, 500)
    d = dispatcher(store, clock)
    starts: Counter[str] = Counter()
    for _ in range(400):
        got = await d.lease("w", [], 1, 30.0, 0.0)
        starts.update(r.tenant for r in got)
        clock.advance(0.002)
    assert starts["a"] == pytest.approx(250, abs=2) and starts["b"] == pytest.approx(100, abs=2)
    assert starts["c"] == pytest.approx(50, abs=2)


async def test_a_tenant_back_from_idle_gets_its_share_not_the_time_it_was_away(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "a")
    await tenant(store, "b")
    await backlog(store, "a", 3000)
    d = dispatcher(store, clock)
    for _ in range(100):  # a alone for 10 s
        got = await d.lease("w", [], 10, 30.0, 0.0)
        await finish_all(store, [r.id for r in got])
        clock.advance(0.1)
    await backlog(store, "b", 3000, at=clock.now())
    first: Counter[str] = Counter()
    then: Counter[str] = Counter()
    for i in range(100):
        got = await d.lease("w", [], 10, 30.0, 0.0)
        (first if i < 20 else then).update(r.tenant for r in got)
        await finish_all(store, [r.id for r in got])
        clock.advance(0.1)
    # b's head start is bounded by one FAIR_SHARE_TAU_S (1 s) of the whole rate (100 starts/s),
    # not the 10 s it was away; from then on they share 1:1.
    assert 0 < first["b"] - first["a"] <= 100
    assert then["a"] / then["b"] == pytest.approx(1.0, rel=0.05)


async def test_a_concurrency_key_never_has_more_than_its_limit_running_while_others_run(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await backlog(store, "t", 50, key="customer:42", limit=2)
    await backlog(store, "t", 20, key="customer:7", limit=5)
    await backlog(store, "t", 30)
    d = dispatcher(store, clock)
    got = await d.lease("w", [], 100, 30.0, 0.0)
    by_key = Counter(await sql(store, "SELECT concurrency_key FROM executions WHERE id = ANY(%s::uuid[])",
                               ([r.id for r in got],)))
    assert by_key == {("customer:42",): 2, ("customer:7",): 5, (None,): 30}
    assert await d.lease("w", [], 100, 30.0, 0.0) == []  # both keys full, nothing else queued
    one = await sql(store, "SELECT id::text FROM executions WHERE state = 'running' AND concurrency_key = 'customer:42'"
                           " LIMIT 1")
    await finish_all(store, [one[0][0]])
    [again] = await d.lease("w", [], 100, 30.0, 0.0)
    assert await sql(store, "SELECT concurrency_key FROM executions WHERE id = %s::uuid", (again.id,)) == [
        ("customer:42",)]


async def test_a_full_key_with_a_long_backlog_does_not_hide_the_tenants_other_runs(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await backlog(store, "t", 500, key="hot", limit=1)  # older than everything else
    await backlog(store, "t", 5, at=T0 + timedelta(seconds=1))
    clock.advance(2)
    d = dispatcher(store, clock)
    # The first claim's window (100 rows) fills with the key's runs while it has a free slot:
    # one of them starts.
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 1
    # Now the key is full, its 499 queued runs are passed over where they are read.
    assert len(await d.lease("w", [], 100, 30.0, 0.0)) == 5


async def test_concurrency_key_and_limit_go_together(dsn: str) -> None:
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.CheckViolation):
        c.execute("INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, concurrency_key)"
                  " VALUES (gen_random_uuid(), 't', 'j', 0, now(), now(), 'queued', 'k')")


async def test_a_tenant_with_no_work_of_the_workers_types_does_not_take_their_claims(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "idle-types", weight=1)
    await sql(store, """INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)
                        SELECT cronwheel_uuid7(), 'idle-types', 'other', 0, %(at)s, %(at)s, 'queued', 'submit'
                          FROM generate_series(1, 500)""", {"at": T0})
    for name in ("a", "b", "c"):
        await tenant(store, name, weight=1)
        await backlog(store, name, 2000)
    d = dispatcher(store, clock)
    for _ in range(20):  # a, b and c run up their served counts; idle-types' stays 0
        got = await d.lease("w", ["job"], 100, 30.0, 0.0)
        await finish_all(store, [r.id for r in got])
        clock.advance(0.05)
    got = await d.lease("w", ["job"], 100, 30.0, 0.0)
    assert len(got) >= 75  # at most idle-types' weight part (1 of 4) of the read goes unused


async def test_critical_runs_of_any_tenant_go_before_default_ones_in_a_claim(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "a", weight=5)
    await tenant(store, "b", weight=1)
    await backlog(store, "a", 300)  # default priority
    await sql(store, """INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger,
                                                priority)
                        SELECT cronwheel_uuid7(), 'b', 'job', 0, %(at)s, %(at)s, 'queued', 'submit', 'critical'
                          FROM generate_series(1, 60)""", {"at": T0})
    class CriticalFirst(random.Random):
        def random(self) -> float:
            return 0.0  # the priority draw (weights 16:4:1) puts critical first

    d = Dispatcher(store, clock, rng=CriticalFirst())
    got = await d.lease("w", [], 100, 30.0, 0.0)
    assert Counter(r.priority for r in got) == {"critical": 60, "default": 40}


FINISHES = {  # every way a worker ends a run through the node: each frees a slot of its tenant
    "complete_many": lambda d, r: d.complete_many("w", [(uuid.UUID(r.id), r.fencing_token, "{}")]),
    "complete": lambda d, r: d.complete(uuid.UUID(r.id), r.fencing_token, "w", "{}"),
    "fail": lambda d, r: d.fail(uuid.UUID(r.id), r.fencing_token, "w", "boom", False, "boom"),
}


@pytest.mark.parametrize("finish", sorted(FINISHES))
async def test_a_lease_waiting_on_a_tenant_at_its_cap_is_woken_when_one_of_its_runs_ends(
        store: PgStore, finish: str) -> None:
    """The CI failure of stop 30 (tests/e2e/test_dispatch.py, a critical run 1.02 s late): a
    worker's next lease call reached the node before its completion did, found the tenant at its
    cap and slept until the fallback poll (1 s), because nothing woke it when the run ended."""
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "capped", max_concurrency=1)
    await backlog(store, "capped", 3)
    d = dispatcher(store, clock)
    [first] = await d.lease("w", [], 10, 30.0, 0.0)
    waiting = asyncio.create_task(d.lease("w", [], 10, 30.0, 30.0))
    await clock.until_asleep(1)  # claimed nothing: the tenant is at its cap
    await FINISHES[finish](d, first)
    [second] = await asyncio.wait_for(waiting, 10)  # the clock did not move: no fallback poll
    assert second.id != first.id and clock.monotonic() == FakeClock().monotonic()


async def test_one_ended_run_wakes_one_waiting_lease_of_its_tenant_not_every_one(store: PgStore) -> None:
    """A freed slot can go to one call only: waking them all would run their claims one after
    another for nothing. A call scoped to another tenant is not the one woken."""
    clock = FakeClock(start_ts=T0.timestamp())
    await tenant(store, "capped", max_concurrency=1)
    await backlog(store, "capped", 5)
    await tenant(store, "other", max_concurrency=1)
    await backlog(store, "other", 2)
    d = dispatcher(store, clock)
    [held] = await d.lease("w", [], 10, 30.0, 0.0, tenant="capped")
    [_other] = await d.lease("w", [], 10, 30.0, 0.0, tenant="other")
    claims = 0
    lock = d.port.lock_claim_tenants

    async def counted(*a: Any, **kw: Any) -> Any:
        nonlocal claims
        claims += 1
        return await lock(*a, **kw)

    d.port.lock_claim_tenants = counted  # type: ignore[method-assign]
    scoped_other = asyncio.create_task(d.lease("w", [], 10, 30.0, 30.0, tenant="other"))
    await clock.until_asleep(1)
    calls = [asyncio.create_task(d.lease("w", [], 10, 30.0, 30.0, tenant="capped")) for _ in range(3)]
    await clock.until_asleep(4)
    assert claims == 4
    await d.complete(uuid.UUID(held.id), held.fencing_token, "w", "{}")
    [done], _ = await asyncio.wait(calls, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert done is calls[0] and len(done.result()) == 1  # the oldest waiting call of the tenant
    await clock.until_asleep(3)
    assert claims == 5 and not scoped_other.done() and not any(c.done() for c in calls[1:])
    for c in (scoped_other, *calls[1:]):
        c.cancel()
