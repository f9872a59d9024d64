"""ExplainSchedule after an outage, from the rows the firer writes (pure: rows in, lines out).

A `run_once` schedule whose partition was unowned for several ticks gets, when a node takes the
partition back: one `catch_up` execution for the latest missed tick, a `skipped` row with
state_reason `misfire:run_once` for each other missed tick, and a `misfire_skipped` event.
scheduler.proto promises TICK_OUTCOME_COALESCED_MISFIRE for those other ticks, naming the
execution that ran in their place; `skip` keeps SKIPPED_MISFIRE with the tick's own row.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cronwheel.cluster.commands.explain import Facts, explain

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
SID = uuid.uuid4()


def m(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sched() -> dict[str, Any]:
    return {"id": SID, "cron": "* * * * *", "timezone": "UTC", "dst_gap": None, "dst_repeated": None,
            "created_at": m(0), "deleted_at": None, "partition": 3, "success_alert_at": None}


def row(minute: float, state: str, reason: str | None, trigger: str) -> dict[str, Any]:
    t = m(minute)
    return {"id": uuid.uuid4(), "scheduled_for": t, "run_at": t, "state": state, "state_reason": reason,
            "trigger": trigger, "attempt": 1, "fired_at": m(9), "fired_epoch": 2}


def outage(policy: str) -> tuple[Facts, dict[str, Any]]:
    """Partition 3 unowned from minute 0.5 to minute 9; ticks 1..4 missed; the latest one (4) ran
    at minute 9 under run_once (skip runs nothing)."""
    ran = row(4, "succeeded", None, "catch_up")
    skipped = [row(k, "skipped", f"misfire:{policy}", "cron") for k in (1, 2, 3)]
    if policy == "skip":
        skipped.append(row(4, "skipped", "misfire:skip", "cron"))
    executions = [row(0, "succeeded", None, "cron"), *skipped, *([ran] if policy == "run_once" else [])]
    event = {"kind": "misfire_skipped", "at": m(9), "actor": "scheduler", "id": 7, "alert": False,
             "data": {"policy": policy, "first_missed": m(1).isoformat(), "latest_missed": m(4).isoformat()}}
    ownership = [{"kind": "acquired", "epoch": 1, "owner": "n1", "at": m(-1)},
                 {"kind": "released", "epoch": 1, "owner": "n1", "at": m(0.5)},
                 {"kind": "acquired", "epoch": 2, "owner": "n2", "at": m(9)}]
    return Facts(sched(), executions, [event], ownership), ran


def test_run_once_reports_the_coalesced_ticks_with_the_execution_that_ran_in_their_place() -> None:
    facts, ran = outage("run_once")
    lines = {int((e.tick - T0).total_seconds() // 60): e for e in explain(facts, m(0), m(5), m(20))}
    for k in (1, 2, 3):
        assert lines[k].outcome == "COALESCED_MISFIRE", lines[k]
        assert lines[k].execution_id == ran["id"]
        assert lines[k].execution_state == "succeeded"
        assert "run_once" in lines[k].reason
    assert lines[4].outcome == "FIRED" and lines[4].execution_id == ran["id"]


def test_run_once_coalesced_tick_names_its_replacement_even_when_the_page_ends_before_it() -> None:
    facts, ran = outage("run_once")
    lines = explain(facts, m(1), m(2), m(20))  # the page holds tick 1 only; tick 4 ran
    assert [(e.outcome, e.execution_id) for e in lines] == [("COALESCED_MISFIRE", ran["id"])]


def test_skip_policy_keeps_skipped_misfire_with_the_ticks_own_row() -> None:
    facts, _ = outage("skip")
    own_rows = {e["scheduled_for"]: e["id"] for e in facts.executions}
    for e in explain(facts, m(1), m(5), m(20)):
        assert e.outcome == "SKIPPED_MISFIRE"
        assert e.execution_id == own_rows[e.tick]
