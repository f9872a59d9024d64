"""DST rules as tables: exactly which UTC instants fire on the 2026 transition days.

2026 transitions used here:
  Europe/London     forward 29 Mar 01:00 UTC (01:00 GMT -> 02:00 BST)
                    back    25 Oct 01:00 UTC (02:00 BST -> 01:00 GMT; 01:xx happens twice)
  America/New_York  forward  8 Mar 07:00 UTC (02:00 EST -> 03:00 EDT)
                    back     1 Nov 06:00 UTC (02:00 EDT -> 01:00 EST; 01:xx happens twice)
  Australia/Lord_Howe (30-minute shift)
                    back     4 Apr 15:00 UTC (02:00 +11 -> 01:30 +10:30)
                    forward  3 Oct 15:30 UTC (02:00 +10:30 -> 02:30 +11)
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronwheel.cron import DstPolicy, GapPolicy, RepeatedPolicy, parse_schedule

SHIFT, SKIP = GapPolicy.SHIFT, GapPolicy.SKIP
FIRST, LAST, BOTH = RepeatedPolicy.FIRST, RepeatedPolicy.LAST, RepeatedPolicy.BOTH
LONDON, NEW_YORK = "Europe/London", "America/New_York"
ALL_POLICIES = [DstPolicy(g, r) for g in (None, SHIFT, SKIP) for r in (None, FIRST, LAST, BOTH)]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expr: str, zone: str, after: str, until: str, policy: DstPolicy | None = None
          ) -> list[str]:
    """UTC fire times in (after, until], as 'MM-DD HH:MM' strings."""
    schedule = parse_schedule(expr, zone, dst_policy=policy)
    return [t.strftime("%m-%d %H:%M")
            for t in schedule.ticks_between(_utc(after), _utc(until))]


def london_spring(expr: str, policy: DstPolicy | None = None) -> list[str]:
    return fires(expr, LONDON, "2026-03-28T22:00", "2026-03-29T04:00", policy)


def london_autumn(expr: str, policy: DstPolicy | None = None) -> list[str]:
    return fires(expr, LONDON, "2026-10-24T22:00", "2026-10-25T04:00", policy)


def ny_spring(expr: str, policy: DstPolicy | None = None) -> list[str]:
    return fires(expr, NEW_YORK, "2026-03-08T04:00", "2026-03-08T10:00", policy)


def ny_autumn(expr: str, policy: DstPolicy | None = None) -> list[str]:
    return fires(expr, NEW_YORK, "2026-11-01T03:00", "2026-11-01T09:00", policy)


# --- spring forward: the gap -------------------------------------------------------------------

def test_spring_gap_shift_runs_once_at_gap_end_london() -> None:
    assert london_spring("30 1 * * *") == ["03-29 01:00"]  # 01:30 GMT never happens -> 02:00 BST
    assert london_spring("30 1 * * *", DstPolicy(gap=SHIFT)) == ["03-29 01:00"]


def test_spring_gap_shift_runs_once_at_gap_end_new_york() -> None:
    assert ny_spring("30 2 * * *") == ["03-08 07:00"]  # 02:30 EST never happens -> 03:00 EDT
    assert ny_spring("30 2 * * *", DstPolicy(gap=SHIFT)) == ["03-08 07:00"]


def test_spring_gap_skip_does_not_run_london() -> None:
    assert london_spring("30 1 * * *", DstPolicy(gap=SKIP)) == []


def test_spring_gap_skip_does_not_run_new_york() -> None:
    assert ny_spring("30 2 * * *", DstPolicy(gap=SKIP)) == []


def test_spring_gap_several_matches_collapse_into_one_run() -> None:
    assert london_spring("*/15 1 * * *") == ["03-29 01:00"]
    assert ny_spring("*/15 2 * * *") == ["03-08 07:00"]
    assert ny_spring("*/15 2 * * *", DstPolicy(gap=SKIP)) == []


def test_spring_gap_run_merges_with_a_real_match_at_gap_end() -> None:
    # London: 01:00 and 01:30 do not exist; 02:00 BST matches by itself and takes the shifted run.
    for policy in ALL_POLICIES:
        assert london_spring("*/30 1-2 * * *", policy) == ["03-29 01:00", "03-29 01:30"]
    # New York: 02:xx does not exist and 03:00 does not match, so shift vs skip differ.
    assert ny_spring("*/30 1-2 * * *") == ["03-08 06:00", "03-08 06:30", "03-08 07:00"]
    assert ny_spring("*/30 1-2 * * *", DstPolicy(gap=SKIP)) == ["03-08 06:00", "03-08 06:30"]


def test_star_hour_fires_every_real_hour_on_spring_day() -> None:
    assert london_spring("0 * * * *") == [
        "03-28 23:00", "03-29 00:00", "03-29 01:00", "03-29 02:00", "03-29 03:00", "03-29 04:00"]
    assert ny_spring("0 * * * *") == [
        "03-08 05:00", "03-08 06:00", "03-08 07:00", "03-08 08:00", "03-08 09:00", "03-08 10:00"]


def test_star_hour_invents_nothing_in_the_gap() -> None:
    assert london_spring("30 * * * *") == [
        "03-28 22:30", "03-28 23:30", "03-29 00:30", "03-29 01:30", "03-29 02:30", "03-29 03:30"]


def test_star_hour_with_explicit_gap_shift_runs_at_the_jump() -> None:
    assert london_spring("30 * * * *", DstPolicy(gap=SHIFT)) == [
        "03-28 22:30", "03-28 23:30", "03-29 00:30", "03-29 01:00", "03-29 01:30",
        "03-29 02:30", "03-29 03:30"]


def test_repeated_policy_does_not_change_the_spring_day() -> None:
    for expr in ("30 1 * * *", "0 * * * *", "*/30 1-2 * * *"):
        for r in (FIRST, LAST, BOTH):
            assert london_spring(expr, DstPolicy(repeated=r)) == london_spring(expr)
            assert ny_spring(expr, DstPolicy(repeated=r)) == ny_spring(expr)


# --- fall back: the repeated hour --------------------------------------------------------------

def test_autumn_repeated_hour_first_runs_once_london() -> None:
    assert london_autumn("30 1 * * *") == ["10-25 00:30"]  # 01:30 BST
    assert london_autumn("30 1 * * *", DstPolicy(repeated=FIRST)) == ["10-25 00:30"]


def test_autumn_repeated_hour_first_runs_once_new_york() -> None:
    assert ny_autumn("30 1 * * *") == ["11-01 05:30"]  # 01:30 EDT
    assert ny_autumn("30 1 * * *", DstPolicy(repeated=FIRST)) == ["11-01 05:30"]


def test_autumn_repeated_hour_last_runs_at_second_occurrence() -> None:
    assert london_autumn("30 1 * * *", DstPolicy(repeated=LAST)) == ["10-25 01:30"]  # 01:30 GMT
    assert ny_autumn("30 1 * * *", DstPolicy(repeated=LAST)) == ["11-01 06:30"]  # 01:30 EST


def test_autumn_repeated_hour_both_runs_twice() -> None:
    assert london_autumn("30 1 * * *", DstPolicy(repeated=BOTH)) == ["10-25 00:30", "10-25 01:30"]
    assert ny_autumn("30 1 * * *", DstPolicy(repeated=BOTH)) == ["11-01 05:30", "11-01 06:30"]


def test_autumn_time_after_the_repeated_hour_runs_once_whatever_the_policy() -> None:
    for policy in ALL_POLICIES:
        assert ny_autumn("30 2 * * *", policy) == ["11-01 07:30"]  # 02:30 EST exists once


def test_star_hour_fires_every_real_hour_on_autumn_day() -> None:
    assert london_autumn("0 * * * *") == [
        "10-24 23:00", "10-25 00:00", "10-25 01:00", "10-25 02:00", "10-25 03:00", "10-25 04:00"]
    assert ny_autumn("0 * * * *") == [
        "11-01 04:00", "11-01 05:00", "11-01 06:00", "11-01 07:00", "11-01 08:00", "11-01 09:00"]


def test_star_hour_explicit_first_overrides_the_every_hour_rule() -> None:
    assert london_autumn("0 * * * *", DstPolicy(repeated=FIRST)) == [
        "10-24 23:00", "10-25 00:00", "10-25 02:00", "10-25 03:00", "10-25 04:00"]
    assert ny_autumn("0 * * * *", DstPolicy(repeated=FIRST)) == [
        "11-01 04:00", "11-01 05:00", "11-01 07:00", "11-01 08:00", "11-01 09:00"]


def test_star_hour_explicit_last_overrides_the_every_hour_rule() -> None:
    assert london_autumn("0 * * * *", DstPolicy(repeated=LAST)) == [
        "10-24 23:00", "10-25 01:00", "10-25 02:00", "10-25 03:00", "10-25 04:00"]


def test_star_hour_gap_override_alone_keeps_both_passes_of_the_repeated_hour() -> None:
    assert london_autumn("0 * * * *", DstPolicy(gap=SHIFT)) == london_autumn("0 * * * *")


def test_hour_range_covering_every_hour_counts_as_star_hour() -> None:
    assert london_autumn("0 0-23 * * *") == london_autumn("0 * * * *")
    assert london_autumn("0 */1 * * *") == london_autumn("0 * * * *")


def test_autumn_range_over_repeated_hour_each_policy() -> None:
    expr = "*/30 1-2 * * *"
    assert london_autumn(expr) == ["10-25 00:00", "10-25 00:30", "10-25 02:00", "10-25 02:30"]
    assert london_autumn(expr, DstPolicy(repeated=LAST)) == [
        "10-25 01:00", "10-25 01:30", "10-25 02:00", "10-25 02:30"]
    assert london_autumn(expr, DstPolicy(repeated=BOTH)) == [
        "10-25 00:00", "10-25 00:30", "10-25 01:00", "10-25 01:30", "10-25 02:00", "10-25 02:30"]
    assert ny_autumn(expr) == ["11-01 05:00", "11-01 05:30", "11-01 07:00", "11-01 07:30"]
    assert ny_autumn(expr, DstPolicy(repeated=LAST)) == [
        "11-01 06:00", "11-01 06:30", "11-01 07:00", "11-01 07:30"]
    assert ny_autumn(expr, DstPolicy(repeated=BOTH)) == [
        "11-01 05:00", "11-01 05:30", "11-01 06:00", "11-01 06:30", "11-01 07:00", "11-01 07:30"]


def test_gap_policy_does_not_change_the_autumn_day() -> None:
    for expr in ("30 1 * * *", "0 * * * *", "*/30 1-2 * * *"):
        for r in (None, FIRST, LAST, BOTH):
            for g in (SHIFT, SKIP):
                assert london_autumn(expr, DstPolicy(g, r)) == london_autumn(expr, DstPolicy(None, r))
                assert ny_autumn(expr, DstPolicy(g, r)) == ny_autumn(expr, DstPolicy(None, r))


def test_croniter_double_fire_regression_30_1_fires_once_on_london_autumn_day() -> None:
    # croniter 7 fires this job at 00:30 and again at 01:30 UTC on 25 Oct.
    assert fires("30 1 * * *", LONDON, "2026-10-24T00:00", "2026-10-27T00:00") == [
        "10-24 00:30", "10-25 00:30", "10-26 01:30"]


@pytest.mark.parametrize(("after", "policy", "expected"), [
    ("2026-10-25T01:10", DstPolicy(repeated=BOTH), "2026-10-25T01:30"),
    ("2026-10-25T01:10", DstPolicy(repeated=FIRST), "2026-10-25T02:00"),
    ("2026-10-25T01:10", DstPolicy(repeated=LAST), "2026-10-25T01:30"),
    ("2026-10-25T00:40", DstPolicy(repeated=BOTH), "2026-10-25T01:00"),  # second pass of 01:00
    ("2026-10-25T00:40", DstPolicy(repeated=FIRST), "2026-10-25T02:00"),
    ("2026-10-24T23:59", DstPolicy(repeated=LAST), "2026-10-25T01:00"),
])
def test_next_after_from_inside_the_repeated_hour(after: str, policy: DstPolicy,
                                                  expected: str) -> None:
    schedule = parse_schedule("*/30 1-2 * * *", LONDON, dst_policy=policy)
    assert schedule.next_after(_utc(after)) == _utc(expected)


# --- other zones ---------------------------------------------------------------------------------

def test_lord_howe_half_hour_gap_shifts_to_the_jump() -> None:
    zone = "Australia/Lord_Howe"
    after, until = "2026-10-03T12:00", "2026-10-03T18:00"
    assert fires("15 2 * * *", zone, after, until) == ["10-03 15:30"]  # -> 02:30 +11
    assert fires("15 2 * * *", zone, after, until, DstPolicy(gap=SKIP)) == []
    # Every hour: 01:00 +10:30, (02:00 does not exist), 03:00 +11.
    assert fires("0 * * * *", zone, after, until) == [
        "10-03 12:30", "10-03 13:30", "10-03 14:30", "10-03 16:00", "10-03 17:00", "10-03 18:00"]


def test_lord_howe_half_hour_repeat_each_policy() -> None:
    zone = "Australia/Lord_Howe"
    after, until = "2026-04-04T12:00", "2026-04-04T18:00"
    assert fires("45 1 * * *", zone, after, until) == ["04-04 14:45"]  # 01:45 +11
    assert fires("45 1 * * *", zone, after, until, DstPolicy(repeated=LAST)) == ["04-04 15:15"]
    assert fires("45 1 * * *", zone, after, until, DstPolicy(repeated=BOTH)) == [
        "04-04 14:45", "04-04 15:15"]
    assert fires("15 1 * * *", zone, after, until, DstPolicy(repeated=LAST)) == ["04-04 14:15"]


def test_zone_without_dst_fires_at_the_same_utc_time_every_day() -> None:
    got = fires("30 2 * * *", "Asia/Kolkata", "2026-03-26T00:00", "2026-03-31T00:00",
                DstPolicy(SKIP, BOTH))
    assert got == ["03-26 21:00", "03-27 21:00", "03-28 21:00", "03-29 21:00", "03-30 21:00"]


def test_host_zone_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert fires("0 12 * * *", "UTC", "2026-01-01T00:00", "2026-01-02T00:00") == ["01-01 12:00"]
