"""Queues and capabilities in the claim statement, against a real PostgreSQL on a FakeClock
(issue 52 items 2 and 3): a worker leases only runs of the queues it names whose required
capabilities it advertises; a worker's queue slots and a tenant's queue limit are never exceeded,
also by claims racing on several nodes; queues of one tenant share its starts by weight; and the
claim reads no run that no worker of the call can take (the EXPLAIN ANALYZE test)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands import schedules as sch
from cronwheel.cluster.commands.lanes import WorkerLanes, worker_lanes
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.storage.dispatch import ClaimParams, claim_args
from cronwheel.storage.queries import q
from tests.integration.test_claim_limits import sql

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def queued(store: PgStore, tenant: str, n: int, *, queue: str = "default", caps: str = "",
                 priority: str = "default") -> None:
    """n queued runs of `tenant` in `queue` requiring `caps` (canonical), due at T0; the set
    registered first, as write_jobs does."""
    if caps:
        await store.executions.register_capability_sets([caps])
    await sql(store, """
        INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger, priority,
                                queue, required_capabilities)
        SELECT cronwheel_uuid7(), %(t)s, 'job', g %% 8, %(at)s, %(at)s - (%(n)s - g) * interval '1 microsecond',
               'queued', 'submit', %(p)s, %(q)s, %(c)s
          FROM generate_series(1, %(n)s) g""", {"t": tenant, "n": n, "at": T0, "p": priority, "q": queue, "c": caps})


async def running(store: PgStore, where: str = "true") -> Counter[tuple[str, str, str]]:
    rows = await sql(store, "SELECT tenant, queue, lease_owner FROM executions WHERE state = 'running' AND "
                     + where)  # type: ignore[operator]
    return Counter((t, qn, w) for t, qn, w in rows)


async def finish(store: PgStore, n: int, where: str) -> None:
    await sql(store, "UPDATE executions SET state = 'succeeded', lease_owner = NULL WHERE id IN (SELECT id FROM "
              "executions WHERE state = 'running' AND " + where + " LIMIT %s)", (n,))  # type: ignore[operator]


def lanes(queues: list[str], slots: dict[str, int] | None = None, caps: list[str] | None = None) -> WorkerLanes:
    return worker_lanes(queues, slots or {}, caps or [])


async def test_a_run_requiring_gpu_a100_goes_only_to_a_worker_advertising_it(store: PgStore) -> None:
    await queued(store, "t", 3, caps="gpu=a100")
    await queued(store, "t", 2, caps="gpu=a100,region=eu")
    await queued(store, "t", 4)
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    plain = await d.lease("plain", [], 100, 30.0, 0.0)
    h100 = await d.lease("h100", [], 100, 30.0, 0.0, lanes=lanes([], caps=["gpu=h100", "region=eu"]))
    a100 = await d.lease("a100", [], 100, 30.0, 0.0, lanes=lanes([], caps=["gpu=a100"]))
    both = await d.lease("a100-eu", [], 100, 30.0, 0.0, lanes=lanes([], caps=["region=eu", "gpu=a100", "x=y"]))
    assert (len(plain), len(h100), len(a100), len(both)) == (4, 0, 3, 2)
    caps = dict(await sql(store, "SELECT lease_owner, string_agg(DISTINCT required_capabilities, ';')"
                                 " FROM executions GROUP BY 1"))
    assert caps == {"plain": "", "a100": "gpu=a100", "a100-eu": "gpu=a100,region=eu"}


async def test_a_worker_leases_only_from_the_queues_it_names_and_none_names_default(store: PgStore) -> None:
    await queued(store, "t", 3, queue="long")
    await queued(store, "t", 2, queue="critical")
    await queued(store, "t", 4)
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    assert len(await d.lease("w-default", [], 100, 30.0, 0.0)) == 4
    assert len(await d.lease("w-critical", [], 100, 30.0, 0.0, lanes=lanes(["critical"]))) == 2
    assert len(await d.lease("w-long", [], 100, 30.0, 0.0, lanes=lanes(["long", "critical"]))) == 3
    assert await running(store) == Counter({("t", "default", "w-default"): 4, ("t", "critical", "w-critical"): 2,
                                            ("t", "long", "w-long"): 3})


async def test_a_worker_with_2_long_slots_never_holds_a_third_and_default_keeps_starting(store: PgStore) -> None:
    await queued(store, "t", 10, queue="long")
    await queued(store, "t", 10)
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    mine = lanes(["long", "default"], {"long": 2})
    first = await d.lease("w", [], 6, 30.0, 0.0, lanes=mine)
    assert Counter(await running(store)) == Counter({("t", "long", "w"): 2, ("t", "default", "w"): 4})
    assert len(first) == 6
    assert len(await d.lease("w", [], 100, 30.0, 0.0, lanes=mine)) == 6  # the other 6 default, no long
    assert await running(store, "queue = 'long'") == Counter({("t", "long", "w"): 2})
    assert await d.lease("w", [], 100, 30.0, 0.0, lanes=mine) == []  # 2 long held: nothing more
    other = await d.lease("w2", [], 100, 30.0, 0.0, lanes=mine)  # the cap is per worker
    assert len(other) == 2
    await finish(store, 1, "lease_owner = 'w' AND queue = 'long'")
    assert len(await d.lease("w", [], 100, 30.0, 0.0, lanes=mine)) == 1
    assert await running(store, "lease_owner = 'w' AND queue = 'long'") == Counter({("t", "long", "w"): 2})


async def test_one_workers_slots_hold_across_tenants_and_nodes_claiming_at_once(dsn: str) -> None:
    """An admin worker (every tenant) with 3 slots for `long`, its lease calls racing on six
    nodes' stores, its runs spread over six tenants: it never holds a fourth long run (its claims
    count its runs of every tenant, under its own lock besides the tenants')."""
    clock = FakeClock(start_ts=T0.timestamp())
    stores = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2)) for _ in range(6)]
    for s in stores:
        await s.open()
    try:
        for t in ("a", "b", "c", "d", "e", "f"):
            await queued(stores[0], t, 5, queue="long")
        ds = [Dispatcher(s, clock) for s in stores]
        mine = lanes(["long"], {"long": 3})
        for _ in range(3):
            await asyncio.gather(*(d.lease("w", [], 2, 30.0, 0.0, lanes=mine) for d in ds))
            assert sum((await running(stores[0], "lease_owner = 'w'")).values()) == 3
            await finish(stores[0], 3, "lease_owner = 'w'")
    finally:
        for s in stores:
            await s.close()


async def test_a_tenants_queue_limit_holds_while_its_other_queues_and_other_tenants_run(store: PgStore) -> None:
    await sql(store, "INSERT INTO tenant_queues (tenant, queue, max_concurrency) VALUES ('t', 'long', 2)")
    await queued(store, "t", 10, queue="long")
    await queued(store, "u", 10, queue="long")
    await queued(store, "t", 10)
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    everything = lanes(["long", "default"])
    assert len(await d.lease("w1", [], 100, 30.0, 0.0, lanes=everything)) == 2 + 10 + 10
    assert len(await d.lease("w2", [], 100, 30.0, 0.0, lanes=everything)) == 0
    assert Counter({(t, qn): n for (t, qn, _), n in (await running(store)).items()}) == \
        Counter({("t", "long"): 2, ("u", "long"): 10, ("t", "default"): 10})
    await finish(store, 1, "tenant = 't' AND queue = 'long'")
    assert len(await d.lease("w2", [], 100, 30.0, 0.0, lanes=everything)) == 1


async def test_a_tenants_queue_limit_holds_for_claims_racing_on_several_nodes(dsn: str) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    stores = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2)) for _ in range(6)]
    for s in stores:
        await s.open()
    try:
        await sql(stores[0], "INSERT INTO tenant_queues (tenant, queue, max_concurrency) VALUES ('t', 'long', 4)")
        await queued(stores[0], "t", 50, queue="long")
        ds = [Dispatcher(s, clock) for s in stores]
        got = await asyncio.gather(*(d.lease(f"w{i}", [], 3, 30.0, 0.0, lanes=lanes(["long"]))
                                     for i, d in enumerate(ds * 2)))
        assert sum(len(g) for g in got) == 4
    finally:
        for s in stores:
            await s.close()


async def test_backlogged_queues_of_one_tenant_share_a_claim_by_weight(store: PgStore) -> None:
    """Within a claim the k-th run of a queue is ordered by (k - 1) / weight: weights 3 and 1
    split a claim of 40 as 30:10 (per claim, with no memory across claims: each claim's first
    run of every queue goes first, so small claims lean towards 1:1, e.g. 7:3 for 10)."""
    await sql(store, "INSERT INTO tenant_queues (tenant, queue, weight) VALUES ('t', 'a', 3), ('t', 'b', 1)")
    await queued(store, "t", 100, queue="a")
    await queued(store, "t", 100, queue="b")
    d = Dispatcher(store, FakeClock(start_ts=T0.timestamp()))
    await d.lease("w", [], 40, 30.0, 0.0, lanes=lanes(["a", "b"]))
    by_queue = Counter(qn for (_, qn, _), n in (await running(store)).items() for _ in range(n))
    assert by_queue == Counter({"a": 30, "b": 10})


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _scans(child)
    return out


async def _claim_reads(store: PgStore, mine: WorkerLanes) -> tuple[int, int, int]:
    """The claim under EXPLAIN ANALYZE on the claim connection (its plan settings), rolled back:
    (rows it read from executions, rows removed by a filter anywhere, runs leased)."""
    params = ClaimParams(worker="w", priorities=["critical", "default", "bulk"], types=None, limit=5, lease_s=30.0,
                         tenant=None, now=T0, fair_tau_s=1.0, queues=mine.queues, capabilities=mine.capabilities)
    async with store.claim_connection() as conn:
        async with conn.transaction(force_rollback=True):
            await store.dispatch.lock_claim_tenants(conn, None)
            cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + q("claim"), claim_args(params))
            row = await cur.fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    nodes = _scans(top)
    read = sum(round((n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)) * n.get("Actual Loops", 1))
               for n in nodes if n.get("Relation Name") == "executions" and n["Node Type"] != "ModifyTable")
    removed = sum(round(n.get("Rows Removed by Filter", 0) * n.get("Actual Loops", 1)) for n in nodes)
    leased = next(n for n in nodes if n["Node Type"] == "ModifyTable")["Actual Rows"]
    return read, removed, leased


async def test_the_claim_reads_no_run_that_no_worker_can_take(store: PgStore) -> None:
    """The match is inside the claim, through executions_queued_by_lane: with 0 and with 10,000
    queued runs that no worker can take (they require gpu=h100; half of them in a queue the
    worker names, half in one it does not), the rows the claim reads from executions and the rows
    any of its nodes removes by a filter are the same. Fails with the capability match as a
    filter on the tenant's queued runs (it would read and drop all 5,000 of its queue)."""
    await store.executions.register_capability_sets(["gpu=h100"])
    await queued(store, "t", 20, caps="gpu=a100")
    await queued(store, "t", 20)
    mine = lanes(["default", "long"], caps=["gpu=a100", "region=eu"])
    await sql(store, "ANALYZE executions")
    before = await _claim_reads(store, mine)
    await queued(store, "t", 5_000, caps="gpu=h100")
    await queued(store, "t", 5_000, queue="other", caps="gpu=h100")
    await sql(store, "ANALYZE executions")
    after = await _claim_reads(store, mine)
    print(f"claim of 5 under EXPLAIN ANALYZE (rows read, removed by filter, leased): 0 unmatched {before}, "
          f"10,000 unmatched {after}")
    assert before[2] == after[2] == 5
    assert after[:2] == before[:2]


async def test_claim_wait_waits_only_for_runs_of_the_workers_lanes(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    later = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
    await sql(store, "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger,"
                     " queue) VALUES (cronwheel_uuid7(), 't', 'job', 1, %s, %s, 'queued', 'submit', 'long')",
              (later, later))
    async with store.transaction() as conn:
        other = await store.dispatch.claim_wait(conn, None, clock.now(), ["default"])
        mine = await store.dispatch.claim_wait(conn, None, clock.now(), ["default"], ["long"])
    assert other is None and mine == pytest.approx(5.0)


def _spec(**kw: Any) -> sch.ScheduleSpec:
    base: dict[str, Any] = dict(tenant="acme", name="gpu-nightly", cron="0 3 * * *", timezone="UTC",
                                job_type="render", misfire_policy="skip", queue="long",
                                required_capabilities=("region=eu", "gpu=a100"))
    return sch.ScheduleSpec(**{**base, **kw})


async def test_a_schedules_runs_get_its_queue_and_capabilities_when_made(store: PgStore) -> None:
    """Triggered and backfilled runs (the cron fire statements copy the same two columns; the
    e2e test fires one) carry the schedule's queue and capabilities as they are when the run is
    made: an update applies to runs made after it, not to stored ones."""
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
    row = await sch.create_schedule(store, _spec(), now, 8)
    assert (row["queue"], row["required_capabilities"]) == ("long", "gpu=a100,region=eu")
    first, _ = await runs.trigger_schedule(store, row["id"], now, "acme")
    await sch.update_schedule(store, row["id"], {"queue": None, "required_capabilities": ("gpu=h100",)}, now, "acme")
    second, _ = await runs.trigger_schedule(store, row["id"], now + timedelta(seconds=1), "acme")
    await runs.backfill_schedule(store, row["id"], now - timedelta(days=2), now - timedelta(days=1), now, "acme")
    got = await sql(store, "SELECT trigger, queue, required_capabilities FROM executions ORDER BY created_at, trigger")
    assert sorted(set(got)) == [("backfill", "default", "gpu=h100"), ("manual", "default", "gpu=h100"),
                                ("manual", "long", "gpu=a100,region=eu")]
    assert (first["queue"], second["queue"]) == ("long", "default")
    known = {r[0] for r in await sql(store, "SELECT capabilities FROM capability_sets")}
    assert {"", "gpu=a100,region=eu", "gpu=h100"} <= known  # registered before the schedule was written
    d = Dispatcher(store, FakeClock(start_ts=(now + timedelta(seconds=2)).timestamp()))
    assert await d.lease("w", [], 10, 30.0, 0.0, lanes=lanes(["long"], caps=["gpu=a100"])) == []
    assert len(await d.lease("w", [], 10, 30.0, 0.0, lanes=lanes(["long"], caps=["gpu=a100", "region=eu"]))) == 1
