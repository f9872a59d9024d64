"""The schedule and execution commands (cluster.scheduling, cluster.scheduling_runs) against a
real PostgreSQL: what they store, what they refuse, what they announce."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.cluster.commands import runs as runs
from cronwheel.cluster.commands import schedules as sch
from cronwheel.cluster.commands.values import JsonText, QuotaExceeded, RetryPolicy
from cronwheel.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, VersionConflict
from cronwheel.storage import PgStore

from .conftest import TEST_PARTITIONS as P

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 10, 12, 0, 30, 123456, tzinfo=UTC)


def spec(**kw: Any) -> sch.ScheduleSpec:
    base: dict[str, Any] = dict(tenant="acme", name="nightly", cron="0 3 * * *", timezone="Europe/Berlin",
                                job_type="report", misfire_policy="skip")
    base.update(kw)
    return sch.ScheduleSpec(**base)


async def rows(store: PgStore, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    async with store.connection() as conn:
        cur = await conn.execute(sql, params)  # type: ignore[arg-type]
        return list(await cur.fetchall())


async def snapshot(store: PgStore) -> tuple[Any, ...]:
    return (await rows(store, "SELECT * FROM schedules ORDER BY id"),
            await rows(store, "SELECT * FROM executions ORDER BY id"),
            await rows(store, "SELECT count(*) FROM events"))


class Listener:
    """LISTEN on the two channels the commands notify."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def __aenter__(self) -> Listener:
        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        await self.conn.execute("LISTEN cronwheel_due")
        await self.conn.execute("LISTEN cronwheel_queued")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.conn is not None
        await self.conn.close()

    async def received(self, n: int) -> list[tuple[str, str]]:
        assert self.conn is not None
        out = [(m.channel, m.payload) async for m in self.conn.notifies(timeout=5, stop_after=n)]
        return out


async def test_create_stores_version_1_the_first_tick_after_now_and_an_event(store: PgStore, dsn: str) -> None:
    async with Listener(dsn) as lis:
        row = await sch.create_schedule(store, spec(), NOW, P, actor="alice")
        got = await lis.received(1)
    assert row["version"] == 1
    assert row["next_run_at"] == datetime(2026, 3, 11, 2, 0, tzinfo=UTC)  # 03:00 CET
    assert got == [("cronwheel_due", f"{row['partition']}:s:{row['id']}")]
    ev = await rows(store, "SELECT kind, actor, tenant, schedule_id FROM events")
    assert ev == [("schedule_created", "alice", "acme", row["id"])]


async def test_create_paused_has_no_next_run_at(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(paused=True), NOW, P)
    assert row["paused"] and row["next_run_at"] is None


async def test_create_refuses_bad_fields_naming_them_and_stores_nothing(store: PgStore) -> None:
    before = await snapshot(store)
    for bad, field in [(spec(cron="0 3 * *"), "cron"), (spec(timezone="Mars/Olympus"), "timezone"),
                       (spec(misfire_policy=None), "misfire_policy"), (spec(name=""), "name"),
                       (spec(jitter_s=7200), "jitter"), (spec(retry=RetryPolicy(max_attempts=0)),
                                                         "retry_policy.max_attempts"),
                       (spec(payload=JsonText('{"a": "\\u0000"}')), "payload_json"),
                       (spec(payload=JsonText("[" * 200 + "]" * 200)), "payload_json"),
                       (spec(payload=JsonText('{"a": 1e999999}')), "payload_json"),
                       (spec(timeout_s=0.5), "timeout")]:
        with pytest.raises(InvalidArgument) as exc:
            await sch.create_schedule(store, bad, NOW, P)
        assert exc.value.field == field, exc.value
    assert await snapshot(store) == before


async def test_payload_keeps_precise_numbers_and_last_duplicate_key(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(payload=JsonText('{"n": 12345678901234567890.12345678901234567890, '
                                                                '"k": 1, "k": 2}')), NOW, P)
    assert row["payload"] == '{"k": 2, "n": 12345678901234567890.12345678901234567890}'


async def test_names_are_unique_per_tenant_among_live_schedules(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    with pytest.raises(AlreadyExists):
        await sch.create_schedule(store, spec(), NOW, P)
    await sch.create_schedule(store, spec(tenant="other"), NOW, P)
    await sch.delete_schedule(store, row["id"], NOW, "acme")
    await sch.create_schedule(store, spec(), NOW, P)  # the name is free again


async def test_update_changes_fields_bumps_version_recomputes_next_tick_and_notifies(store: PgStore,
                                                                                      dsn: str) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    async with Listener(dsn) as lis:
        new = await sch.update_schedule(store, row["id"], {"cron": "*/15 * * * *", "retry.max_attempts": 9}, NOW,
                                        "acme", actor="bob", expected_version=1)
        got = await lis.received(1)
    assert new["version"] == 2 and new["cron"] == "*/15 * * * *" and new["max_attempts"] == 9
    assert new["next_run_at"] == datetime(2026, 3, 10, 12, 15, tzinfo=UTC)  # the tick itself, strictly after now
    assert got == [("cronwheel_due", f"{row['partition']}:s:{row['id']}")]
    data = json.loads((await rows(store, "SELECT data::text FROM events WHERE kind = 'schedule_updated'"))[0][0])
    assert data["fields"] == ["cron", "retry_policy"]
    assert data["changes"]["cron"] == ["0 3 * * *", "*/15 * * * *"]


async def test_update_of_a_non_timing_field_keeps_next_run_at(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    new = await sch.update_schedule(store, row["id"], {"job_type": "other"}, NOW + timedelta(days=3), None)
    assert new["next_run_at"] == row["next_run_at"] and new["version"] == 2


async def test_update_with_a_stale_version_is_refused_and_changes_nothing(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    await sch.update_schedule(store, row["id"], {"name": "renamed"}, NOW, "acme")
    before = await snapshot(store)
    with pytest.raises(VersionConflict) as exc:
        await sch.update_schedule(store, row["id"], {"name": "again"}, NOW, "acme", expected_version=1)
    assert (exc.value.expected, exc.value.actual) == (1, 2)
    assert await snapshot(store) == before


async def test_update_to_a_taken_name_is_already_exists(store: PgStore) -> None:
    await sch.create_schedule(store, spec(name="a"), NOW, P)
    b = await sch.create_schedule(store, spec(name="b"), NOW, P)
    with pytest.raises(AlreadyExists):
        await sch.update_schedule(store, b["id"], {"name": "a"}, NOW, "acme")


async def test_another_tenants_schedule_is_not_found_and_untouched(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    before = await snapshot(store)
    calls = [
        sch.get_schedule(store, row["id"], "evil"),
        sch.update_schedule(store, row["id"], {"name": "x"}, NOW, "evil"),
        sch.set_paused(store, row["id"], True, NOW, "evil"),
        sch.delete_schedule(store, row["id"], NOW, "evil"),
        runs.trigger_schedule(store, row["id"], NOW, "evil"),
        runs.backfill_schedule(store, row["id"], NOW - timedelta(days=2), NOW, NOW, "evil"),
    ]
    for call in calls:
        with pytest.raises(NotFound):
            await call
    assert await snapshot(store) == before


async def test_pause_clears_next_run_at_resume_sets_the_next_tick_and_repeats_are_no_ops(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(cron="*/5 * * * *"), NOW, P)
    p1 = await sch.set_paused(store, row["id"], True, NOW, "acme", reason="maintenance")
    assert p1["paused"] and p1["next_run_at"] is None and p1["version"] == 2
    p2 = await sch.set_paused(store, row["id"], True, NOW, "acme")
    assert p2["version"] == 2
    later = NOW + timedelta(hours=1)
    r1 = await sch.set_paused(store, row["id"], False, later, "acme")
    assert not r1["paused"] and r1["next_run_at"] == datetime(2026, 3, 10, 13, 5, tzinfo=UTC) and r1["version"] == 3
    kinds = [k for (k,) in await rows(store, "SELECT kind FROM events ORDER BY id")]
    assert kinds == ["schedule_created", "schedule_paused", "schedule_resumed"]
    with pytest.raises(VersionConflict):
        await sch.set_paused(store, row["id"], True, NOW, "acme", expected_version=1)


async def test_trigger_queues_a_manual_execution_now_and_wakes_dispatchers(store: PgStore, dsn: str) -> None:
    row = await sch.create_schedule(store, spec(paused=True, priority="critical"), NOW, P)
    async with Listener(dsn) as lis:
        ex, dedup = await runs.trigger_schedule(store, row["id"], NOW, "acme", actor="ops", reason="now please")
        got = await lis.received(1)
    assert not dedup and ex["state"] == "queued" and ex["trigger"] == "manual"
    assert ex["scheduled_for"] == NOW and ex["run_at"] == NOW and ex["type"] == "report"
    assert got == [("cronwheel_queued", "critical")]
    ev = await rows(store, "SELECT kind, execution_id, actor FROM events WHERE kind = 'schedule_triggered'")
    assert ev == [("schedule_triggered", ex["id"], "ops")]
    again, _ = await runs.trigger_schedule(store, row["id"], NOW, "acme")  # same instant: still a new run
    assert again["scheduled_for"] == NOW + timedelta(microseconds=1)


async def test_trigger_follows_the_overlap_policy_unless_overridden(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(overlap_policy="forbid"), NOW, P)
    first, _ = await runs.trigger_schedule(store, row["id"], NOW, "acme")
    second, _ = await runs.trigger_schedule(store, row["id"], NOW + timedelta(seconds=1), "acme")
    assert first["state"] == "queued" and second["state"] == "skipped"
    assert second["state_reason"].startswith("overlap: ")
    third, _ = await runs.trigger_schedule(store, row["id"], NOW + timedelta(seconds=2), "acme", overlap_policy="allow")
    assert third["state"] == "queued"


async def test_trigger_with_an_idempotency_key_runs_once(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    a, d1 = await runs.trigger_schedule(store, row["id"], NOW, "acme", idempotency_key="deploy-42")
    b, d2 = await runs.trigger_schedule(store, row["id"], NOW + timedelta(seconds=5), "acme",
                                        idempotency_key="deploy-42")
    assert (d1, d2) == (False, True) and a["id"] == b["id"]


async def test_backfill_creates_each_missing_tick_once_and_counts_the_rest(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(cron="0 * * * *", timezone="UTC"), NOW, P)
    start, end = datetime(2026, 3, 10, 0, 0, tzinfo=UTC), datetime(2026, 3, 10, 6, 0, tzinfo=UTC)
    async with store.connection() as conn:  # one tick already fired
        await conn.execute(
            "INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at, state) "
            "VALUES (%s, %s, 'acme', 'report', %s, %s, %s, 'skipped')",
            (uuid.uuid4(), row["id"], row["partition"], start + timedelta(hours=2), start + timedelta(hours=2)))
    res = await runs.backfill_schedule(store, row["id"], start, end, NOW, "acme", reason="outage")
    assert [t for _, t in res.created] == [start + timedelta(hours=h) for h in (0, 1, 3, 4, 5)]
    assert res.existing_count == 1
    again = await runs.backfill_schedule(store, row["id"], start, end, NOW, "acme")
    assert (len(again.created), again.existing_count) == (0, 6)
    got = await rows(store, "SELECT trigger, state FROM executions WHERE trigger = 'backfill' ORDER BY run_at")
    assert got == [("backfill", "queued")] * 5
    order = await rows(store, "SELECT scheduled_for FROM executions WHERE trigger = 'backfill' ORDER BY run_at")
    assert [r[0] for r in order] == sorted(r[0] for r in order)  # dispatch order is tick order


async def test_backfill_refuses_bad_ranges_and_more_than_10000_ticks(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(cron="* * * * *", timezone="UTC"), NOW, P)
    cases = [(NOW, NOW - timedelta(hours=1), "range"), (NOW - timedelta(hours=1), NOW + timedelta(hours=1),
                                                        "range.end_time"),
             (None, NOW, "range.start_time"), (NOW - timedelta(days=7), NOW, "range")]
    for start, end, field in cases:
        with pytest.raises(InvalidArgument) as exc:
            await runs.backfill_schedule(store, row["id"], start, end, NOW, None)
        assert exc.value.field == field
    assert await rows(store, "SELECT count(*) FROM executions") == [(0,)]


async def test_submit_is_idempotent_per_tenant_key(store: PgStore, dsn: str) -> None:
    job = runs.JobSpec(tenant="acme", type="email", payload=JsonText('{"to": "x"}'), idempotency_key="k1")
    async with Listener(dsn) as lis:
        a, d1 = await runs.submit_job(store, job, NOW, P)
        got = await lis.received(1)
    b, d2 = await runs.submit_job(store, job, NOW, P)
    c, d3 = await runs.submit_job(store, runs.JobSpec(tenant="other", type="email", idempotency_key="k1"), NOW, P)
    assert (d1, d2, d3) == (False, True, False)
    assert a["id"] == b["id"] != c["id"]
    assert a["state"] == "queued" and got == [("cronwheel_queued", "default")]


async def test_submit_for_later_is_scheduled_and_tells_the_partition_owner(store: PgStore, dsn: str) -> None:
    async with Listener(dsn) as lis:
        ex, _ = await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t", run_at=NOW + timedelta(hours=1)),
                                      NOW, P)
        got = await lis.received(1)
    assert ex["state"] == "scheduled" and ex["scheduled_for"] == NOW + timedelta(hours=1)
    # the submit path's coalesced form: partition, id and run_at, so the owner needs no lookup
    assert got == [("cronwheel_due", f"n:{ex['partition']},{ex['id']},{ex['run_at'].timestamp():.6f}")]
    with pytest.raises(InvalidArgument) as exc:
        await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t", run_at=NOW + timedelta(days=4000)), NOW, P)
    assert exc.value.field == "run_at"


async def set_state(store: PgStore, eid: uuid.UUID, state: str, attempt: int = 0) -> None:
    async with store.connection() as conn:
        await conn.execute("UPDATE executions SET state = %s, attempt = %s WHERE id = %s", (state, attempt, eid))


async def test_cancel_stops_unstarted_work_and_asks_running_work_to_stop(store: PgStore) -> None:
    queued, _ = await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t"), NOW, P)
    c, entered = await runs.cancel_execution(store, queued["id"], NOW, "acme", actor="ops", reason="typo")
    assert c["state"] == "cancelled" and c["state_reason"] == "cancelled by ops: typo" and c["finished_at"] == NOW
    assert entered
    again, entered = await runs.cancel_execution(store, queued["id"], NOW, "acme")
    assert again["state"] == "cancelled" and not entered  # unchanged
    running, _ = await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t"), NOW, P)
    await set_state(store, running["id"], "running", 1)
    r, entered = await runs.cancel_execution(store, running["id"], NOW, "acme")
    assert r["state"] == "running" and r["cancel_requested"] and not entered  # the worker's report decides
    done, _ = await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t"), NOW, P)
    await set_state(store, done["id"], "succeeded", 1)
    with pytest.raises(FailedPrecondition):
        await runs.cancel_execution(store, done["id"], NOW, "acme")
    with pytest.raises(NotFound):
        await runs.cancel_execution(store, running["id"], NOW, "evil")
    kinds = await rows(store, "SELECT count(*) FROM events WHERE kind = 'execution_cancelled'")
    assert kinds == [(2,)]


async def test_retry_brings_a_dead_execution_back_with_more_attempts(store: PgStore) -> None:
    ex, _ = await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t", retry=RetryPolicy(max_attempts=3)),
                                  NOW, P)
    await set_state(store, ex["id"], "dead", 3)
    r = await runs.retry_execution(store, ex["id"], NOW, "acme", additional_attempts=2, reason="fixed the bug")
    assert r["state"] == "queued" and r["max_attempts"] == 5 and r["attempt"] == 3 and r["finished_at"] is None
    with pytest.raises(FailedPrecondition):
        await runs.retry_execution(store, ex["id"], NOW, "acme")  # queued: not retryable
    await set_state(store, ex["id"], "cancelled", 3)
    later = await runs.retry_execution(store, ex["id"], NOW, "acme", run_at=NOW + timedelta(minutes=5))
    assert later["state"] == "retry_scheduled" and later["run_at"] == NOW + timedelta(minutes=5)


async def test_delete_with_cancel_pending_cancels_its_unfinished_executions(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(), NOW, P)
    a, _ = await runs.trigger_schedule(store, row["id"], NOW, "acme")
    b, _ = await runs.trigger_schedule(store, row["id"], NOW + timedelta(seconds=1), "acme")
    await set_state(store, b["id"], "running", 1)
    deleted, n = await sch.delete_schedule(store, row["id"], NOW, "acme", cancel_pending=True, reason="retired")
    assert n == 2 and deleted["deleted_at"] is not None and deleted["next_run_at"] is None
    got = dict(await rows(store, "SELECT id, state FROM executions"))
    assert got == {a["id"]: "cancelled", b["id"]: "running"}
    with pytest.raises(NotFound):
        await sch.get_schedule(store, row["id"], None)


async def test_tenant_quotas_are_enforced(store: PgStore) -> None:
    async with store.connection() as conn:
        await conn.execute("INSERT INTO tenants (id, max_schedules, max_executions_per_day) VALUES ('acme', 2, 2)")
    await asyncio.gather(*(sch.create_schedule(store, spec(name=f"s{i}"), NOW, P) for i in range(2)))
    with pytest.raises(QuotaExceeded):
        await sch.create_schedule(store, spec(name="s3"), NOW, P)
    await sch.create_schedule(store, spec(tenant="other", name="s3"), NOW, P)
    # Today's executions already include none; two submissions fit, the third does not.
    for _ in range(2):
        await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t"), NOW, P)
    with pytest.raises(QuotaExceeded):
        await runs.submit_job(store, runs.JobSpec(tenant="acme", type="t"), NOW, P)
