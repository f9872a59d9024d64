"""Quartz's day specials (L, LW, nW, dL, d#k) as tables, and the DST rules applied to them.

Day-of-week numbering is cronwheel's (0 = Sunday, 7 also Sunday): `5L` is the last Friday,
`1#2` the second Monday. The 2026 transition days are Sundays that these fields name exactly:
London's are the last Sundays of March and October (`0L`), New York's the second Sunday of
March (`0#2`) and the first of November (`0#1`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from cronwheel.cluster.firing.schedule_cache import cron_for
from cronwheel.cron import (
    DstPolicy,
    GapPolicy,
    RepeatedPolicy,
    compile_spec,
    parse_schedule,
    validate_schedule_spec,
)
from cronwheel.cron.schedule import clear_memo, memo_info
from cronwheel.errors import InvalidArgument


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def days(expr: str, after: str, n: int, zone: str = "UTC") -> list[str]:
    schedule = parse_schedule(expr, zone)
    return [t.strftime("%a %Y-%m-%d") for t in schedule.preview(_utc(after), n)]


def test_l_in_day_of_month_is_the_last_day_of_the_month() -> None:
    assert days("0 9 L * *", "2027-12-31T12:00", 4) == [
        "Mon 2028-01-31", "Tue 2028-02-29", "Fri 2028-03-31", "Sun 2028-04-30"]
    assert days("0 9 L 2 *", "2026-01-01T00:00", 3) == [
        "Sat 2026-02-28", "Sun 2027-02-28", "Tue 2028-02-29"]


def test_dl_in_day_of_week_is_the_last_such_weekday_of_the_month() -> None:
    assert days("0 9 * * 5L", "2026-01-01T00:00", 4) == [
        "Fri 2026-01-30", "Fri 2026-02-27", "Fri 2026-03-27", "Fri 2026-04-24"]
    assert days("0 9 * * FRIL", "2026-01-01T00:00", 4) == days("0 9 * * 5L", "2026-01-01", 4)
    assert days("0 9 * * 7L", "2026-01-01T00:00", 3) == days("0 9 * * 0L", "2026-01-01", 3)
    assert days("0 9 * * 0L", "2026-01-01T00:00", 3) == [
        "Sun 2026-01-25", "Sun 2026-02-22", "Sun 2026-03-29"]


@pytest.mark.parametrize(("expr", "month", "want"), [
    ("0 9 15W * *", "2026-02", "Mon 2026-02-16"),  # the 15th is a Sunday -> Monday the 16th
    ("0 9 15W * *", "2026-08", "Fri 2026-08-14"),  # the 15th is a Saturday -> Friday the 14th
    ("0 9 15W * *", "2026-04", "Wed 2026-04-15"),  # a weekday stays
    ("0 9 1W * *", "2026-08", "Mon 2026-08-03"),  # Saturday the 1st: never into July
    ("0 9 31W * *", "2026-05", "Fri 2026-05-29"),  # Sunday the 31st: never into June
    ("0 9 LW * *", "2026-02", "Fri 2026-02-27"),  # the 28th is a Saturday
    ("0 9 LW * *", "2026-05", "Fri 2026-05-29"),  # the 31st is a Sunday
    ("0 9 LW * *", "2026-03", "Tue 2026-03-31"),
])
def test_w_is_the_nearest_weekday_within_the_same_month(expr: str, month: str, want: str) -> None:
    assert days(expr, f"{month}-01T00:00", 1) == [want]


def test_nw_does_not_run_in_a_month_without_day_n() -> None:
    assert days("0 9 31W * *", "2026-04-01T00:00", 1) == ["Fri 2026-05-29"]  # April skipped
    assert days("0 9 30W * *", "2026-02-01T00:00", 1) == ["Mon 2026-03-30"]  # February skipped


def test_hash_n_is_the_nth_weekday_of_the_month() -> None:
    assert days("0 9 * * 1#2", "2026-01-01T00:00", 3) == [
        "Mon 2026-01-12", "Mon 2026-02-09", "Mon 2026-03-09"]
    assert days("0 9 * * MON#2", "2026-01-01T00:00", 3) == days("0 9 * * 1#2", "2026-01-01", 3)
    # A fifth Friday exists only in some months: January, May, July, October in 2026.
    assert days("0 9 * * 5#5", "2026-01-01T00:00", 4) == [
        "Fri 2026-01-30", "Fri 2026-05-29", "Fri 2026-07-31", "Fri 2026-10-30"]


def test_specials_are_list_items_and_combine_with_plain_values() -> None:
    assert days("0 9 1,L * *", "2026-01-02T00:00", 3) == [
        "Sat 2026-01-31", "Sun 2026-02-01", "Sat 2026-02-28"]
    assert days("0 9 * * 1#1,1#3", "2026-01-01T00:00", 3) == [
        "Mon 2026-01-05", "Mon 2026-01-19", "Mon 2026-02-02"]


def test_both_day_fields_restricted_match_if_either_does_as_vixie_cron() -> None:
    # The last day of the month OR a Monday (the product's existing day rule, unchanged).
    assert days("0 9 L * 1", "2026-01-24T00:00", 3) == [
        "Mon 2026-01-26", "Sat 2026-01-31", "Mon 2026-02-02"]


def test_an_unsatisfiable_special_is_refused() -> None:
    for expr in ("0 0 31W 2 *", "0 0 * 2 1#5"):
        with pytest.raises(InvalidArgument) as info:
            compile_spec(expr)
        assert info.value.field == "cron"
    compile_spec("0 0 * 2,3 1#5")  # a fifth Monday of March exists often enough


# --- DST rules apply to the new fields exactly as to the old ones -------------------------------

def fires(expr: str, zone: str, after: str, until: str, policy: DstPolicy | None = None
          ) -> list[str]:
    schedule = parse_schedule(expr, zone, dst_policy=policy)
    return [t.strftime("%m-%d %H:%M") for t in schedule.ticks_between(_utc(after), _utc(until))]


LONDON, NEW_YORK = "Europe/London", "America/New_York"


def test_last_sunday_in_the_london_spring_gap_shifts_or_skips() -> None:
    # 29 March 2026 is the last Sunday of March; 01:30 does not exist in London.
    assert fires("30 1 * * 0L", LONDON, "2026-03-28T00:00", "2026-03-30T00:00") == [
        "03-29 01:00"]
    assert fires("30 1 * * 0L", LONDON, "2026-03-28T00:00", "2026-04-27T00:00",
                 DstPolicy(gap=GapPolicy.SKIP)) == ["04-26 00:30"]
    assert fires("30 1 * * 0L", LONDON, "2026-03-28T00:00", "2026-03-30T00:00") == fires(
        "30 1 * * 0#5", LONDON, "2026-03-28T00:00", "2026-03-30T00:00")


@pytest.mark.parametrize(("policy", "want"), [
    (None, ["10-25 00:30"]),
    (DstPolicy(repeated=RepeatedPolicy.FIRST), ["10-25 00:30"]),
    (DstPolicy(repeated=RepeatedPolicy.LAST), ["10-25 01:30"]),
    (DstPolicy(repeated=RepeatedPolicy.BOTH), ["10-25 00:30", "10-25 01:30"]),
])
def test_last_sunday_in_the_london_repeated_hour_follows_the_policy(
        policy: DstPolicy | None, want: list[str]) -> None:
    assert fires("30 1 * * 0L", LONDON, "2026-10-24T00:00", "2026-10-26T00:00", policy) == want
    assert fires("30 1 L * *", LONDON, "2026-10-30T00:00", "2026-11-01T00:00", policy) == [
        "10-31 01:30"]  # an ordinary last day: one run, whatever the policy


def test_every_hour_on_the_last_sunday_fires_both_real_one_oclocks() -> None:
    got = fires("0 * * * 0L", LONDON, "2026-10-24T22:00", "2026-10-25T03:00")
    assert got == ["10-24 23:00", "10-25 00:00", "10-25 01:00", "10-25 02:00", "10-25 03:00"]


def test_second_sunday_in_the_new_york_gap_and_first_sunday_in_its_repeated_hour() -> None:
    assert fires("30 2 * * 0#2", NEW_YORK, "2026-03-07T00:00", "2026-03-09T00:00") == [
        "03-08 07:00"]  # 02:30 EST does not exist -> 03:00 EDT
    assert fires("30 2 * * 0#2", NEW_YORK, "2026-03-07T00:00", "2026-03-09T00:00",
                 DstPolicy(gap=GapPolicy.SKIP)) == []
    assert fires("30 1 * * 0#1", NEW_YORK, "2026-10-31T00:00", "2026-11-02T00:00",
                 DstPolicy(repeated=RepeatedPolicy.BOTH)) == ["11-01 05:30", "11-01 06:30"]


def test_specials_are_memoised_like_plain_expressions() -> None:
    clear_memo()
    schedules = [parse_schedule("0 9 LW * *", "Europe/London", schedule_id=f"s{i}")
                 for i in range(50)]
    at = _utc("2026-06-01T12:00")
    assert len({s.next_after(at) for s in schedules}) == 1
    info = memo_info()
    assert "hits=49" in info and "misses=1" in info


def test_the_api_door_and_the_firing_path_parse_the_specials() -> None:
    api = validate_schedule_spec("0 9 LW * *", "Europe/London", None, "skip", None, 0.0, "")
    firing = cron_for("0 9 LW * *", "Europe/London", "shift", None, uuid.uuid4())
    at = _utc("2026-02-01T00:00")
    assert api.next_after(at) == firing.next_after(at) == _utc("2026-02-27T09:00")
    with pytest.raises(InvalidArgument) as info:
        validate_schedule_spec("0 L * * *", "Europe/London", None, "skip", None, 0.0, "")
    assert info.value.field == "cron" and "hour field" in str(info.value)
