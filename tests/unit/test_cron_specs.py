"""Interval specs, unions and exclusions, and `validate_timing` (issue 54, items 2 and 3).

Tables named after the rule; the hypothesis properties against the brute-force reference are
in test_cron_reference.py.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.cron import (
    CronSchedule,
    DateExclusion,
    DstPolicy,
    ExcludingSpec,
    IntervalSpec,
    SpecExclusion,
    UnionSpec,
    load_zone,
    parse_duration_s,
    parse_every,
    parse_schedule,
    parse_spec,
    preview,
    ticks_between,
    validate_schedule_spec,
    validate_timing,
)
from cronwheel.cron.combine import CHECK_MAX_STEPS
from cronwheel.errors import InvalidArgument

ANCHOR = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def field_of(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(InvalidArgument) as info:
        call(*args, **kwargs)
    return info.value.field


def one(item: object, field: str = "cron", zone: str = "UTC") -> Any:
    return parse_spec(item, field=field, timezone=zone, dst_policy=DstPolicy(), schedule_id="",
                      anchor=ANCHOR)


# --- durations and intervals ---------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("1h30m", 5400), ("2d", 172_800), ("1d2h3m4s", 93_784), ("15M", 900),
    (" 1h ", 3600), ("0s", 0),
])
def test_durations_are_whole_units_in_order(text: str, seconds: int) -> None:
    assert parse_duration_s(text, "every") == seconds


@pytest.mark.parametrize("text", ["", "90", "1.5h", "30m1h", "-5s", "1ms", "1w", "1h 30m", None])
def test_a_malformed_duration_names_the_field(text: object) -> None:
    assert field_of(parse_duration_s, text, "specs[3].every") == "specs[3].every"


def test_every_zero_seconds_is_invalid_argument_naming_the_field() -> None:
    assert field_of(one, "@every 0s") == "cron"
    assert field_of(one, {"every": "0s"}) == "every"
    assert field_of(one, {"every": "0s"}, field="specs[1]") == "specs[1].every"
    assert field_of(one, "@every 0s", field="specs[2]") == "specs[2]"


def test_interval_bounds_are_one_second_to_366_days() -> None:
    assert one("@every 1s") == IntervalSpec(1, int(ANCHOR.timestamp()), 0)
    assert one("@every 366d").every_s == 366 * 86400
    assert field_of(one, "@every 367d") == "cron"
    assert field_of(one, "@every") == "cron"
    assert field_of(one, "@every 1m 2s") == "cron"
    assert field_of(one, {"every": "1h", "phase": "1h"}) == "phase"
    assert field_of(one, {"every": "1h", "phase": "x"}, field="specs[0]") == "specs[0].phase"
    assert field_of(one, {"every": "1h", "offset": "5m"}) == "cron"


def test_interval_instants_are_anchor_plus_k_times_every_plus_phase() -> None:
    spec = parse_every("1h30m", ANCHOR, "15m")
    base = ANCHOR + timedelta(minutes=15)
    assert preview(spec, ANCHOR, 3) == (base, base + timedelta(minutes=90),
                                        base + timedelta(minutes=180))
    assert spec.next_after(base) == base + timedelta(minutes=90)  # strictly after
    assert spec.next_after(base - timedelta(microseconds=1)) == base
    assert spec.next_after(ANCHOR - timedelta(days=1)) == base - timedelta(minutes=90 * 16)
    assert spec.next_after(_utc("2026-07-01T00:00")).timestamp() % 1 == 0


def test_an_interval_ignores_dst_because_it_is_absolute_time() -> None:
    # Anchored at London midnight in winter: after the spring change the grid stays on UTC,
    # so `@every 24h` fires at 01:00 BST, not at local midnight.
    spec = one("@every 24h", zone="Europe/London")
    london = load_zone("Europe/London")
    ticks = list(ticks_between(spec, _utc("2026-03-28T00:00"), _utc("2026-03-31T00:00")))
    assert [t.astimezone(london).strftime("%d %H:%M:%S") for t in ticks] == [
        "28 00:00:07", "29 00:00:07", "30 01:00:07"]


def test_every_node_and_restart_computes_the_same_interval_instants() -> None:
    a = parse_every("90s", ANCHOR)
    b = parse_every("90s", ANCHOR + timedelta(microseconds=300))  # same second after floor
    later = _utc("2026-05-05T05:05:05")
    assert a == b
    assert set(preview(a, later, 50)) <= set(ticks_between(a, ANCHOR, later + timedelta(hours=2)))
    assert all((t - ANCHOR).total_seconds() % 90 == 0 for t in preview(b, later, 50))


# --- unions --------------------------------------------------------------------------------------

def test_a_union_fires_once_per_distinct_instant() -> None:
    weekdays = parse_schedule("0 9 * * 1-5", "Europe/London")
    saturday = parse_schedule("0 11 * * 6", "Europe/London")
    daily = parse_schedule("0 9 * * *", "Europe/London")
    union = UnionSpec((weekdays, saturday, daily))
    ticks = list(ticks_between(union, _utc("2026-01-02T00:00"), _utc("2026-01-05T00:00")))
    assert [t.strftime("%a %H:%M") for t in ticks] == [
        "Fri 09:00", "Sat 09:00", "Sat 11:00", "Sun 09:00"]


def test_a_union_mixes_cron_and_intervals() -> None:
    union = UnionSpec((parse_schedule("0 * * * *", "UTC"), parse_every("25m", _utc("2026-01-01"))))
    assert [t.strftime("%H:%M") for t in preview(union, _utc("2026-01-01T00:00"), 6)] == [
        "00:25", "00:50", "01:00", "01:15", "01:40", "02:00"]


# --- exclusions ----------------------------------------------------------------------------------

def test_a_date_exclusion_removes_every_instant_of_the_local_day() -> None:
    tokyo = load_zone("Asia/Tokyo")
    holiday = DateExclusion(frozenset({date(2026, 1, 2)}), "Asia/Tokyo", tokyo)
    spec = ExcludingSpec(parse_every("6h", _utc("2026-01-01T00:00")), (holiday,))
    local = [t.astimezone(tokyo).strftime("%d %H") for t in
             ticks_between(spec, _utc("2026-01-01T00:00"), _utc("2026-01-03T00:00"))]
    # 2 January in Tokyo is 1 Jan 15:00 UTC .. 2 Jan 15:00 UTC.
    assert local == ["01 15", "01 21", "03 03", "03 09"]


def test_a_date_exclusion_on_a_dst_day_removes_its_real_hours_only() -> None:
    london = load_zone("Europe/London")
    spec = ExcludingSpec(parse_schedule("0 * * * *", "Europe/London"),
                         (DateExclusion(frozenset({date(2026, 10, 25)}), "Europe/London", london),))
    ticks = list(ticks_between(spec, _utc("2026-10-24T21:30"), _utc("2026-10-26T01:00")))
    assert [t.strftime("%d %H:%M") for t in ticks] == ["24 22:00", "26 00:00", "26 01:00"]


def test_a_spec_exclusion_removes_the_instants_it_shares() -> None:
    every_15 = parse_schedule("*/15 9-10 * * *", "UTC")
    spec = ExcludingSpec(every_15, (SpecExclusion(parse_schedule("0 * * * *", "UTC")),
                                    SpecExclusion(parse_every("10m", _utc("2026-01-01")))))
    assert [t.strftime("%H:%M") for t in preview(spec, _utc("2026-01-01T00:00"), 4)] == [
        "09:15", "09:45", "10:15", "10:45"]


def test_a_removed_day_inside_a_repeated_midnight_still_moves_forward() -> None:
    # America/Santiago: clocks go back from 00:00 to 23:00 on 5 April 2026, so the 4th has a
    # second evening hour after its midnight; every tick of the 4th is removed, once.
    zone = load_zone("America/Santiago")
    spec = ExcludingSpec(parse_every("30m", _utc("2026-01-01")),
                         (DateExclusion(frozenset({date(2026, 4, 4)}), "America/Santiago", zone),))
    ticks = list(ticks_between(spec, _utc("2026-04-04T00:00"), _utc("2026-04-05T06:00")))
    assert ticks and all(t.astimezone(zone).date() != date(2026, 4, 4) for t in ticks)
    assert all(a < b for a, b in zip(ticks, ticks[1:], strict=False))


# --- validate_timing -----------------------------------------------------------------------------

def timing(specs: Any, exclusions: Any = None, **kw: Any) -> Any:
    kw.setdefault("timezone", "Europe/London")
    kw.setdefault("anchor", ANCHOR)
    return validate_timing(specs, exclusions, **kw)


def test_one_spec_without_exclusions_is_the_plain_schedule() -> None:
    assert isinstance(timing(["0 9 * * *"]), CronSchedule)
    assert isinstance(timing(["@every 90s"]), IntervalSpec)
    assert isinstance(timing(["0 9 * * *", {"every": "1h"}]), UnionSpec)
    assert isinstance(timing(["0 9 * * *"], [{"dates": ["2026-12-25"]}]), ExcludingSpec)


@pytest.mark.parametrize(("specs", "exclusions", "kw", "field"), [
    ([], None, {}, "specs"),
    ("0 9 * * *", None, {}, "specs"),
    (["0 9 * * *"] * 21, None, {}, "specs"),
    (["0 9 * * *", "0 L * * *"], None, {}, "specs[1]"),
    (["0 9 * * *", "@every 0s"], None, {}, "specs[1]"),
    (["0 9 * * *", {"every": "0s"}], None, {}, "specs[1].every"),
    (["0 9 * * *", 5], None, {}, "specs[1]"),
    (["0 9 * * *"], "0 9 * * 0", {}, "exclusions"),
    (["0 9 * * *"], ["0 9 * * 0", "0 9 * * 8"], {}, "exclusions[1]"),
    (["0 9 * * *"], [{"dates": ["2026-12-25", "25/12/2026"]}], {}, "exclusions[0].dates[1]"),
    (["0 9 * * *"], [{"dates": []}], {}, "exclusions[0].dates"),
    (["0 9 * * *"], [{"dates": ["2026-12-25"], "cron": "x"}], {}, "exclusions[0]"),
    (["0 9 * * *"], None, {"timezone": "Mars/Olympus"}, "timezone"),
    (["0 9 * * *"], None, {"dst_policy": {"gap": "later"}}, "dst_policy.gap"),
    (["0 9 * * *"], None, {"start": _utc("2026-02-01"), "end": _utc("2026-01-01")}, "end_at"),
    (["0 9 * * *"], None, {"start": _utc("2026-02-01"), "end": _utc("2026-02-01")}, "end_at"),
])
def test_bad_timing_names_the_field(specs: Any, exclusions: Any, kw: dict[str, Any],
                                    field: str) -> None:
    assert field_of(timing, specs, exclusions, **kw) == field


def test_an_exclusion_that_removes_every_instant_of_the_window_is_refused() -> None:
    days = [f"2026-12-{d}" for d in (24, 25, 26)]
    window = {"start": _utc("2026-12-24T00:00"), "end": _utc("2026-12-26T23:00")}
    assert field_of(timing, ["0 9 * * *"], [{"dates": days}], **window) == "exclusions[0]"
    assert field_of(timing, ["0 9 * * *"], [{"dates": days[:1]}, {"dates": days[1:]}],
                    **window) == "exclusions"
    timing(["0 9 * * *"], [{"dates": days}], start=window["start"], end=_utc("2026-12-27T10:00"))


def test_an_exclusion_that_removes_every_instant_for_ten_years_is_refused() -> None:
    assert field_of(timing, ["0 9 * * 1-5"], ["0 9 * * MON-FRI"]) == "exclusions[0]"
    assert field_of(timing, ["@every 1d"], [{"every": "12h"}]) == "exclusions[0]"
    # Removing the first 9 years leaves the tenth: accepted.
    years = [{"dates": [(date(2026, 1, 1) + timedelta(days=i)).isoformat()
                        for i in range(k * 1000, min((k + 1) * 1000, 3287))]} for k in range(4)]
    spec = timing(["0 9 1 1 *"], years)
    assert spec.next_after(ANCHOR) == _utc("2035-01-01T09:00")


def test_the_removal_check_is_bounded_and_says_so() -> None:
    with pytest.raises(InvalidArgument) as info:
        timing(["* * * * * *"], ["* * * * * *"], timezone="UTC")
    assert info.value.field == "exclusions"
    assert f"the first {CHECK_MAX_STEPS} ticks" in str(info.value)


def test_the_api_validation_of_one_cron_is_unchanged() -> None:
    # `@every` goes through validate_timing / parse_spec only; the API's cron door is as before.
    with pytest.raises(InvalidArgument, match="unknown alias") as info:
        validate_schedule_spec("@every 90s", "UTC", None, "skip", None, 0.0, "")
    assert info.value.field == "cron"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["*/7 * * * *", "30 1 * * *", "0 9 1 * *", "0 2 * * 0L", "0 0 29 2 *",
                        "15 1-3 * * 0#1", "0 9 LW * *"]),
       st.sampled_from(["Europe/London", "America/New_York", "Australia/Lord_Howe"]),
       st.integers(int(_utc("2025-01-01").timestamp()), int(_utc("2028-01-01").timestamp())),
       st.one_of(st.integers(0, 3 * 3600), st.integers(0, 400 * 86400)))
def test_a_bounded_search_agrees_with_next_after(expr: str, zone: str, t: int, ahead: int
                                                 ) -> None:
    # The union's later members stop at the best tick so far; they must not change the answer.
    schedule = parse_schedule(expr, zone)
    at, bound = datetime.fromtimestamp(t, UTC), datetime.fromtimestamp(t + ahead, UTC)
    full = schedule.next_after(at)
    assert schedule.next_after_until(at, bound) == (full if full <= bound else None)
