"""Retention's pure parts: the node's windows as flags parse them, the limits the API applies,
and explain's PRUNED_BY_RETENTION (in its place among the other outcomes)."""

from __future__ import annotations

import pytest

from cronwheel.cluster.commands.explain import Facts
from cronwheel.cluster.retention.policy import (
    DAY_S,
    RetentionConfig,
    keep_for,
    keep_last,
    parse_type_windows,
    parse_window,
)
from cronwheel.errors import InvalidArgument
from cronwheel.storage.retention import PrunedMark, TypeWindows, Windows

from .test_explain import ev, ex, m, outcomes, own, sched


def test_windows_parse_with_units_and_forever() -> None:
    assert parse_window("--retention-succeeded", "7d") == 7 * DAY_S
    assert parse_window("--retention-succeeded", "90m") == 5400.0
    assert parse_window("--retention-succeeded", "3600") == 3600.0
    assert parse_window("--retention-failed", " Forever ") is None
    assert parse_type_windows("--retention-job-type", "report=2d,14d") == TypeWindows("report", 2 * DAY_S,
                                                                                       14 * DAY_S)
    assert parse_type_windows("--retention-job-type", "x=12h") == TypeWindows("x", 43200.0, 43200.0)


@pytest.mark.parametrize(("text", "field"), [("7 days", "--retention-succeeded"), ("30s", "--retention-succeeded"),
                                             ("=2d", "--retention-job-type"), ("report", "--retention-job-type")])
def test_a_bad_window_names_the_flag(text: str, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        if field == "--retention-job-type":
            parse_type_windows(field, text)
        else:
            parse_window(field, text)
    assert err.value.field == field


def test_the_api_limits_name_the_field() -> None:
    assert keep_last("keep_last", None) is None and keep_last("keep_last", 0) == 0
    assert keep_for("keep_failed_for", None) is None and keep_for("keep_failed_for", 60.0) == 60.0
    for bad in (-1, 100_001):
        with pytest.raises(InvalidArgument, match="keep_last"):
            keep_last("keep_last", bad)
    for bad_s in (59.0, 3651 * DAY_S):
        with pytest.raises(InvalidArgument, match="keep_succeeded_for"):
            keep_for("keep_succeeded_for", bad_s)


def test_the_config_refuses_a_job_type_twice_and_knows_its_shortest_window() -> None:
    with pytest.raises(InvalidArgument, match="twice"):
        RetentionConfig(by_type=(TypeWindows("a", 60.0, 60.0), TypeWindows("a", 120.0, None))).validate()
    assert RetentionConfig().windows().shortest_s() == 7 * DAY_S
    assert Windows(None, None, (TypeWindows("a", None, 3600.0),)).shortest_s() == 3600.0
    assert Windows(None, None).shortest_s() is None


def test_explain_says_pruned_by_retention_for_the_ticks_retention_removed_and_missed_for_the_others() -> None:
    """Issue 47 item 8: every tick up to the pruned mark was called pruned, so tick 3 (never fired:
    retention did not remove it) hid behind it. Fails without the per-tick record."""
    f = Facts(sched(), [ex(6), ex(7)], [ev("schedule_paused", 1.5), ev("schedule_resumed", 2.5)],
              [own("acquired", 1, "n1", 0)], pruned=PrunedMark(m(4), 3), pruned_ticks=frozenset({m(0), m(1), m(4)}))
    got = outcomes(f, 0, 9, 20)
    assert [got[i][0] for i in range(9)] == ["PRUNED_BY_RETENTION", "PRUNED_BY_RETENTION", "PAUSED",
                                              "MISSED", "PRUNED_BY_RETENTION", "MISSED",
                                              "FIRED", "FIRED", "MISSED"]
    assert got[0][1].startswith("pruned by retention") and "3 so far" in got[0][1]
    assert "no record explains it" in got[3][1]


def test_ticks_pruned_before_the_ticks_were_recorded_still_read_pruned() -> None:
    """Runs pruned before migration 0020 left no per-tick record: up to `untracked_through` explain
    cannot tell a missed tick from a pruned one, and keeps saying pruned there."""
    f = Facts(sched(), [], [], [own("acquired", 1, "n1", 0)],
              pruned=PrunedMark(m(4), 5, untracked_through=m(2)), pruned_ticks=frozenset({m(4)}))
    got = outcomes(f, 0, 6, 20)
    assert [got[i][0] for i in range(6)] == ["PRUNED_BY_RETENTION"] * 3 + ["MISSED", "PRUNED_BY_RETENTION", "MISSED"]
