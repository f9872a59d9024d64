"""Child schedules against a real PostgreSQL (issue 52, item 1, Dkron's parent and child jobs): a
child has no cron of its own and runs once per successful run of its parent, with the parent run's
scheduled time, created in the parent run's completion transaction."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands import schedules as sch
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.errors import InvalidArgument
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.storage.dispatch import Completion

from .conftest import TEST_PARTITIONS as P
from .execution_rows import insert_execution
from .wire import WireCounter

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def spec(**kw: Any) -> sch.ScheduleSpec:
    base: dict[str, Any] = dict(tenant="acme", name="parent", cron="* * * * *", timezone="UTC", job_type="extract",
                                misfire_policy="skip")
    return sch.ScheduleSpec(**{**base, **kw})


async def family(store: PgStore) -> tuple[uuid.UUID, uuid.UUID]:
    parent = await sch.create_schedule(store, spec(), T0, P)
    child = await sch.create_schedule(store, spec(name="child", cron="", timezone="", misfire_policy=None,
                                                  job_type="load", parent_schedule_id=parent["id"]), T0, P)
    assert (child["parent_schedule_id"], child["next_run_at"], child["cron"]) == (parent["id"], None, "")
    return parent["id"], child["id"]


async def parent_run(store: PgStore, sid: uuid.UUID, tick: datetime) -> uuid.UUID:
    return await insert_execution(store, tenant="acme", type="extract", schedule_id=sid, partition=1,
                                  scheduled_for=tick, run_at=T0, state="queued", trigger="cron", max_attempts=1)


async def child_runs(store: PgStore, sid: uuid.UUID) -> list[tuple[Any, ...]]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT scheduled_for, state, trigger, type FROM executions WHERE schedule_id = %s"
                                 " ORDER BY scheduled_for", (sid,))
        return list(await cur.fetchall())


async def test_a_child_runs_once_per_successful_parent_run_with_its_scheduled_time(store: PgStore) -> None:
    parent, child = await family(store)
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    ok, bad = await parent_run(store, parent, T0), await parent_run(store, parent, T0 + MINUTE)
    leased = {uuid.UUID(r.id): r for r in await d.lease("w", ["extract"], 10, 30.0, 0.0)}
    assert (await d.complete(ok, leased[ok].fencing_token, "w", "{}")).state == "succeeded"
    await d.fail(bad, leased[bad].fencing_token, "w", "boom", True, "Boom")  # dead: no child run
    await d.complete(ok, leased[ok].fencing_token, "w", "{}")  # a repeated completion creates nothing
    assert await child_runs(store, child) == [(T0, "queued", "parent", "load")]


async def test_a_parent_completion_that_does_not_commit_creates_no_child_run_and_its_retry_one(
        store: PgStore) -> None:
    parent, child = await family(store)
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    run = await parent_run(store, parent, T0)
    [lease] = await d.lease("w", ["extract"], 1, 30.0, 0.0)

    class Crash(Exception):
        pass

    with pytest.raises(Crash):
        async with store.transaction() as conn:
            await store.dispatch.complete_batch(conn, "w", None, [Completion(run, lease.fencing_token, {})],
                                                clock.now())
            await (await store.dispatch.release_children(conn, [run], clock.now())).result()
            raise Crash
    assert await child_runs(store, child) == []
    await d.complete_many("w", [(run, lease.fencing_token, "{}")])
    await d.complete_many("w", [(run, lease.fencing_token, "{}")])
    assert await child_runs(store, child) == [(T0, "queued", "parent", "load")]


async def test_a_paused_child_does_not_run_and_a_grandchild_follows_its_child(store: PgStore) -> None:
    parent, child = await family(store)
    grand = (await sch.create_schedule(store, spec(name="grand", cron="", job_type="report",
                                                   parent_schedule_id=child), T0, P))["id"]
    clock = FakeClock(start_ts=T0.timestamp())
    d = Dispatcher(store, clock)
    await sch.set_paused(store, child, True, T0, "acme")
    run = await parent_run(store, parent, T0)
    [lease] = await d.lease("w", ["extract"], 1, 30.0, 0.0)
    await d.complete(run, lease.fencing_token, "w", "{}")
    assert await child_runs(store, child) == []
    await sch.set_paused(store, child, False, T0, "acme")
    assert (await sch.get_schedule(store, child, "acme"))["next_run_at"] is None  # resumed: still no ticks
    run = await parent_run(store, parent, T0 + MINUTE)
    [lease] = await d.lease("w", ["extract"], 1, 30.0, 0.0)
    await d.complete(run, lease.fencing_token, "w", "{}")
    [(_t, _s, _trig, _type)] = await child_runs(store, child)
    [lease] = await d.lease("w", ["load"], 1, 30.0, 0.0)
    await d.complete(uuid.UUID(lease.id), lease.fencing_token, "w", "{}")
    assert await child_runs(store, grand) == [(T0 + MINUTE, "queued", "parent", "report")]


async def test_a_success_sends_release_children_only_for_a_schedule_with_children(dsn: str) -> None:
    """The single Complete is the hot path: a cron run of a schedule without children (nearly
    all of them) costs no release_children statement (one round trip: the transaction is not
    pipelined); the schedule's dead man's switch statement says whether it has any. Read on the
    wire. Fails without the change (the same number of statements either way)."""
    async with WireCounter(dsn) as wire, PgStore(StoreConfig(dsn=wire.dsn, min_connections=1,
                                                             max_connections=2)) as store:
        parent, child = await family(store)
        lone = (await sch.create_schedule(store, spec(name="lone"), T0, P))["id"]
        d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
        sent = {}
        for sid in (lone, parent):
            run = await parent_run(store, sid, T0)
            [lease] = await d.lease("w", ["extract"], 1, 30.0, 0.0)
            wire.reset()
            assert (await d.complete(run, lease.fencing_token, "w", "{}")).state == "succeeded"
            sent[sid] = wire.marks.count("E")
        assert sent[lone] == sent[parent] - 1, sent
        assert await child_runs(store, child) == [(T0, "queued", "parent", "load")]
        assert await child_runs(store, lone) == [(T0, "succeeded", "cron", "extract")]


async def test_bad_child_schedules_are_refused_naming_the_field(store: PgStore) -> None:
    parent, child = await family(store)
    cases = [
        (spec(name="c2", parent_schedule_id=parent), "cron"),  # a cron of its own
        (spec(name="c3", cron="", parent_schedule_id=uuid.uuid4()), "parent_schedule_id"),
        (spec(name="c4", cron="", tenant="other", parent_schedule_id=parent), "parent_schedule_id"),
    ]
    for bad, field in cases:
        with pytest.raises(InvalidArgument) as ei:
            await sch.create_schedule(store, bad, T0, P)
        assert ei.value.field == field
    with pytest.raises(InvalidArgument) as ei:
        await sch.update_schedule(store, child, {"parent_schedule_id": None}, T0, "acme")
    assert ei.value.field == "update_mask"
    with pytest.raises(InvalidArgument) as ei:
        await sch.update_schedule(store, child, {"cron": "* * * * *"}, T0, "acme")
    assert ei.value.field == "cron"
    with pytest.raises(InvalidArgument) as ei:
        await runs.backfill_schedule(store, child, T0 - 10 * MINUTE, T0, T0, "acme")
    assert ei.value.field == "cron"
    assert (await sch.update_schedule(store, child, {"job_type": "load2"}, T0, "acme"))["job_type"] == "load2"


async def test_a_child_run_waits_in_the_child_schedules_queue_for_its_capabilities(store: PgStore) -> None:
    """A schedule's runs get its queue and required capabilities (0025), a child's too: its run is
    made by release_children, not by the fire path (before this, it landed in `default` with no
    requirement, so any worker could take it)."""
    parent = await sch.create_schedule(store, spec(), T0, P)
    child = await sch.create_schedule(store, spec(name="child", cron="", timezone="", misfire_policy=None,
                                                  job_type="load", parent_schedule_id=parent["id"], queue="long",
                                                  required_capabilities=("gpu=a100",)), T0, P)
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    run = await parent_run(store, parent["id"], T0)
    [lease] = await d.lease("w", ["extract"], 1, 30.0, 0.0)
    assert (await d.complete(run, lease.fencing_token, "w", "{}")).state == "succeeded"
    async with store.connection() as conn:
        cur = await conn.execute("SELECT queue, required_capabilities FROM executions WHERE schedule_id = %s",
                                 (child["id"],))
        assert list(await cur.fetchall()) == [("long", "gpu=a100")]
