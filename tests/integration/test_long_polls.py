"""Waiting lease calls against a real PostgreSQL on a FakeClock (issue 48 item 7): a tenant's and
a worker's long polls are capped per node (RESOURCE_EXHAUSTED past the cap, another tenant
unaffected), and a wake or a fallback poll makes one call of a scope claim, not all of them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.errors import ResourceExhausted, Unauthenticated
from cronwheel.limits import ANSWER_ROWS_BYTES, MAX_POLLS_PER_TENANT, MAX_POLLS_PER_WORKER
from cronwheel.storage import PgStore

from .test_claim_limits import T0, backlog, sql

pytestmark = pytest.mark.integration


def counting(d: Dispatcher) -> list[int]:
    """Count the claims `d` sends (each begins with the tenant locks)."""
    claims = [0]
    lock = d.port.lock_claim_tenants

    async def counted(*a: Any, **kw: Any) -> Any:
        claims[0] += 1
        return await lock(*a, **kw)

    d.port.lock_claim_tenants = counted  # type: ignore[method-assign]
    return claims


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_tenant_opening_5000_long_polls_is_refused_past_its_cap(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    calls = [asyncio.create_task(d.lease(f"w{i}", [], 10, 30.0, 30.0, tenant="flood")) for i in range(5000)]
    await asyncio.wait_for(clock.until_asleep(MAX_POLLS_PER_TENANT), 60)  # the admitted ones wait
    done = [c for c in calls if c.done()]
    assert len(done) == 5000 - MAX_POLLS_PER_TENANT
    for c in done:
        exc = c.exception()
        assert isinstance(exc, ResourceExhausted) and str(exc).startswith("max_polls_per_tenant: tenant flood")
    # another tenant is not held by the flood: its call waits and takes its run
    other = asyncio.create_task(d.lease("b", [], 10, 30.0, 30.0, tenant="other"))
    await asyncio.wait_for(clock.until_asleep(MAX_POLLS_PER_TENANT + 1), 10)
    await backlog(store, "other", 1)
    d.wake()
    [run] = await asyncio.wait_for(other, 10)
    assert run.tenant == "other"
    await cancel_all([c for c in calls if not c.done()])
    # a call that ended frees its place
    again = asyncio.create_task(d.lease("w0", [], 10, 30.0, 30.0, tenant="flood"))
    await asyncio.wait_for(clock.until_asleep(1), 10)
    await cancel_all([again])


async def test_a_worker_past_its_cap_of_waiting_calls_is_refused_naming_it(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    calls = [asyncio.create_task(d.lease("w", [], 10, 30.0, 30.0, tenant="t")) for _ in range(MAX_POLLS_PER_WORKER)]
    await asyncio.wait_for(clock.until_asleep(MAX_POLLS_PER_WORKER), 30)
    with pytest.raises(ResourceExhausted, match="^max_polls_per_worker: worker 'w'"):
        await d.lease("w", [], 10, 30.0, 30.0, tenant="t")
    assert len(await d.lease("w", [], 10, 30.0, 0.0, tenant="t")) == 0  # a call that does not wait is served
    await cancel_all(calls)


async def test_a_wake_makes_one_waiting_call_of_a_scope_claim_not_every_one(store: PgStore) -> None:
    """Before, each wake made all 50 calls claim one after another on the claim connection."""
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    claims = counting(d)
    calls = [asyncio.create_task(d.lease(f"w{i}", [], 10, 30.0, 30.0, tenant="a")) for i in range(50)]
    await asyncio.wait_for(clock.until_asleep(50), 30)
    assert claims[0] == 50  # each call's first claim
    await backlog(store, "a", 3)
    d.wake()
    [done], _ = await asyncio.wait(calls, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert done is calls[0] and len(done.result()) == 3  # the oldest took them all
    await asyncio.wait_for(clock.until_asleep(49), 10)
    assert claims[0] == 51  # its answer was not full: nobody else woken
    await cancel_all(calls)


async def test_a_wake_makes_no_claim_for_a_tenant_whose_waiting_calls_found_no_queued_work(store: PgStore) -> None:
    """bench.long_polls: a tenant's calls wait for a job type never submitted. Before, every wake
    for another tenant's runs made that tenant's oldest call claim too, on the node's one claim
    connection, often ahead of the claim that had work. Now one read of the tenants with
    queued work decides which idle scopes claim; a scope that had no work still claims at once
    when its tenant gets some."""
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    claims = counting(d)
    flood = [asyncio.create_task(d.lease(f"f{i}", ["lp.flood"], 1, 30.0, 30.0, tenant="flood")) for i in range(20)]
    other = asyncio.create_task(d.lease("b", [], 10, 30.0, 30.0, tenant="other"))
    await asyncio.wait_for(clock.until_asleep(21), 30)
    assert claims[0] == 21  # each call's first claim: none found queued work
    await backlog(store, "other", 1)
    d.wake()
    [run] = await asyncio.wait_for(other, 10)
    assert run.tenant == "other" and claims[0] == 22  # the other tenant's claim only
    await backlog(store, "flood", 1)
    await sql(store, "UPDATE executions SET type = 'lp.flood' WHERE tenant = 'flood'")
    d.wake()
    done, _ = await asyncio.wait(flood, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert [t.result()[0].tenant for t in done] == ["flood"] and claims[0] == 23
    await cancel_all(flood)


async def test_a_full_answer_wakes_the_next_call_of_its_scope(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    calls = [asyncio.create_task(d.lease(f"w{i}", [], 2, 30.0, 30.0, tenant="a")) for i in range(5)]
    await asyncio.wait_for(clock.until_asleep(5), 30)
    await backlog(store, "a", 5)
    d.wake()
    got = await asyncio.wait_for(asyncio.gather(*calls[:3]), 10)  # 2 + 2 + 1, by the chain
    assert [len(g) for g in got] == [2, 2, 1]
    await asyncio.wait_for(clock.until_asleep(2), 10)
    await cancel_all(calls[3:])


async def test_at_the_fallback_poll_only_the_oldest_call_of_a_scope_with_queued_work_claims(store: PgStore) -> None:
    """The fallback poll covers missed notifications. A tenant whose calls found no queued work
    does not claim at it either: one read of the tenants with queued work, for every such
    tenant, and the oldest call of a scope whose tenant has some claims (before, each scope's
    oldest claimed every second, on the claim connection, whatever it had found)."""
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    claims = counting(d)
    reads = [0]
    read = d.port.queued_tenant_names

    async def counted_read() -> set[str]:
        reads[0] += 1
        return await read()

    d.port.queued_tenant_names = counted_read  # type: ignore[method-assign]
    calls = [asyncio.create_task(d.lease(f"w{i}", [], 10, 30.0, 30.0, tenant="a")) for i in range(20)]
    calls.append(asyncio.create_task(d.lease("b", [], 10, 30.0, 30.0, tenant="b")))
    await asyncio.wait_for(clock.until_asleep(21), 30)
    assert claims[0] == 21
    clock.advance(1.0)  # the fallback poll: nothing queued, so one read and no claim
    await asyncio.wait_for(_until(lambda: reads[0] == 1 and d._idle_read is None), 10)
    await asyncio.wait_for(clock.until_asleep(21), 10)
    assert claims[0] == 21
    await backlog(store, "b", 1)  # queued without a wake: a missed notification
    clock.advance(1.0)
    [run] = await asyncio.wait_for(calls[-1], 10)
    assert run.tenant == "b" and claims[0] == 22 and reads[0] == 2  # the oldest of tenant b's scope only
    await cancel_all(calls)


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_a_waiting_call_whose_credentials_are_revoked_ends_at_the_next_recheck_and_claims_nothing(
        store: PgStore) -> None:
    """recheck() is what the node runs after each refresh of its token list (about every
    second): a refused call ends at once, though it is not the oldest and nothing woke it."""
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    claims = counting(d)
    revoked = False

    def still_allowed() -> None:
        if revoked:
            raise Unauthenticated("unknown token")

    head = asyncio.create_task(d.lease("w0", [], 10, 30.0, 30.0, tenant="a"))
    second = asyncio.create_task(d.lease_held("w1", [], 10, 30.0, 30.0, tenant="a", still_allowed=still_allowed))
    await asyncio.wait_for(clock.until_asleep(2), 10)
    d.recheck()
    assert not second.done()
    revoked = True
    d.recheck()
    with pytest.raises(Unauthenticated):
        await asyncio.wait_for(second, 10)
    await backlog(store, "a", 1)
    clock.advance(1.0)  # the fallback poll: the oldest call claims
    [run] = await asyncio.wait_for(head, 10)
    assert run.tenant == "a" and claims[0] == 3


async def test_the_next_call_takes_over_the_fallback_poll_when_the_oldest_leaves(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    claims = counting(d)
    first = asyncio.create_task(d.lease("w0", [], 10, 30.0, 5.0, tenant="a"))
    second = asyncio.create_task(d.lease("w1", [], 10, 30.0, 30.0, tenant="a"))
    await asyncio.wait_for(clock.until_asleep(2), 10)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(clock.until_asleep(1), 10)
    assert claims[0] == 2  # promoted, not woken: no claim now
    await backlog(store, "a", 1)
    clock.advance(1.0)
    [run] = await asyncio.wait_for(second, 10)
    assert run.tenant == "a" and claims[0] == 3


async def test_a_lease_of_runs_with_1_mib_checkpoints_leases_what_fits_in_the_byte_cap_and_leaves_the_rest_queued(
        store: PgStore) -> None:
    """An answer of 10 such runs would be 10 MiB (1,000 of them 1 GiB): the claim leases the ones
    whose payloads and checkpoints fit in ANSWER_ROWS_BYTES (at least one), the rest stay queued."""
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    await backlog(store, "big", 10)
    async with store.connection() as conn:
        await conn.execute("UPDATE executions SET checkpoint = jsonb_build_object('blob', repeat('x', %s))",
                           (1024 * 1024,))
    first = await d.lease("w", [], 10, 30.0, 0.0)
    assert len(first) == ANSWER_ROWS_BYTES // (1024 * 1024 + 64)
    assert sum(len(r.payload) + len(r.checkpoint or "") for r in first) <= ANSWER_ROWS_BYTES
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FILTER (WHERE state = 'queued'), "
                                 "count(*) FILTER (WHERE state = 'running') FROM executions")
        assert await cur.fetchone() == (10 - len(first), len(first))
    leased = len(first)
    while leased < 10:
        got = await d.lease("w", [], 10, 30.0, 0.0)
        assert got
        leased += len(got)
