"""Parsing: fields, names, aliases, the day rule, seconds, hashed H fields, bad input."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.cron import CronSpec, compile_spec, parse_schedule
from cronwheel.errors import InvalidArgument


def bits(mask: int) -> set[int]:
    return {i for i in range(64) if (mask >> i) & 1}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def preview(expr: str, after: str, n: int, schedule_id: str = "") -> list[str]:
    s = parse_schedule(expr, "UTC", schedule_id=schedule_id)
    return [t.strftime("%Y-%m-%d %a %H:%M:%S") for t in s.preview(utc(after), n)]


# --- fields ------------------------------------------------------------------------------------

def test_five_fields_have_an_implicit_zero_second() -> None:
    spec = compile_spec("*/15 9-17 * * MON-FRI")
    assert bits(spec.seconds) == {0}
    assert bits(spec.minutes) == {0, 15, 30, 45}
    assert bits(spec.hours) == set(range(9, 18))
    assert bits(spec.dows) == {1, 2, 3, 4, 5}


def test_six_fields_put_seconds_first() -> None:
    spec = compile_spec("*/20 5 * * * *")
    assert bits(spec.seconds) == {0, 20, 40}
    assert bits(spec.minutes) == {5}
    assert preview("*/20 5 * * * *", "2026-01-01T00:00", 4) == [
        "2026-01-01 Thu 00:05:00", "2026-01-01 Thu 00:05:20", "2026-01-01 Thu 00:05:40",
        "2026-01-01 Thu 01:05:00"]


def test_lists_ranges_steps_and_value_slash_step() -> None:
    spec = compile_spec("1,2,10-12,20-30/5,50/3 * * * *")
    assert bits(spec.minutes) == {1, 2, 10, 11, 12, 20, 25, 30, 50, 53, 56, 59}


def test_month_and_day_names_are_case_insensitive() -> None:
    assert compile_spec("0 0 * jan,Mar-MAY sun,Sat") == compile_spec("0 0 * 1,3-5 0,6")


def test_day_of_week_7_is_sunday() -> None:
    assert bits(compile_spec("0 0 * * 7").dows) == {0}
    assert bits(compile_spec("0 0 * * 5-7").dows) == {5, 6, 0}
    assert preview("0 0 * * 7", "2026-01-01T00:00", 1) == ["2026-01-04 Sun 00:00:00"]


def test_question_mark_means_any_day() -> None:
    assert compile_spec("0 0 ? * MON") == compile_spec("0 0 * * MON")


@pytest.mark.parametrize(("alias", "classic"), [
    ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"), ("@HOURLY", "0 * * * *"),
])
def test_aliases_mean_the_classic_expressions_and_are_not_hashed(alias: str, classic: str) -> None:
    assert compile_spec(alias, "any-id") == compile_spec(classic)


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # Vixie cron: the 13th of the month OR any Friday.
    assert preview("0 0 13 * FRI", "2026-02-01T00:00", 4) == [
        "2026-02-06 Fri 00:00:00", "2026-02-13 Fri 00:00:00", "2026-02-20 Fri 00:00:00",
        "2026-02-27 Fri 00:00:00"]
    assert preview("0 0 13 * FRI", "2026-03-01T00:00", 3) == [
        "2026-03-06 Fri 00:00:00", "2026-03-13 Fri 00:00:00", "2026-03-20 Fri 00:00:00"]
    assert preview("0 0 14 * FRI", "2026-03-01T00:00", 3) == [
        "2026-03-06 Fri 00:00:00", "2026-03-13 Fri 00:00:00", "2026-03-14 Sat 00:00:00"]


def test_day_of_month_and_day_of_week_when_one_is_star() -> None:
    assert preview("0 0 13 * *", "2026-01-01T00:00", 2) == [
        "2026-01-13 Tue 00:00:00", "2026-02-13 Fri 00:00:00"]
    assert preview("0 0 * * FRI", "2026-01-01T00:00", 2) == [
        "2026-01-02 Fri 00:00:00", "2026-01-09 Fri 00:00:00"]


def test_star_with_a_step_restricts_the_day_field() -> None:
    spec = compile_spec("0 0 */2 * MON")
    assert not spec.dom_star and not spec.dow_star  # so: odd days OR Mondays
    assert compile_spec("0 0 */1 * MON").dom_star


def test_february_29_waits_for_a_leap_year() -> None:
    assert preview("0 0 29 2 *", "2026-03-01T00:00", 2) == [
        "2028-02-29 Tue 00:00:00", "2032-02-29 Sun 00:00:00"]


def test_last_second_of_the_year_rolls_over() -> None:
    assert preview("59 59 23 31 12 *", "2026-06-01T00:00", 1) == ["2026-12-31 Thu 23:59:59"]
    assert preview("0 0 1 1 *", "2026-12-31T23:59:59", 1) == ["2027-01-01 Fri 00:00:00"]


def test_hour_every_flag() -> None:
    assert compile_spec("5 * * * *").hour_every
    assert compile_spec("5 0-23 * * *").hour_every
    assert not compile_spec("5 */2 * * *").hour_every
    assert not compile_spec("5 H * * *", "id").hour_every


def test_parse_cache_returns_the_same_value() -> None:
    assert compile_spec("*/5 * * * *") is compile_spec("*/5 * * * *")
    assert compile_spec("*/5 * * * *", "a") is compile_spec("*/5 * * * *", "b")


# --- hashed H fields ---------------------------------------------------------------------------

def test_h_is_stable_per_schedule_id() -> None:
    a = compile_spec("H H * * *", "schedule-42")
    assert a == compile_spec("H H * * *", "schedule-42")
    assert len(bits(a.minutes)) == 1 and len(bits(a.hours)) == 1
    spread = {min(bits(compile_spec("H H * * *", f"schedule-{i}").minutes)) for i in range(100)}
    assert len(spread) > 30  # different ids land on different minutes


def test_h_values_are_pinned() -> None:
    spec = compile_spec("H H(9-17) H * H", "tenant-1/backup")
    pinned = (bits(spec.minutes), bits(spec.hours), bits(spec.doms), bits(spec.dows))
    assert pinned == ({45}, {9}, {12}, {1})


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_h_values_stay_in_range(schedule_id: str) -> None:
    spec = compile_spec("H H(0-29)/10 H H(9-17) H H(1-5)", schedule_id)
    [s] = bits(spec.seconds)
    assert 0 <= s <= 59
    minutes = bits(spec.minutes)
    assert len(minutes) == 3 and max(minutes) <= 29
    [h] = bits(spec.hours)
    assert 0 <= h <= 23
    [d] = bits(spec.doms)
    assert 9 <= d <= 17
    [mo] = bits(spec.months)
    assert 1 <= mo <= 12
    [dow] = bits(spec.dows)
    assert 1 <= dow <= 5


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_h_steps_keep_the_step_from_a_hashed_offset(schedule_id: str) -> None:
    minutes = sorted(bits(compile_spec("H/15 * * * *", schedule_id).minutes))
    assert len(minutes) == 4 and minutes[0] < 15
    assert [b - a for a, b in zip(minutes, minutes[1:], strict=False)] == [15, 15, 15]
    ranged = sorted(bits(compile_spec("H(0-29)/10 * * * *", schedule_id).minutes))
    assert len(ranged) == 3 and ranged[0] < 10 and ranged[-1] <= 29
    assert [b - a for a, b in zip(ranged, ranged[1:], strict=False)] == [10, 10]


def test_h_in_day_of_month_stays_within_1_to_28() -> None:
    days = {min(bits(compile_spec("0 0 H * *", f"id-{i}").doms)) for i in range(2000)}
    assert days == set(range(1, 29))


def test_h_spreads_uniformly_over_ids() -> None:
    n = 60_000
    counts = Counter(min(bits(compile_spec("H * * * *", f"schedule-{i}").minutes))
                     for i in range(n))
    expected = n / 60
    chi2 = sum((counts.get(m, 0) - expected) ** 2 / expected for m in range(60))
    # 59 degrees of freedom: p = 0.001 at 99.6. A deterministic hash, so no flakiness.
    assert chi2 < 99.6, chi2
    assert min(counts.values()) > 0.85 * expected and max(counts.values()) < 1.15 * expected


def test_h_fields_are_independent_across_fields() -> None:
    pairs = Counter((min(bits(s.minutes)) % 4, min(bits(s.hours)) % 4)
                    for s in (compile_spec("H H * * *", f"x{i}") for i in range(16_000)))
    assert len(pairs) == 16 and max(pairs.values()) < 1.15 * 1000


def test_h_fires_at_the_hashed_minute() -> None:
    schedule = parse_schedule("H * * * *", "UTC", schedule_id="job-7")
    [minute] = bits(schedule.spec.minutes)
    tick = schedule.next_after(utc("2026-01-01T00:00"))
    assert tick.minute == minute and tick.second == 0


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("expr", "names"), [
    ("", "empty"),
    ("   ", "empty"),
    ("* * * *", "expected 5 fields"),
    ("* * * * * * *", "got 7"),
    ("@often", "unknown alias"),
    ("60 * * * *", "minute field '60': value 60 is out of range 0-59"),
    ("* 24 * * *", "hour field '24'"),
    ("* * 0 * *", "day-of-month field '0'"),
    ("* * 32 * *", "day-of-month field '32'"),
    ("* * * 13 *", "month field '13'"),
    ("* * * * 8", "day-of-week field '8'"),
    ("60 * * * * *", "second field '60'"),
    ("* * * FOO *", "month field 'FOO': 'FOO' is not a number or a name (JAN-DEC)"),
    ("* * * * MONDAY", "day-of-week field 'MONDAY'"),
    ("* * * * JAN", "day-of-week field 'JAN'"),
    ("*/0 * * * *", "step 0 must be in 1-60"),
    ("*/61 * * * *", "step 61"),
    ("30-10 * * * *", "range 30-10 is reversed"),
    ("1,,2 * * * *", "empty list item"),
    ("? * * * *", "'?' is only allowed in the day fields"),
    ("* L * * *", "hour field 'L': 'L' is not allowed here (L, LW and nW go in day-of-month"),
    ("L * * * *", "minute field 'L'"),
    ("* * * L *", "month field 'L'"),
    ("* 5#2 * * *", "hour field '5#2'"),
    ("* * 5L * *", "day-of-month field '5L'"),
    ("* * 1#2 * *", "day-of-month field '1#2'"),
    ("* * * * L", "day-of-week field 'L'"),
    ("* * * * 15W", "day-of-week field '15W'"),
    ("* * 32W * *", "value 32 is out of range 1-31"),
    ("* * 0W * *", "value 0 is out of range"),
    ("* * * * 8L", "value 8 is out of range 0-7"),
    ("* * * * 1#6", "occurrence 6 must be in 1-5"),
    ("* * * * 1#0", "occurrence 0 must be in 1-5"),
    ("* * L-2 * *", "day-of-month field 'L-2'"),
    ("* * L/2 * *", "day-of-month field 'L/2'"),
    ("0 0 31W 2 *", "never"),
    ("0 0 30W 2 *", "never"),
    ("0 0 * 2 1#5", "once in 28 years"),
    ("a-b * * * *", "minute field"),
    ("H(30-10) * * * *", "H(30-10) is reversed"),
    ("H(0-99) * * * *", "value 99 is out of range"),
    ("0 0 30 2 *", "never"),
    ("0 0 31 4,6,9,11 *", "never"),
])
def test_bad_expressions_raise_invalid_argument_naming_cron(expr: str, names: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        compile_spec(expr, "id")
    assert info.value.field == "cron"
    assert names in str(info.value)


def test_h_without_a_schedule_id_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="schedule id") as info:
        compile_spec("H * * * *")
    assert info.value.field == "cron"


def test_non_string_expression_is_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        compile_spec(5)  # type: ignore[arg-type]
    assert info.value.field == "cron"


def test_spec_is_a_hashable_value() -> None:
    spec = compile_spec("0 12 * * *")
    assert isinstance(spec, CronSpec)
    assert {spec: 1}[compile_spec("0 12 * * *")] == 1
    with pytest.raises(AttributeError):
        spec.hours = 0  # type: ignore[misc]
