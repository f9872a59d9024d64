"""The rules several statements share (migration 0014) are inlined: the planner sees the
spelled-out predicate, so the pre-check and the fenced statements keep their index plans, and a
function call per row never appears in a plan."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from cronwheel.storage.queries import q

pytestmark = pytest.mark.integration

SHARED = ("cronwheel_run_overdue", "cronwheel_retry_due", "cronwheel_success_overdue", "cronwheel_in_window")
USERS = ("reap_due_partitions", "reap_candidates", "requeue_retries", "dead_mans_switch", "due_schedules",
         "due_oneoffs", "extend_due_partitions")


def plan(dsn: str, name: str, params: dict[str, Any]) -> str:
    with psycopg.connect(dsn) as c:
        rows = c.execute("EXPLAIN (VERBOSE) " + q(name), params).fetchall()  # type: ignore[operator]
        c.rollback()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize("name", USERS)
def test_statements_that_share_a_rule_call_it_and_the_planner_inlines_it(dsn: str, name: str) -> None:
    text = q(name)
    assert any(f in text for f in SHARED), f"{name} spells its rule out instead of calling the shared one"
    now = datetime.now(UTC)
    params = {"partitions": [0, 1], "partition": 0, "epoch": 1, "now": now, "limit": 10, "horizon": now,
              "after": None, "afters": [None, now]}
    shown = plan(dsn, name, params)
    assert not any(f in shown for f in SHARED), shown
