"""Misfire, overlap and jitter decisions; the API validation entry point."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.cron import (
    MAX_JITTER_S,
    CronSchedule,
    DstPolicy,
    GapPolicy,
    MisfireDecision,
    MisfirePolicy,
    OverlapAction,
    OverlapPolicy,
    RepeatedPolicy,
    decide_misfire,
    decide_overlap,
    jitter_offset_s,
    parse_schedule,
    validate_schedule_spec,
)
from cronwheel.errors import InvalidArgument

EVERY_10 = parse_schedule("*/10 * * * *", "UTC")


def at(hh_mm: str, day: str = "2026-05-04") -> datetime:
    return datetime.fromisoformat(f"{day}T{hh_mm}").replace(tzinfo=UTC)


# --- misfire -----------------------------------------------------------------------------------

def test_misfire_skip_fires_nothing_and_records_every_missed_tick() -> None:
    d = decide_misfire(EVERY_10, at("12:00"), at("12:35"), MisfirePolicy.SKIP)
    assert d == MisfireDecision(skipped=(at("12:10"), at("12:20"), at("12:30")), skipped_count=3,
                                latest_missed=at("12:30"))
    assert not d.alert and d.missed_count == 3


def test_misfire_run_once_fires_only_the_latest_missed_tick() -> None:
    d = decide_misfire(EVERY_10, at("12:00"), at("12:35"), "run_once")
    assert d.fire == (at("12:30"),)
    assert d.skipped == (at("12:10"), at("12:20")) and d.skipped_count == 2
    assert not d.alert and d.latest_missed == at("12:30")


def test_misfire_catch_up_fires_every_missed_tick_in_order() -> None:
    d = decide_misfire(EVERY_10, at("12:00"), at("12:35"), MisfirePolicy.CATCH_UP, 5)
    assert d.fire == (at("12:10"), at("12:20"), at("12:30"))
    assert d.skipped == d.refused == () and not d.alert


def test_misfire_catch_up_exactly_max_catch_up_ticks_fires_them_all() -> None:
    d = decide_misfire(EVERY_10, at("12:00"), at("12:35"), MisfirePolicy.CATCH_UP, 3)
    assert len(d.fire) == 3 and not d.alert


def test_misfire_catch_up_beyond_max_catch_up_replays_none_and_alerts() -> None:
    d = decide_misfire(EVERY_10, at("12:00"), at("12:35"), MisfirePolicy.CATCH_UP, 2)
    assert d.fire == ()
    assert d.refused == (at("12:10"), at("12:20"), at("12:30")) and d.refused_count == 3
    assert d.alert and d.latest_missed == at("12:30")


def test_misfire_tick_due_exactly_now_counts_as_missed() -> None:
    d = decide_misfire(EVERY_10, at("12:00"), at("12:10"), MisfirePolicy.RUN_ONCE)
    assert d.fire == (at("12:10"),)


def test_misfire_last_scheduled_for_itself_is_not_missed_again() -> None:
    d = decide_misfire(EVERY_10, at("12:10"), at("12:19:59"), MisfirePolicy.CATCH_UP, 10)
    assert d == MisfireDecision()


def test_misfire_with_no_previous_tick_decides_nothing() -> None:
    assert decide_misfire(EVERY_10, None, at("12:35"), MisfirePolicy.SKIP) == MisfireDecision()


def test_misfire_run_once_over_the_repeated_hour_fires_the_latest_real_tick() -> None:
    hourly = parse_schedule("0 * * * *", "Europe/London")
    d = decide_misfire(hourly, at("23:00", "2026-10-24"), at("01:30", "2026-10-25"),
                       MisfirePolicy.RUN_ONCE)
    assert d.fire == (at("01:00", "2026-10-25"),)  # 01:00 GMT, the second 01:00
    assert d.skipped == (at("00:00", "2026-10-25"),)


def test_misfire_work_is_bounded_for_a_month_long_outage() -> None:
    every_second = parse_schedule("* * * * * *", "Europe/London")
    last, now = at("00:00", "2026-03-01"), at("12:34:56", "2026-04-01")  # 2.7 million ticks
    started = time.perf_counter()
    run_once = decide_misfire(every_second, last, now, MisfirePolicy.RUN_ONCE)
    catch_up = decide_misfire(every_second, last, now, MisfirePolicy.CATCH_UP, 1000)
    skip = decide_misfire(every_second, last, now, MisfirePolicy.SKIP, record_limit=10)
    assert time.perf_counter() - started < 2.0
    assert run_once.fire == (now,) and run_once.counts_are_lower_bounds
    assert len(run_once.skipped) == run_once.skipped_count == 1000
    assert run_once.skipped[0] == last + timedelta(seconds=1)
    assert catch_up.fire == () and catch_up.alert and catch_up.refused_count == 1001
    assert len(catch_up.refused) == 1000 and catch_up.latest_missed == now
    assert len(skip.skipped) == 10 and skip.latest_missed == now


SCHEDULES = [parse_schedule(e, z, dst_policy=p) for e, z, p in [
    ("*/7 * * * *", "UTC", None),
    ("0 * * * *", "Europe/London", None),
    ("30 1 * * *", "Europe/London", DstPolicy(repeated=RepeatedPolicy.BOTH)),
    ("*/30 1-2 * * *", "America/New_York", DstPolicy(gap=GapPolicy.SKIP)),
    ("15 */3 * * MON-FRI", "Australia/Lord_Howe", None),
]]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SCHEDULES), st.integers(0, 40 * 86400), st.integers(0, 3 * 86400),
       st.sampled_from(list(MisfirePolicy)), st.integers(1, 40), st.integers(1, 30))
def test_misfire_decisions_agree_with_the_full_list_of_missed_ticks(
        schedule: CronSchedule, start_s: int, outage_s: int, policy: MisfirePolicy,
        max_catch_up: int, record_limit: int) -> None:
    last = at("00:00", "2026-03-01") + timedelta(seconds=start_s)
    now = last + timedelta(seconds=outage_s)
    missed = list(schedule.ticks_between(last, now))
    d = decide_misfire(schedule, last, now, policy, max_catch_up, record_limit=record_limit)
    assert all(a < b for a, b in zip(d.fire, d.fire[1:], strict=False))
    assert all(last < t <= now for t in d.fire + d.skipped + d.refused)
    assert d.latest_missed == (missed[-1] if missed else None)
    assert len(d.skipped) <= d.skipped_count and len(d.refused) <= d.refused_count
    if d.counts_are_lower_bounds:
        assert d.missed_count <= len(missed)
    else:
        assert d.missed_count == len(missed)
    if policy is MisfirePolicy.SKIP:
        assert d.fire == () and d.skipped == tuple(missed[:record_limit])
    elif policy is MisfirePolicy.RUN_ONCE:
        assert d.fire == ((missed[-1],) if missed else ())
    elif len(missed) <= max_catch_up:
        assert d.fire == tuple(missed) and not d.alert
    else:
        assert d.fire == () and d.alert and d.refused == tuple(missed[:record_limit])


@pytest.mark.parametrize("policy", [None, ""])
def test_misfire_policy_is_required(policy: str | None) -> None:
    with pytest.raises(InvalidArgument, match="required") as info:
        decide_misfire(EVERY_10, at("12:00"), at("12:35"), policy)
    assert info.value.field == "misfire_policy"


@pytest.mark.parametrize("bad", [None, 0, 1001, -1, "5", True, 2.5])
def test_catch_up_needs_max_catch_up_in_1_to_1000(bad: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        decide_misfire(EVERY_10, at("12:00"), at("12:35"), MisfirePolicy.CATCH_UP,
                       bad)  # type: ignore[arg-type]
    assert info.value.field == "max_catch_up"


# --- overlap -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "running", "buffered", "action"), [
    (OverlapPolicy.FORBID, 0, 0, OverlapAction.START),
    (OverlapPolicy.FORBID, 1, 0, OverlapAction.SKIP),
    (OverlapPolicy.ALLOW, 0, 0, OverlapAction.START),
    (OverlapPolicy.ALLOW, 3, 0, OverlapAction.START),
    (OverlapPolicy.REPLACE, 0, 0, OverlapAction.START),
    (OverlapPolicy.REPLACE, 1, 0, OverlapAction.CANCEL_RUNNING_THEN_START),
    (OverlapPolicy.BUFFER_ONE, 0, 0, OverlapAction.START),
    (OverlapPolicy.BUFFER_ONE, 1, 0, OverlapAction.BUFFER),
    (OverlapPolicy.BUFFER_ONE, 1, 1, OverlapAction.SKIP),
    (OverlapPolicy.BUFFER_ONE, 0, 1, OverlapAction.START),  # nothing ahead would release it
    (OverlapPolicy.BUFFER_ALL, 0, 0, OverlapAction.START),
    (OverlapPolicy.BUFFER_ALL, 1, 0, OverlapAction.BUFFER),
    (OverlapPolicy.BUFFER_ALL, 1, 7, OverlapAction.BUFFER),
    (OverlapPolicy.BUFFER_ALL, 0, 2, OverlapAction.START),
    ("forbid", 2, 0, OverlapAction.SKIP),
])
def test_overlap_decision_per_policy(policy: OverlapPolicy | str, running: int, buffered: int,
                                     action: OverlapAction) -> None:
    decision = decide_overlap(policy, running, buffered)
    assert decision.action is action
    assert decision.reason


@pytest.mark.parametrize(("args", "field"), [
    (("sometimes", 0, 0), "overlap_policy"),
    ((None, 0, 0), "overlap_policy"),
    (("allow", -1, 0), "running"),
    (("allow", 0, -1), "buffered"),
])
def test_overlap_bad_input(args: tuple[object, object, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        decide_overlap(*args)  # type: ignore[arg-type]
    assert info.value.field == field


# --- jitter ------------------------------------------------------------------------------------

def test_jitter_is_zero_without_a_window() -> None:
    assert jitter_offset_s("s1", at("12:00"), 0) == 0.0


def test_jitter_is_deterministic_and_within_the_window() -> None:
    first = jitter_offset_s("s1", at("12:00"), 30)
    assert first == jitter_offset_s("s1", at("12:00"), 30)
    same_instant_elsewhere = at("12:00").astimezone(ZoneInfo("Asia/Tokyo"))
    assert first == jitter_offset_s("s1", same_instant_elsewhere, 30)
    assert 0 <= first < 30
    assert first != jitter_offset_s("s2", at("12:00"), 30)
    assert first != jitter_offset_s("s1", at("12:10"), 30)


def test_jitter_spreads_uniformly() -> None:
    values = [jitter_offset_s(f"s{i}", at("12:00"), 60) for i in range(20_000)]
    assert all(0 <= v < 60 for v in values)
    buckets = [0] * 10
    for v in values:
        buckets[int(v // 6)] += 1
    assert min(buckets) > 1800 and max(buckets) < 2200


@settings(max_examples=200)
@given(st.text(max_size=20), st.integers(0, 10**10),
       st.floats(min_value=0, max_value=MAX_JITTER_S, allow_nan=False))
def test_jitter_is_always_in_zero_to_window(schedule_id: str, ts: int, window: float) -> None:
    tick = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=ts)
    value = jitter_offset_s(schedule_id, tick, window)
    assert value == 0.0 if window == 0 else 0 <= value < window


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, MAX_JITTER_S + 1, 86_400, "5", True])
def test_jitter_window_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        jitter_offset_s("s1", at("12:00"), bad)  # type: ignore[arg-type]
    assert info.value.field == "jitter_s"


def test_jitter_needs_an_aware_tick() -> None:
    with pytest.raises(InvalidArgument) as info:
        jitter_offset_s("s1", datetime(2026, 1, 1), 10)
    assert info.value.field == "tick"


# --- validation entry point ------------------------------------------------------------------------

GOOD: dict[str, object] = dict(cron="H/15 * * * *", timezone="Europe/London", dst_policy=None,
                               misfire_policy="catch_up", max_catch_up=10, jitter_s=5.0,
                               schedule_id="sched-1")


def test_valid_spec_returns_the_schedule() -> None:
    schedule = validate_schedule_spec(**GOOD)  # type: ignore[arg-type]
    assert isinstance(schedule, CronSchedule)
    assert schedule.timezone == "Europe/London" and schedule.schedule_id == "sched-1"
    with_policy = validate_schedule_spec(**{  # type: ignore[arg-type]
        **GOOD, "dst_policy": {"gap": "SKIP", "repeated": "both"}})
    assert with_policy.dst_policy == DstPolicy(GapPolicy.SKIP, RepeatedPolicy.BOTH)
    no_catch_up = validate_schedule_spec(**{  # type: ignore[arg-type]
        **GOOD, "misfire_policy": MisfirePolicy.SKIP, "max_catch_up": None, "jitter_s": 0})
    assert no_catch_up.gap is GapPolicy.SKIP  # every-hour schedule: default rule


@pytest.mark.parametrize(("change", "field"), [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": ""}, "cron"),
    ({"cron": None}, "cron"),
    ({"cron": "H * * * *", "schedule_id": ""}, "cron"),
    ({"timezone": ""}, "timezone"),
    ({"timezone": None}, "timezone"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"timezone": "localtime"}, "timezone"),
    ({"timezone": "../etc/passwd"}, "timezone"),
    ({"timezone": "Europe"}, "timezone"),
    ({"dst_policy": {"gap": "later"}}, "dst_policy.gap"),
    ({"dst_policy": {"repeated": "twice"}}, "dst_policy.repeated"),
    ({"dst_policy": {"gaps": "skip"}}, "dst_policy"),
    ({"dst_policy": "skip"}, "dst_policy"),
    ({"misfire_policy": None}, "misfire_policy"),
    ({"misfire_policy": "sometimes"}, "misfire_policy"),
    ({"max_catch_up": 0}, "max_catch_up"),
    ({"max_catch_up": 1001}, "max_catch_up"),
    ({"max_catch_up": None}, "max_catch_up"),
    ({"misfire_policy": "skip", "max_catch_up": 5000}, "max_catch_up"),
    ({"jitter_s": -0.5}, "jitter_s"),
    ({"jitter_s": math.nan}, "jitter_s"),
    ({"jitter_s": None}, "jitter_s"),
    ({"schedule_id": 7}, "schedule_id"),
])
def test_each_invalid_field_is_named(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_schedule_spec(**{**GOOD, **change})  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_preview_bounds_and_aware_instants() -> None:
    assert len(EVERY_10.preview(at("12:00"), 1000)) == 1000
    with pytest.raises(InvalidArgument) as info:
        EVERY_10.preview(at("12:00"), 0)
    assert info.value.field == "n"
    with pytest.raises(InvalidArgument) as info:
        EVERY_10.next_after(datetime(2026, 1, 1))
    assert info.value.field == "instant"
