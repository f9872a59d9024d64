"""The fire guard is one rule: every statement that records a cron tick or moves a schedule's
cursor refuses a schedule that is paused, deleted, edited since it was loaded, or whose cursor
is no longer the tick the batch was decided from (storage/firing.py)."""

from __future__ import annotations

import re

import pytest

from cronwheel.storage.queries import q

GUARD = "s.version = v.version AND NOT s.paused AND s.deleted_at IS NULL AND d.next_run_at = "
FIRE_STATEMENTS = ("fire_ticks_fenced", "fire_executions", "advance_schedules")


def _sql(name: str) -> str:
    body = "\n".join(line.split("--", 1)[0] for line in q(name).splitlines())  # code, not comments
    return re.sub(r"\s+", " ", body)


@pytest.mark.parametrize("name", FIRE_STATEMENTS)
def test_every_fire_statement_applies_the_same_guard(name: str) -> None:
    assert GUARD in _sql(name), f"{name} must refuse paused, deleted, edited or moved schedules"


@pytest.mark.parametrize("name", FIRE_STATEMENTS)
def test_every_fire_statement_takes_queued_at_from_the_caller_not_the_database(name: str) -> None:
    sql = _sql(name)
    assert "now()" not in sql.replace("coalesce(%(now)s::timestamptz, now())", "")


@pytest.mark.parametrize("name", ("fire_ticks_fenced", "fire_executions"))
def test_every_statement_that_records_a_tick_locks_the_schedule_row_it_guards(name: str) -> None:
    """A pause, edit or delete (lock_schedule: FOR UPDATE) and the fire serialise on the schedule
    row, so a change that commits while a tick is being queued ahead still takes it back."""
    assert "FOR KEY SHARE OF s" in _sql(name)
