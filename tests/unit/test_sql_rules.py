"""One rule, one place, in SQL (issue 49): each rule that several statements apply is one SQL
function in schema.sql (migration 0027), and no statement spells it out itself. These read the
text of storage/sql (code, not comments); tests/integration/test_sql_rules.py shows the functions
at work against PostgreSQL."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from cronwheel.storage.migrate import schema_sql
from cronwheel.storage.queries import all_queries, parse

_FUNCTION = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\((.*?)\$\$(.*?)\$\$", re.DOTALL)
_PARTITIONS_TABLE = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+partitions\b", re.IGNORECASE)


def code(sql: str) -> str:
    """`sql` without its comments, whitespace collapsed."""
    body = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return re.sub(r"\s+", " ", body)


def schema_functions() -> dict[str, str]:
    """Each function of schema.sql: name -> its body (code only)."""
    return {m.group(1): code(m.group(3)) for m in _FUNCTION.finditer(schema_sql())}


def queries() -> dict[str, str]:
    return {name: code(body) for name, body in all_queries().items()}


# The statements that touch the partitions table without checking a fence, and why.
NOT_FENCE_CHECKS = {
    "ensure_partitions": "creates the rows",
    "record_epoch": "moves the epoch (the acquisition the fence's share lock holds off)",
    "current_epoch": "reads the epoch for diagnostics and StaleEpoch messages",
    "list_partitions": "reads every partition's epoch and owner (ClusterStatus)",
    "api_partition_epoch": "share-locks the CURRENT epoch, whatever it is (at_current_epoch): no compare",
    "insert_unowned_event": "names the last epoch in the partition_unowned alert",
}


def test_the_fence_is_one_function_that_share_locks_the_partition_row_at_the_epoch() -> None:
    fns = schema_functions()
    fence = fns["cronwheel_fence"]
    assert "FOR SHARE" in fence and "f.id = p AND f.epoch = e" in fence, fence
    readers = sorted(n for n, body in fns.items() if _PARTITIONS_TABLE.search(body))
    assert readers == ["cronwheel_fence"], f"functions reading partitions besides the fence: {readers}"


def test_no_statement_checks_the_fence_but_through_cronwheel_fence() -> None:
    qs = queries()
    assert set(NOT_FENCE_CHECKS) <= set(qs), "a statement named here no longer exists"
    spelled = sorted(n for n, body in qs.items() if _PARTITIONS_TABLE.search(body) and n not in NOT_FENCE_CHECKS)
    assert spelled == [], f"statements reading partitions themselves instead of calling cronwheel_fence: {spelled}"
    locks = sorted(n for n, body in qs.items() if re.search(r"\bFOR SHARE\b", body) and n not in NOT_FENCE_CHECKS)
    assert locks == [], f"statements taking a share lock themselves: {locks}"


def test_every_fenced_statement_calls_the_fence() -> None:
    """A statement that names the caller's epoch writes (or reads) for a partition owner: it calls
    the fence, or moves or records the epoch itself."""
    moves = {"record_epoch", "record_partition_history"}
    missing = sorted(n for n, body in queries().items()
                     if ("%(epoch)s" in body or "%(epochs)s" in body) and n not in moves
                     and "cronwheel_fence(" not in body)
    assert missing == [], f"fenced statements that do not call cronwheel_fence: {missing}"
    assert "cronwheel_fence(" in schema_functions()["cronwheel_prune_delete"]


@pytest.mark.parametrize("planted", [
    "UPDATE x SET a = 1 WHERE EXISTS (SELECT 1 FROM partitions WHERE id = %(partition)s AND epoch = %(epoch)s)",
    "WITH fence AS (SELECT p.id FROM partitions AS p JOIN unnest(%(epochs)s) f ON true FOR SHARE OF p) SELECT 1",
    "SELECT id FROM partitions WHERE id = %(partition)s AND epoch = %(epoch)s FOR SHARE",
])
def test_the_fence_rule_catches_a_spelled_out_fence(planted: str) -> None:
    assert _PARTITIONS_TABLE.search(code(planted))


# The fire guard (storage/firing.py): every statement that records a cron tick or moves a
# schedule's cursor refuses a schedule that is paused, deleted, edited since it was loaded, or
# whose cursor is no longer the tick the batch was decided from.
FIRE_STATEMENTS = ("fire_ticks_fenced", "fire_executions", "advance_schedules")
_GUARD_PARTS = ("NOT s.paused", "s.deleted_at IS NULL", "s.version = v.version")


def test_the_fire_guard_is_one_function() -> None:
    guard = schema_functions()["cronwheel_fire_guard"]
    assert "version = loaded_version AND NOT paused AND deleted_at IS NULL AND next_run_at = from_tick" in guard


@pytest.mark.parametrize("name", FIRE_STATEMENTS)
def test_every_fire_statement_calls_the_fire_guard_and_spells_none_of_it(name: str) -> None:
    sql = queries()[name]
    assert "cronwheel_fire_guard(s.version, v.version, s.paused, s.deleted_at, d.next_run_at, " in sql, name
    assert not any(part in sql for part in _GUARD_PARTS), f"{name} spells out (part of) the fire guard"


@pytest.mark.parametrize("name", FIRE_STATEMENTS)
def test_every_fire_statement_takes_queued_at_from_the_caller_not_the_database(name: str) -> None:
    sql = queries()[name]
    assert "now()" not in sql.replace("coalesce(%(now)s::timestamptz, now())", "")


@pytest.mark.parametrize("name", ("fire_ticks_fenced", "fire_executions"))
def test_every_statement_that_records_a_tick_locks_the_schedule_row_it_guards(name: str) -> None:
    """A pause, edit or delete (lock_schedule: FOR UPDATE) and the fire serialise on the schedule
    row, so a change that commits while a tick is being queued ahead still takes it back."""
    assert "FOR KEY SHARE OF s" in queries()[name]


QUOTA_MESSAGE = "'quota: max_executions_per_day ' ||"


def sql_files() -> dict[str, str]:
    """Every .sql of storage/sql/queries and schema.sql, code only, by file name."""
    folder = resources.files("cronwheel.storage").joinpath("sql", "queries")
    out = {e.name: code(e.read_text()) for e in folder.iterdir() if e.name.endswith(".sql")}
    return out | {"schema.sql": code(schema_sql())}


def raw_query(name: str) -> str:
    """A query as its .sql file writes it (includes not expanded)."""
    folder = resources.files("cronwheel.storage").joinpath("sql", "queries")
    for entry in folder.iterdir():
        if entry.name.endswith(".sql") and f"-- name: {name}\n" in (text := entry.read_text()):
            return text.split(f"-- name: {name}\n", 1)[1].split("\n-- name: ", 1)[0]
    raise KeyError(name)


def test_the_daily_quota_of_the_fire_statements_is_one_fragment_and_its_message_is_written_once() -> None:
    files = sql_files()
    written = {f: body.count(QUOTA_MESSAGE) for f, body in files.items() if QUOTA_MESSAGE in body}
    assert written == {"executions.sql": 1}, written
    rooms = {f: body.count("cronwheel_daily_room(") for f, body in files.items() if "cronwheel_daily_room(" in body}
    # the fragment, api_used_today (the submit path's count), and its definition
    assert rooms == {"executions.sql": 2, "schema.sql": 1}, rooms
    for name in ("fire_ticks_fenced", "fire_executions"):
        assert "-- include: daily_quota_over" in raw_query(name), name
        assert QUOTA_MESSAGE in queries()[name], f"{name}: the fragment was not expanded"


def test_a_fragment_is_included_where_a_query_names_it_and_an_unknown_one_is_refused() -> None:
    text = ("-- fragment: live\n-- a live row\nx.deleted_at IS NULL\n\n"
            "-- name: one\n-- one\nSELECT 1 FROM x WHERE\n    -- include: live\n  AND true;\n")
    assert parse(text) == {"one": "-- one\nSELECT 1 FROM x WHERE\n-- a live row\nx.deleted_at IS NULL\n  AND true"}
    with pytest.raises(ValueError, match="unknown fragment 'dead'"):
        parse("-- name: two\nSELECT 1 WHERE\n-- include: dead\n")


def test_one_statement_releases_a_buffered_run() -> None:
    """The single release (storage/api.py release_buffered) and the completion batch's ran twin
    statements that drifted apart (only one skipped a locked run): now both run one statement."""
    releasing = sorted(n for n, body in queries().items()
                       if "SET state = 'queued'" in body and "state_reason = 'buffered'" in body)
    assert releasing == ["release_buffered_many"], releasing
