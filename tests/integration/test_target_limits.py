"""HTTP targets in storage, against a real PostgreSQL on a FakeClock (issue 50): a run of type
'http' gets its schedule's target at insert (migration 0023's trigger) with the concurrency key
and the token bucket of the target's limits, and the claim holds a target's runs to its rate
(whole tokens, spent in the claim, never more across concurrent claimers) and its concurrency
limit; claim_wait says when a drained target's next token is due."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.dispatch.dispatcher import Dispatcher
from cronwheel.storage import PgStore, StoreConfig
from tests.integration.test_claim_limits import T0, claim_wait, sql

pytestmark = pytest.mark.integration

URL = "https://API.example.com:8443/jobs/run"


async def targets(store: PgStore, n: int, target: dict[str, Any], tenant: str = "t") -> None:
    """n queued one-off runs of type 'http' with `target` (as a SubmitJob stores them)."""
    await sql(store, """
        INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger, target)
        SELECT cronwheel_uuid7(), %(t)s, 'http', g %% 8, %(at)s, %(at)s - (%(n)s - g) * interval '1 microsecond',
               'queued', 'submit', %(target)s::jsonb
          FROM generate_series(1, %(n)s) g""", {"t": tenant, "n": n, "at": T0, "target": json.dumps(target)})


async def test_a_fired_run_keeps_its_schedules_target_and_gets_the_targets_key(store: PgStore) -> None:
    target = {"url": URL, "method": "POST", "headers": {}, "body": None, "timeout_s": 30, "signing_secret": "",
              "concurrency_limit": 3, "rate_per_s": 2.5}
    sid = (await sql(store, """
        INSERT INTO schedules (id, tenant, name, cron, timezone, job_type, misfire_policy, partition, target)
        VALUES (cronwheel_uuid7(), 't', 's', '* * * * *', 'UTC', 'http', 'skip', 0, %s::jsonb) RETURNING id""",
                     (json.dumps(target),)))[0][0]
    await sql(store, """
        INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at, state, trigger)
        VALUES (cronwheel_uuid7(), %(s)s, 't', 'http', 0, %(at)s, %(at)s, 'queued', 'cron'),
               (cronwheel_uuid7(), %(s)s, 't', 'job', 0, %(at)s + interval '1 minute', %(at)s, 'queued', 'cron')""",
              {"s": sid, "at": T0})
    rows = await sql(store, """SELECT type, target IS NOT NULL, concurrency_key, concurrency_limit, key_rate_per_s
                                 FROM executions WHERE schedule_id = %s ORDER BY type""", (sid,))
    assert rows == [("http", True, "target:https://api.example.com:8443", 3, 2.5),
                    ("job", False, None, None, None)]  # a job type's run pays nothing, gets nothing


async def test_a_claim_takes_at_most_a_targets_whole_tokens_and_the_wait_says_when_the_next_is_due(
        store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await targets(store, 50, {"url": URL, "rate_per_s": 4, "burst": 2})
    await targets(store, 5, {"url": "https://other.example.com/"})  # another origin: not held back
    d = Dispatcher(store, clock)
    first = await d.lease("w", ["http"], 100, 30.0, 0.0)
    assert len(first) == 2 + 5
    assert await d.lease("w", ["http"], 100, 30.0, 0.0) == []
    assert await claim_wait(store, clock) == pytest.approx(0.25)
    clock.advance(0.5)
    assert len(await d.lease("w", ["http"], 100, 30.0, 0.0)) == 2
    clock.advance(60)  # refills to the burst, not beyond
    assert len(await d.lease("w", ["http"], 100, 30.0, 0.0)) == 2


async def test_concurrent_claimers_never_start_more_than_a_targets_bucket(dsn: str) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    stores = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2)) for _ in range(4)]
    for s in stores:
        await s.open()
    try:
        await targets(stores[0], 100, {"url": URL, "rate_per_s": 1, "burst": 7})
        ds = [Dispatcher(s, clock) for s in stores]
        got = await asyncio.gather(*(d.lease(f"w{i}", ["http"], 100, 30.0, 0.0) for i, d in enumerate(ds * 2)))
        assert sum(len(g) for g in got) == 7
    finally:
        for s in stores:
            await s.close()


async def test_a_targets_concurrency_limit_holds_back_the_rest_until_one_ends(store: PgStore) -> None:
    clock = FakeClock(start_ts=T0.timestamp())
    await targets(store, 20, {"url": URL, "concurrency_limit": 3})
    d = Dispatcher(store, clock)
    running = await d.lease("w", ["http"], 100, 30.0, 0.0)
    assert len(running) == 3 and await d.lease("w", ["http"], 100, 30.0, 0.0) == []
    await d.complete(uuid.UUID(running[0].id), running[0].fencing_token, "w", "{}")
    assert len(await d.lease("w", ["http"], 100, 30.0, 0.0)) == 1
