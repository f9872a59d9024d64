"""The tick path's pure rules (issue 47, items 1 and 2): misfire records bypass the overlap
policy, a buffered run always has an unfinished run ahead of it, and a jittered tick is missed
by its run time. Table tests named after the rule, and properties against brute force.

The misfire x overlap matrix below is the table of docs/semantics.md ("Misfires and overlap").
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.cron import (
    MISFIRE_TRIGGER,
    MisfirePolicy,
    OverlapAction,
    OverlapPolicy,
    decide_misfire,
    decide_overlap,
    decide_overlap_step,
    jitter_offset_s,
    last_overdue_tick,
    parse_schedule,
)
from cronwheel.errors import InvalidArgument

EVERY_10 = parse_schedule("*/10 * * * *", "UTC")
EVERY_SECOND = parse_schedule("* * * * * *", "UTC")
T0 = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
POLICIES = list(OverlapPolicy)
START, SKIP, REPLACE, BUFFER = (OverlapAction.START, OverlapAction.SKIP,
                                OverlapAction.CANCEL_RUNNING_THEN_START, OverlapAction.BUFFER)


# --- misfire records bypass the overlap policy ---------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("running", "buffered"), [(0, 0), (1, 0), (3, 1), (0, 2)])
def test_a_replayed_tick_runs_under_every_overlap_policy_and_counts_as_unfinished(
        policy: OverlapPolicy, running: int, buffered: int) -> None:
    step = decide_overlap_step(policy, running, buffered, trigger=MISFIRE_TRIGGER)
    assert (step.decision, step.running, step.buffered) == (None, running + 1, buffered)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("running", "buffered"), [(0, 0), (1, 0), (2, 3)])
def test_a_misfire_skip_record_stays_skipped_and_is_never_running(
        policy: OverlapPolicy, running: int, buffered: int) -> None:
    step = decide_overlap_step(policy, running, buffered, state="skipped")
    assert (step.decision, step.running, step.buffered) == (None, running, buffered)


@pytest.mark.parametrize("policy", [OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL])
def test_a_buffered_tick_counts_as_buffered_not_as_running(policy: OverlapPolicy) -> None:
    step = decide_overlap_step(policy, 1, 0)
    assert step.decision is not None and step.decision.action is BUFFER
    assert (step.running, step.buffered) == (1, 1)


@pytest.mark.parametrize(("policy", "action", "after"), [
    (OverlapPolicy.ALLOW, START, (2, 0)),
    (OverlapPolicy.FORBID, SKIP, (1, 0)),
    (OverlapPolicy.REPLACE, REPLACE, (2, 0)),  # the running one stops by request: unfinished until then
])
def test_a_live_tick_folds_its_own_outcome_into_the_counts(policy: OverlapPolicy, action: OverlapAction,
                                                           after: tuple[int, int]) -> None:
    step = decide_overlap_step(policy, 1, 0)
    assert step.decision is not None and step.decision.action is action
    assert (step.running, step.buffered) == after


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("buffered", [0, 1, 5])
def test_with_nothing_unfinished_every_policy_starts_even_behind_buffered_runs(
        policy: OverlapPolicy, buffered: int) -> None:
    """A buffered run is released only when a run of its schedule ends: with nothing unfinished,
    nothing would release it, so the tick starts (and its end releases the buffered one)."""
    assert decide_overlap(policy, 0, buffered).action is START


def test_a_misfire_record_with_a_bad_policy_or_count_is_refused_like_a_live_tick() -> None:
    for args, field in ((("sometimes", 0, 0), "overlap_policy"), (("forbid", -1, 0), "running")):
        with pytest.raises(InvalidArgument) as info:
            decide_overlap_step(*args, trigger=MISFIRE_TRIGGER)  # type: ignore[arg-type]
        assert info.value.field == field


TICK = st.sampled_from([("cron", "queued"), (MISFIRE_TRIGGER, "queued"), ("cron", "skipped")])


@settings(max_examples=300, deadline=None)
@given(policy=st.sampled_from(POLICIES), running=st.integers(0, 3), buffered=st.integers(0, 3),
       ticks=st.lists(TICK, max_size=12))
def test_no_batch_leaves_a_buffered_run_with_nothing_unfinished_ahead(
        policy: OverlapPolicy, running: int, buffered: int, ticks: list[tuple[str, str]]) -> None:
    """From any counts (an orphaned buffer included), folding a batch never buffers a tick with
    nothing unfinished, and the first live tick that is written with nothing unfinished starts."""
    for trigger, state in ticks:
        step = decide_overlap_step(policy, running, buffered, trigger=trigger, state=state)
        if step.decision is not None and step.decision.action is BUFFER:
            assert running > 0
        if step.decision is not None and running == 0:
            assert step.decision.action is START
        assert step.buffered >= buffered and step.running >= running
        running, buffered = step.running, step.buffered


# --- the misfire x overlap matrix (docs/semantics.md) ---------------------------------------------

def outage(misfire: MisfirePolicy, overlap: OverlapPolicy, max_catch_up: int = 10) -> tuple[list[str], OverlapAction]:
    """Three ticks missed (12:10, 12:20, 12:30), nothing unfinished before: what each missed tick
    became, and what the first live tick after them does while the replayed runs are unfinished."""
    d = decide_misfire(EVERY_10, T0, T0 + 35 * MIN, misfire, max_catch_up)
    batch = sorted([(t, MISFIRE_TRIGGER, "queued") for t in d.fire] + [(t, "cron", "skipped") for t in d.skipped])
    running = buffered = 0
    became = []
    for _t, trigger, state in batch:
        step = decide_overlap_step(overlap, running, buffered, trigger=trigger, state=state)
        assert step.decision is None, "a misfire record went through the overlap policy"
        running, buffered = step.running, step.buffered
        became.append("ran" if state == "queued" else "skipped")
    became += ["refused"] * d.refused_count
    live = decide_overlap_step(overlap, running, buffered).decision
    assert live is not None
    return became, live.action


AFTER_REPLAY = {OverlapPolicy.ALLOW: START, OverlapPolicy.FORBID: SKIP, OverlapPolicy.REPLACE: REPLACE,
                OverlapPolicy.BUFFER_ONE: BUFFER, OverlapPolicy.BUFFER_ALL: BUFFER}


@pytest.mark.parametrize("overlap", POLICIES)
def test_misfire_skip_records_every_missed_tick_and_the_next_live_tick_starts(overlap: OverlapPolicy) -> None:
    assert outage(MisfirePolicy.SKIP, overlap) == (["skipped"] * 3, START)


@pytest.mark.parametrize("overlap", POLICIES)
def test_run_once_runs_only_the_latest_and_the_next_live_tick_meets_it_unfinished(overlap: OverlapPolicy) -> None:
    assert outage(MisfirePolicy.RUN_ONCE, overlap) == (["skipped", "skipped", "ran"], AFTER_REPLAY[overlap])


@pytest.mark.parametrize("overlap", POLICIES)
def test_catch_up_replays_every_missed_tick_and_the_next_live_tick_meets_them_unfinished(
        overlap: OverlapPolicy) -> None:
    assert outage(MisfirePolicy.CATCH_UP, overlap) == (["ran"] * 3, AFTER_REPLAY[overlap])


@pytest.mark.parametrize("overlap", POLICIES)
def test_catch_up_over_its_bound_refuses_them_all_and_the_next_live_tick_starts(overlap: OverlapPolicy) -> None:
    assert outage(MisfirePolicy.CATCH_UP, overlap, max_catch_up=2) == (["refused"] * 3, START)


# --- a jittered tick is missed by its run time ---------------------------------------------------

SID = "7d3c5e8e-4a4c-4b59-9d38-0d2f3e1b7a11"


def test_without_jitter_the_missed_ticks_are_those_before_the_cutoff() -> None:
    assert last_overdue_tick(EVERY_10, T0, T0 + 35 * MIN, SID, 0) == T0 + 30 * MIN
    assert last_overdue_tick(EVERY_10, T0, T0 + 30 * MIN, SID, 0) == T0 + 20 * MIN
    assert last_overdue_tick(EVERY_10, T0, T0, SID, 0) is None  # due exactly now: not overdue


def test_a_tick_overdue_by_its_tick_but_not_by_its_run_time_is_not_missed() -> None:
    jitter = 300.0
    offset = jitter_offset_s(SID, T0, jitter)
    assert offset > 30, "pick another SID: the rule needs a late run time"
    assert last_overdue_tick(EVERY_10, T0, T0 + timedelta(seconds=offset - 1), SID, jitter) is None
    assert last_overdue_tick(EVERY_10, T0, T0 + timedelta(seconds=offset + 1), SID, jitter) == T0


def test_the_missed_ticks_stop_at_the_first_whose_run_time_is_ahead() -> None:
    """With jitter longer than the period, run times interleave: the missed ticks are the ones
    from the cursor while overdue; the first not overdue is the schedule's next tick."""
    jitter = 10.0
    cutoff = T0 + timedelta(seconds=30)
    ticks = [T0 + timedelta(seconds=i) for i in range(40)]
    overdue = [t + timedelta(seconds=jitter_offset_s(SID, t, jitter)) < cutoff for t in ticks]
    first_ahead = overdue.index(False)
    assert any(overdue[first_ahead:]), "pick another SID: a later tick must be overdue too"
    assert last_overdue_tick(EVERY_SECOND, T0, cutoff, SID, jitter) == ticks[first_ahead - 1]


def brute_force_last_overdue(cursor: datetime, cutoff: datetime, sid: str, jitter: float) -> datetime | None:
    last, t = None, cursor
    while t + timedelta(seconds=jitter_offset_s(sid, t, jitter)) < cutoff:
        last, t = t, EVERY_SECOND.next_after(t)
    return last


@settings(max_examples=200, deadline=None)
@given(jitter=st.sampled_from([0.0, 0.5, 1.0, 3.0, 7.5, 60.0]), cursor_s=st.integers(0, 100),
       cutoff_us=st.integers(0, 200_000_000), seed=st.integers(0, 2**64 - 1))
def test_last_overdue_tick_matches_a_walk_over_every_tick(jitter: float, cursor_s: int, cutoff_us: int,
                                                          seed: int) -> None:
    sid = str(uuid.UUID(int=seed))
    cursor = T0 + timedelta(seconds=cursor_s)
    cutoff = T0 + timedelta(microseconds=cutoff_us)
    assert last_overdue_tick(EVERY_SECOND, cursor, cutoff, sid, jitter) == \
        brute_force_last_overdue(cursor, cutoff, sid, jitter)


def test_a_long_outage_is_found_without_walking_every_tick() -> None:
    """30 days of a 1-second cron: the search, then at most jitter_s ticks one by one."""
    cutoff = T0 + timedelta(days=30)
    last = last_overdue_tick(EVERY_SECOND, T0, cutoff, SID, 5.0)
    assert last is not None and cutoff - timedelta(seconds=6) <= last < cutoff
