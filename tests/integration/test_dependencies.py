"""Job B after job A against a real PostgreSQL (issue 52, item 1): the release happens in the
transaction that finishes the upstream (a worker's Complete or Fail, a cancel), exactly once, and
retention spares an upstream that a waiting job depends on."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands.dependencies import MAX_DEPENDENCY_DEPTH
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.cluster.retention.policy import RetentionConfig
from cronwheel.cluster.retention.pruner import Pruner
from cronwheel.errors import InvalidArgument
from cronwheel.storage import PgStore
from cronwheel.storage.dispatch import Completion

from .conftest import TEST_PARTITIONS
from .execution_rows import execution_row, insert_execution

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
DEADLINE_S = 10.0


def spec(key: str, after: tuple[str, ...] = (), policy: str | None = None, attempts: int = 5,
         tenant: str = "acme") -> runs.JobSpec:
    return runs.JobSpec(tenant=tenant, type="step", idempotency_key=key, depends_on=after, dependency_policy=policy,
                        retry=runs.RetryPolicy(max_attempts=attempts))


async def submit(store: PgStore, *specs: runs.JobSpec, now: datetime = T0) -> list[uuid.UUID]:
    got = await runs.submit_jobs(store, [runs.prepare_job(s, now, TEST_PARTITIONS) for s in specs], now)
    return [r["id"] for r, _dedup in got]


async def states(store: PgStore, *ids: uuid.UUID) -> list[str]:
    return [(await execution_row(store, i))["state"] for i in ids]


async def run_one(d: Dispatcher, expect: uuid.UUID, ok: bool = True) -> None:
    """Lease everything claimable: exactly `expect`; then complete it (or fail it for good)."""
    leased = await d.lease("w1", ["step"], 10, 30.0, 0.0)
    assert [uuid.UUID(r.id) for r in leased] == [expect]
    if ok:
        assert (await d.complete(expect, leased[0].fencing_token, "w1", "{}")).state == "succeeded"
    else:
        await d.fail(expect, leased[0].fencing_token, "w1", "boom", True, "Boom")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ts=T0.timestamp())


async def test_a_chain_in_one_call_runs_in_order(store: PgStore, clock: FakeClock) -> None:
    a, b, c = await submit(store, spec("a"), spec("b", ("a",)), spec("c", ("b",)))
    assert await states(store, a, b, c) == ["queued", "waiting", "waiting"]
    d = Dispatcher(store, clock)
    await run_one(d, a)
    assert await states(store, b, c) == ["queued", "waiting"]
    await run_one(d, b)
    await run_one(d, c)
    assert await states(store, a, b, c) == ["succeeded"] * 3


async def test_a_fan_in_is_released_by_its_last_upstream_only(store: PgStore, clock: FakeClock) -> None:
    a, b, c = await submit(store, spec("a"), spec("b"), spec("c", ("a", "b")))
    d = Dispatcher(store, clock)
    leased = {uuid.UUID(r.id): r for r in await d.lease("w1", ["step"], 10, 30.0, 0.0)}
    assert set(leased) == {a, b}
    await d.complete(a, leased[a].fencing_token, "w1", "{}")
    row = await execution_row(store, c)
    assert (row["state"], row["waiting_for"]) == ("waiting", 1)
    await d.complete(b, leased[b].fencing_token, "w1", "{}")
    row = await execution_row(store, c)
    assert (row["state"], row["waiting_for"], row["queued_at"]) == ("queued", 0, clock.now())


async def test_an_upstream_that_goes_dead_cancels_its_dependents_naming_it(store: PgStore, clock: FakeClock) -> None:
    a, b, c = await submit(store, spec("a", attempts=1), spec("b", ("a",)), spec("c", ("b",)))
    d = Dispatcher(store, clock)
    await run_one(d, a, ok=False)
    rb, rc = await execution_row(store, b), await execution_row(store, c)
    assert (rb["state"], rb["state_reason"]) == ("cancelled", f"upstream {a} ended dead")
    assert (rc["state"], rc["state_reason"]) == ("cancelled", f"upstream {b} ended cancelled")
    assert rb["finished_at"] == clock.now()
    assert await d.lease("w1", ["step"], 10, 30.0, 0.0) == []


async def test_the_always_policy_runs_a_dependent_after_a_failed_upstream(store: PgStore, clock: FakeClock) -> None:
    a, b = await submit(store, spec("a", attempts=1), spec("b", ("a",), policy="always"))
    d = Dispatcher(store, clock)
    await run_one(d, a, ok=False)
    await run_one(d, b)
    [up] = await store.dependencies.upstreams_of(b)
    assert (up["upstream_id"], up["state"], up["outcome"]) == (a, "dead", "dead")


async def test_a_completion_that_does_not_commit_releases_nothing_and_its_retry_releases_once(
        store: PgStore, clock: FakeClock) -> None:
    a, b = await submit(store, spec("a"), spec("b", ("a",)))
    d = Dispatcher(store, clock)
    [lease] = await d.lease("w1", ["step"], 10, 30.0, 0.0)

    class Crash(Exception):
        pass

    with pytest.raises(Crash):  # the node dies after the completion's statement, before its COMMIT
        async with store.transaction() as conn:
            done = await store.dispatch.complete_batch(conn, "w1", None, [Completion(a, lease.fencing_token, {})],
                                                       clock.now())
            assert [x.id for x in done] == [a]
            assert (await store.dependencies.upstreams_of(b, conn))[0]["outcome"] == "succeeded"  # inside only
            raise Crash
    row = await execution_row(store, b)
    assert (row["state"], row["waiting_for"]) == ("waiting", 1), "a completion that did not commit released it"
    out = await d.complete_many("w1", [(a, lease.fencing_token, "{}")])  # the worker's retry
    assert [o.state for o in out] == ["succeeded"]  # type: ignore[union-attr]
    row = await execution_row(store, b)
    assert (row["state"], row["waiting_for"]) == ("queued", 0)
    clock.advance(1)
    again = await d.complete(a, lease.fencing_token, "w1", "{}")  # answered from the record, releases nothing
    assert again.state == "succeeded"
    [edge] = await store.dependencies.upstreams_of(b)
    assert edge["resolved_at"] == T0 and (await execution_row(store, b))["waiting_for"] == 0


async def test_two_upstreams_finishing_at_once_release_the_fan_in_exactly_once(store: PgStore, dsn: str) -> None:
    """Each finish decrements the dependent's count on its latest row version (the second waits
    for the first's row lock): neither can miss the other and leave it waiting."""
    a, b, c = await submit(store, spec("a"), spec("b"), spec("c", ("a", "b")))
    finish = "UPDATE executions SET state = 'succeeded', finished_at = %s WHERE id = %s"
    async with await psycopg.AsyncConnection.connect(dsn) as one, await psycopg.AsyncConnection.connect(dsn) as two:
        await one.execute(finish, (T0, a))
        second = asyncio.create_task(two.execute(finish, (T0, b)))
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not await waiting_on_a_row_lock(dsn):
            assert not second.done(), "the second finish did not wait for the dependent's row"
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await one.commit()
        await asyncio.wait_for(second, DEADLINE_S)
        await two.commit()
    row = await execution_row(store, c)
    assert (row["state"], row["waiting_for"]) == ("queued", 0)


async def waiting_on_a_row_lock(dsn: str) -> bool:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        cur = await c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        row = await cur.fetchone()
    return bool(row and row[0])


async def test_a_submit_racing_its_upstreams_completion_sees_it_finished(store: PgStore, dsn: str) -> None:
    """The submit locks its upstream: a completion in flight commits first, and the submit then
    reads it succeeded and releases the job at once."""
    [a] = await submit(store, spec("a"))
    async with await psycopg.AsyncConnection.connect(dsn) as done:
        await done.execute("UPDATE executions SET state = 'succeeded', finished_at = %s WHERE id = %s", (T0, a))
        sub = asyncio.create_task(submit(store, spec("b", ("a",))))
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not await waiting_on_a_row_lock(dsn):
            assert not sub.done(), "the submit did not wait for its upstream's row"
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await done.commit()
    [b] = await asyncio.wait_for(sub, DEADLINE_S)
    assert await states(store, b) == ["queued"]


async def test_upstreams_finished_before_the_submit_resolve_at_once(store: PgStore) -> None:
    ok = await insert_execution(store, tenant="acme", type="step", partition=1, scheduled_for=T0, run_at=T0,
                                state="succeeded", finished_at=T0, idempotency_key="ok")
    bad = await insert_execution(store, tenant="acme", type="step", partition=1, scheduled_for=T0, run_at=T0,
                                 state="dead", finished_at=T0)
    x, y = await submit(store, spec("x", ("ok",)), spec("y", ("ok", str(bad))))
    assert await states(store, x) == ["queued"]
    row = await execution_row(store, y)
    assert (row["state"], row["state_reason"]) == ("cancelled", f"upstream {bad} ended dead")
    assert ok != bad
    # `ok` was named by its key: x's edge is to it, resolved by the submit with its outcome
    [edge] = await store.dependencies.upstreams_of(x)
    assert (edge["upstream_id"], edge["outcome"], edge["resolved_at"]) == (ok, "succeeded", T0)
    assert sorted((e["upstream_id"], e["outcome"]) for e in await store.dependencies.upstreams_of(y)) == sorted(
        [(ok, "succeeded"), (bad, "dead")])


async def test_submit_jobs_answers_its_dependents_as_linked_like_submit_job(store: PgStore) -> None:
    """SubmitJobs answers each dependent as its submit left it (its policy, its count, and queued
    or cancelled if its upstreams had already ended), as SubmitJob does. Fails without the change:
    the batch answered the insert's rows (waiting, no policy, no count)."""
    await insert_execution(store, tenant="acme", type="step", partition=1, scheduled_for=T0, run_at=T0,
                           state="succeeded", finished_at=T0, idempotency_key="ok")
    got = await runs.submit_jobs(store, [runs.prepare_job(s, T0, TEST_PARTITIONS) for s in (
        spec("x", ("ok",)), spec("y", ("ok", "z"), policy="always"), spec("z"))], T0)
    answered = [(r["state"], r["dependency_policy"], r["waiting_for"]) for r, _dedup in got]
    assert answered == [("queued", "on_success", 0), ("waiting", "always", 1), ("queued", None, None)]
    stored = [await execution_row(store, r["id"]) for r, _dedup in got]
    assert answered == [(r["state"], r["dependency_policy"], r["waiting_for"]) for r in stored]
    row, dedup = await runs.submit_job(store, spec("w", ("ok",)), T0, TEST_PARTITIONS)
    assert (row["state"], row["dependency_policy"], row["waiting_for"], dedup) == ("queued", "on_success", 0, False)


async def test_unknown_upstreams_cycles_and_deep_chains_are_refused_and_nothing_is_stored(store: PgStore) -> None:
    cases: list[tuple[tuple[runs.JobSpec, ...], str]] = [
        ((spec("a"), spec("b", ("nope",))), "jobs[1].depends_on[0]"),
        ((spec("b", (str(uuid.uuid4()),)),), "jobs[0].depends_on[0]"),
        ((spec("a", ("b",)), spec("b", ("a",))), ".depends_on[0]"),
        ((spec("other", tenant="other"), spec("b", ("other",))), "jobs[1].depends_on[0]"),
        (tuple([spec("j0")] + [spec(f"j{i}", (f"j{i - 1}",)) for i in range(1, MAX_DEPENDENCY_DEPTH + 2)]),
         f"jobs[{MAX_DEPENDENCY_DEPTH + 1}].depends_on[0]"),
    ]
    for specs, field in cases:
        with pytest.raises(InvalidArgument) as ei:
            await submit(store, *specs)
        assert ei.value.field.endswith(field), (ei.value.field, field)
    async with store.connection() as conn:
        cur = await conn.execute("SELECT (SELECT count(*) FROM executions), (SELECT count(*) FROM execution_deps)")
        assert await cur.fetchone() == (0, 0)


async def test_a_chain_continued_across_calls_counts_its_depth(store: PgStore) -> None:
    await submit(store, *([spec("j0")] + [spec(f"j{i}", (f"j{i - 1}",)) for i in range(1, MAX_DEPENDENCY_DEPTH + 1)]))
    with pytest.raises(InvalidArgument, match="deeper") as ei:
        await runs.submit_job(store, spec("over", (f"j{MAX_DEPENDENCY_DEPTH}",)), T0, TEST_PARTITIONS)
    assert ei.value.field == "depends_on[0]"
    row, dedup = await runs.submit_job(store, spec("fine", (f"j{MAX_DEPENDENCY_DEPTH - 1}",)), T0, TEST_PARTITIONS)
    assert (row["state"], dedup) == ("waiting", False)


async def test_a_resubmitted_call_is_deduplicated_and_links_nothing_twice(store: PgStore) -> None:
    first = await submit(store, spec("a"), spec("b", ("a",)))
    again = await submit(store, spec("a"), spec("b", ("a",)))
    assert again == first
    assert (await execution_row(store, first[1]))["waiting_for"] == 1
    assert len(await store.dependencies.upstreams_of(first[1])) == 1


async def test_cancelling_an_upstream_cancels_its_dependents_and_a_waiting_job_can_be_cancelled(
        store: PgStore) -> None:
    a, b, c = await submit(store, spec("a"), spec("b", ("a",)), spec("c"))
    w, = await submit(store, spec("w", ("c",)))
    await runs.cancel_execution(store, a, T0, "acme", actor="ops")
    row = await execution_row(store, b)
    assert (row["state"], row["state_reason"]) == ("cancelled", f"upstream {a} ended cancelled")
    row, moved = await runs.cancel_execution(store, w, T0, "acme", actor="ops")
    assert moved and row["state"] == "cancelled"


async def test_retention_spares_an_upstream_that_a_waiting_job_depends_on(store: PgStore) -> None:
    p, epoch = 3, 30
    assert await store.partitions.record_epoch(p, epoch, "n1")
    old = T0 - timedelta(days=60)
    done = await insert_execution(store, tenant="acme", type="step", partition=p, scheduled_for=old, run_at=old,
                                  state="succeeded", finished_at=old, idempotency_key="done")
    gone = await insert_execution(store, tenant="acme", type="step", partition=p, scheduled_for=old, run_at=old,
                                  state="succeeded", finished_at=old)
    running = await insert_execution(store, tenant="acme", type="step", partition=p, scheduled_for=T0, run_at=T0,
                                     state="running", idempotency_key="running")
    [w] = await submit(store, spec("w", ("done", "running")))
    assert (await execution_row(store, w))["waiting_for"] == 1  # `done` had already succeeded
    pruner = Pruner(store.retention, lambda: [(p, epoch)], clock=FakeClock(start_ts=T0.timestamp()),
                    config=RetentionConfig(succeeded_s=86400.0, failed_s=86400.0))
    await pruner.drain()
    left = await ids(store)
    assert done in left and gone not in left, "retention pruned an upstream a waiting job depends on"
    async with store.connection() as conn:  # its other upstream finishes: nothing waits for `done` now
        await conn.execute("UPDATE executions SET state = 'succeeded', finished_at = %s WHERE id = %s",
                           (old, running))
    assert (await execution_row(store, w))["state"] == "queued"
    await pruner.drain()
    assert done not in await ids(store)


async def ids(store: PgStore) -> set[Any]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT id FROM executions")
        return {r[0] for r in await cur.fetchall()}
