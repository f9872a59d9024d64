"""The SQL rules written once (migration 0027, issue 49) against a real PostgreSQL: the fire
guard is inlined into each fire statement (their plans are those of the spelled-out predicate),
and the fence, which cannot be inlined (it locks), runs once per statement, or once per partition
in the fire statement, never once per row. tests/unit/test_sql_rules.py checks the text."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.storage import PgStore
from cronwheel.storage.firing import PlainTicks, stage_fire
from cronwheel.storage.queries import q
from tests.integration.execution_rows import insert_execution

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FIRE_STATEMENTS: dict[str, dict[str, Any]] = {
    "fire_executions": {"partition": 1, "epoch": 1, "now": None, "ids": [], "schedule_ids": [], "scheduled_fors": [],
                        "run_ats": [], "states": [], "state_reasons": [], "triggers": [], "versions": [],
                        "cursors": []},
    "advance_schedules": {"partition": 1, "epoch": 1, "ids": [], "next_run_ats": [], "last_scheduled_fors": [],
                          "versions": [], "cursors": []},
    "fire_ticks_fenced": {**stage_fire([(1, 1, PlainTicks([uuid.uuid4()], [T0.timestamp()], [T0.timestamp()],
                                                           [T0.timestamp() + 60], [1]))]).params, "now": None},
}


def plan_nodes(n: dict[str, Any]) -> list[dict[str, Any]]:
    return [n] + [m for c in n.get("Plans", []) for m in plan_nodes(c)]


def explain(dsn: str, sql: str, params: dict[str, Any], analyze: bool = False) -> dict[str, Any]:
    """The statement's plan (EXPLAIN (FORMAT JSON)'s "Plan"); with `analyze` it runs, rolled back."""
    with psycopg.connect(dsn) as c:
        opts = "ANALYZE, VERBOSE, FORMAT JSON" if analyze else "VERBOSE, FORMAT JSON"
        [[doc]] = c.execute(f"EXPLAIN ({opts}) " + sql, params).fetchall()  # type: ignore[arg-type]
        c.rollback()
    return dict(doc[0]["Plan"])


@pytest.mark.parametrize("name", FIRE_STATEMENTS)
def test_the_fire_guard_is_inlined_in_every_fire_statement(dsn: str, name: str) -> None:
    plan = explain(dsn, q(name), FIRE_STATEMENTS[name])
    shown = repr(plan)
    assert "cronwheel_fire_guard" not in shown, f"{name}: the guard is called, not inlined"
    assert "paused" in shown and "deleted_at IS NULL" in shown, f"{name}: the guard is not in the plan"


async def test_the_fence_runs_once_per_statement_not_per_row(store: PgStore, dsn: str) -> None:
    assert await store.partitions.record_epoch(2, 7, "a")
    sid = uuid.uuid4()
    for i in range(50):
        await insert_execution(store, partition=2, schedule_id=sid, scheduled_for=T0 + timedelta(minutes=i),
                               run_at=T0 + timedelta(minutes=i), state="queued", trigger="cron")
    plan = explain(dsn, q("active_counts"), {"partition": 2, "epoch": 7, "ids": [sid]}, analyze=True)
    fences = [n for n in plan_nodes(plan) if n.get("Function Name") == "cronwheel_fence"]
    assert [(n["Actual Loops"], n["Actual Rows"]) for n in fences] == [(1, 1)], fences
    assert plan["Actual Rows"] == 1
    stale = explain(dsn, q("active_counts"), {"partition": 2, "epoch": 6, "ids": [sid]}, analyze=True)
    assert stale["Actual Rows"] == 0, "a stale epoch reads nothing"


def test_the_fire_statement_fences_once_per_partition(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE partitions SET epoch = 3 WHERE id IN (1, 2, 3)")
    params = {**stage_fire([(p, 3 if p != 2 else 2, PlainTicks([], [], [], [], [])) for p in (1, 2, 3)]).params,
              "now": None}
    plan = explain(dsn, q("fire_ticks_fenced"), params, analyze=True)
    fences = [n for n in plan_nodes(plan) if n.get("Function Name") == "cronwheel_fence"]
    assert [n["Actual Loops"] for n in fences] == [3], fences
    assert plan["Actual Rows"] == 2, "partitions 1 and 3 answer; 2 is stale"


@pytest.mark.parametrize("path", ["fire_ticks_fenced", "fire_executions"])
async def test_both_fire_statements_skip_past_the_daily_quota_with_one_message(store: PgStore, dsn: str,
                                                                            path: str) -> None:
    """The daily quota (the fragment daily_quota_over) in each fire statement: of two ticks of a
    tenant with one execution a day left, one runs and one is recorded skipped, with the message."""
    from cronwheel.storage import FireBatchParams, ScheduleAdvance, Tick
    from tests.integration.test_fire_cursor import make_schedule

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO tenants (id, max_executions_per_day) VALUES ('t1', 1)")
    assert await store.partitions.record_epoch(1, 9, "a")
    sids = [await make_schedule(store, 1) for _ in range(2)]
    ts = T0.timestamp()
    if path == "fire_ticks_fenced":
        await store.firing.fire_plain(1, 9, PlainTicks(sids, [ts, ts], [ts, ts], [ts + 60, ts + 60], [1, 1]))
    else:
        await store.firing.fire(FireBatchParams(1, 9, ticks=[Tick(s, T0, T0, cursor=T0) for s in sids],
                                                advances=[ScheduleAdvance(s, T0 + timedelta(minutes=1), T0)
                                                          for s in sids]))
    with psycopg.connect(dsn) as c:
        got = sorted(c.execute("SELECT state, state_reason FROM executions WHERE schedule_id = ANY(%s)",
                               (sids,)).fetchall())
    assert got == [("queued", None), ("skipped", "quota: max_executions_per_day 1 used up (UTC day)")]
