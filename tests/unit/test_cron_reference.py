"""next_after against a brute-force reference, across DST transitions (hypothesis).

The reference shares no code with cronwheel.cron: expressions are generated together with the
sets of values they denote, and the reference walks real UTC instants minute by minute (and the
expression's seconds within each minute), converts each to local wall time with zoneinfo,
decides matches from the generated sets, and applies the DST rules as the design states them:
a wall time that occurs twice is told by its fold; nonexistent wall times are enumerated
explicitly at each forward jump and, under `shift`, fire once at the jump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cronwheel.cron import DstPolicy, GapPolicy, RepeatedPolicy, parse_schedule

ZONES = ("Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata")
NAIVE_EPOCH = datetime(1970, 1, 1)


def _offset(zone: ZoneInfo, ts: int) -> int:
    off = datetime.fromtimestamp(ts, zone).utcoffset()
    assert off is not None
    return int(off.total_seconds())


def _transitions(zone: ZoneInfo) -> list[int]:
    """Offset changes in 2025-2027, found by an hourly scan then bisection."""
    found = []
    start = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2028, 1, 1, tzinfo=UTC).timestamp())
    for ts in range(start, end, 3600):
        if _offset(zone, ts) != _offset(zone, ts + 3600):
            lo, hi = ts, ts + 3600
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _offset(zone, mid) == _offset(zone, lo) else (lo, mid)
            assert hi % 60 == 0  # the reference relies on offsets being constant per minute
            found.append(hi)
    return found


TRANSITIONS = {name: _transitions(ZoneInfo(name)) for name in ZONES}


def test_reference_zones_have_the_expected_transitions() -> None:
    assert len(TRANSITIONS["Europe/London"]) == 6
    assert len(TRANSITIONS["America/New_York"]) == 6
    assert len(TRANSITIONS["Australia/Lord_Howe"]) == 6
    assert TRANSITIONS["Asia/Kolkata"] == []


@dataclass(frozen=True)
class Expr:
    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool


@st.composite
def field(draw: st.DrawFn, lo: int, hi: int, allow_star: bool = True) -> tuple[str, set[int]]:
    kind = draw(st.sampled_from(["star", "value", "list", "range", "step", "range_step"]
                                if allow_star else ["value", "list", "range", "range_step"]))
    if kind == "star":
        return "*", set(range(lo, hi + 1))
    if kind == "value":
        v = draw(st.integers(lo, hi))
        return str(v), {v}
    if kind == "list":
        vs = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=4, unique=True))
        return ",".join(map(str, vs)), set(vs)
    if kind == "step":
        n = draw(st.integers(1, min(hi - lo + 1, 30)))
        return f"*/{n}", set(range(lo, hi + 1, n))
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    n = draw(st.integers(1, min(10, hi - lo + 1)))
    return f"{a}-{b}/{n}", set(range(a, b + 1, n))


@st.composite
def expressions(draw: st.DrawFn, with_seconds: bool | None = None) -> Expr:
    seconds = draw(st.booleans()) if with_seconds is None else with_seconds
    s_text, s_set = draw(field(0, 59)) if seconds else ("", {0})
    mi_text, mi_set = draw(field(0, 59))
    h_text, h_set = draw(st.one_of(field(0, 23), st.just(("0-23", set(range(24))))))
    # Day fields stay loose so that the next fire is within a week (the brute force's window).
    dom_text, dom_set = draw(st.sampled_from([("*", set(range(1, 32))), ("?", set(range(1, 32))),
                                              ("1-15", set(range(1, 16))),
                                              ("16-31", set(range(16, 32)))]))
    if dom_text in ("*", "?"):
        dow_text, dow_set = draw(st.one_of(st.just(("*", set(range(7)))), field(0, 6, False)))
    else:
        # Both restricted: a day matches if either does (so still within a week).
        dow_text, dow_set = draw(st.sampled_from([("0", {0}),
                                                  ("MON-FRI", {1, 2, 3, 4, 5}), ("6,7", {6, 0})]))
    text = " ".join(p for p in (s_text, mi_text, h_text, dom_text, "*", dow_text) if p)
    return Expr(text, frozenset(s_set), frozenset(mi_set), frozenset(h_set), frozenset(dom_set),
                frozenset(dow_set), dom_text in ("*", "?"), dow_text == "*")


def _matches(e: Expr, wall: datetime) -> bool:
    if wall.second not in e.seconds or wall.minute not in e.minutes:
        return False
    if wall.hour not in e.hours:
        return False
    dom_ok = wall.day in e.doms
    dow_ok = (wall.weekday() + 1) % 7 in e.dows
    return (dom_ok and dow_ok) if (e.dom_star or e.dow_star) else (dom_ok or dow_ok)


def reference_next(e: Expr, zone: ZoneInfo, t: int, gap: str | None, repeated: str | None
                   ) -> int:
    every_hour = e.hours == frozenset(range(24))
    gap = gap or ("skip" if every_hour else "shift")
    repeated = repeated or ("both" if every_hour else "first")
    minute = t - t % 60
    while minute < t + 9 * 86400:
        before, after = _offset(zone, minute - 1), _offset(zone, minute)
        if after > before and gap == "shift" and minute > t:
            wall = NAIVE_EPOCH + timedelta(seconds=minute + before)  # first nonexistent minute
            gap_end = NAIVE_EPOCH + timedelta(seconds=minute + after)
            while wall < gap_end:
                if any(_matches(e, wall + timedelta(seconds=s)) for s in e.seconds):
                    return minute
                wall += timedelta(minutes=1)
        for s in sorted(e.seconds):
            u = minute + s
            if u <= t:
                continue
            local = datetime.fromtimestamp(u, zone)
            wall = local.replace(tzinfo=None)
            if not _matches(e, wall):
                continue
            other = wall.replace(tzinfo=zone, fold=1 - local.fold)
            twice = (other.timestamp() != u
                     and other.astimezone(zone).replace(tzinfo=None) == wall)
            if (not twice or (local.fold == 0 and repeated in ("first", "both"))
                    or (local.fold == 1 and repeated in ("last", "both"))):
                return u
        minute += 60
    raise AssertionError(f"reference found no fire within 9 days for {e.text!r}")


@st.composite
def instants_near_transitions(draw: st.DrawFn) -> tuple[str, int]:
    zone = draw(st.sampled_from(ZONES))
    anchors = TRANSITIONS[zone] or [int(datetime(2026, 3, 29, 1, tzinfo=UTC).timestamp())]
    anchor = draw(st.sampled_from(anchors))
    # Mostly within a few hours of the change, sometimes up to a day and a half before it.
    delta = draw(st.one_of(st.integers(-4 * 3600, 4 * 3600), st.integers(-36 * 3600, 6 * 3600)))
    return zone, anchor + delta


POLICIES = [(None, None)] + [(g, r) for g in (None, "shift", "skip")
                             for r in (None, "first", "last", "both")][1:]
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _check(e: Expr, zone_name: str, t: int, gap: str | None, repeated: str | None) -> None:
    policy = DstPolicy(gap=GapPolicy(gap) if gap else None,
                       repeated=RepeatedPolicy(repeated) if repeated else None)
    schedule = parse_schedule(e.text, zone_name, dst_policy=policy)
    got = schedule.next_after(datetime.fromtimestamp(t, UTC))
    want = reference_next(e, ZoneInfo(zone_name), t, gap, repeated)
    assert got.timestamp() == want, (
        f"{e.text!r} in {zone_name} after {datetime.fromtimestamp(t, UTC)} policy={policy}: "
        f"got {got}, reference {datetime.fromtimestamp(want, UTC)}")
    assert got.timestamp() > t


@SETTINGS
@given(expressions(with_seconds=False), instants_near_transitions())
def test_next_after_matches_reference_under_default_rules(e: Expr, at: tuple[str, int]) -> None:
    _check(e, at[0], at[1], None, None)


@SETTINGS
@given(expressions(with_seconds=False), instants_near_transitions(), st.sampled_from(POLICIES))
def test_next_after_matches_reference_under_each_dst_policy(
        e: Expr, at: tuple[str, int], policy: tuple[str | None, str | None]) -> None:
    _check(e, at[0], at[1], *policy)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(with_seconds=True), instants_near_transitions(), st.sampled_from(POLICIES))
def test_six_field_next_after_matches_reference(
        e: Expr, at: tuple[str, int], policy: tuple[str | None, str | None]) -> None:
    _check(e, at[0], at[1], *policy)


@SETTINGS
@given(expressions(with_seconds=False), instants_near_transitions(), st.sampled_from(POLICIES))
def test_ticks_move_strictly_forward_across_transitions(
        e: Expr, at: tuple[str, int], policy: tuple[str | None, str | None]) -> None:
    gap, repeated = policy
    schedule = parse_schedule(e.text, at[0], dst_policy=DstPolicy(
        gap=GapPolicy(gap) if gap else None,
        repeated=RepeatedPolicy(repeated) if repeated else None))
    start = datetime.fromtimestamp(at[1], UTC)
    ticks = list(schedule.ticks_between(start, start + timedelta(hours=12)))
    assert all(a < b for a, b in zip(ticks, ticks[1:], strict=False))
    assert all(start < t <= start + timedelta(hours=12) for t in ticks)
    if ticks:
        assert schedule.next_after(start) == ticks[0]


@settings(max_examples=200, deadline=None)
@given(expressions(), st.integers(int(datetime(2024, 1, 1, tzinfo=UTC).timestamp()),
                                  int(datetime(2030, 1, 1, tzinfo=UTC).timestamp())))
def test_next_after_in_utc_agrees_with_croniter(e: Expr, t: int) -> None:
    # A second, independent oracle where DST cannot interfere. croniter wants seconds last.
    # croniter mis-reads degenerate ranges such as `0-0` (it fires at minute 1).
    assume(not re.search(r"(?<![\d/])(\d+)-\1(?!\d)", e.text))
    parts = e.text.split()
    if len(parts) == 6:
        parts = parts[1:] + parts[:1]
    text = " ".join(parts).replace("?", "*")
    start = datetime.fromtimestamp(t, UTC)
    want = croniter(text, start).get_next(datetime)
    assert parse_schedule(e.text, "UTC").next_after_uncached(start) == want
