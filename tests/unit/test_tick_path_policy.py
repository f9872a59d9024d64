"""The tick path's pure rules (issue 47, item 1): misfire records bypass the overlap policy, and
a buffered run always has an unfinished run ahead of it. Table tests named after the rule, and
properties.

The misfire x overlap matrix below is the table of docs/semantics.md ("Misfires and overlap").
"""

from __future__ import annotations

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
    parse_schedule,
)
from cronwheel.errors import InvalidArgument

EVERY_10 = parse_schedule("*/10 * * * *", "UTC")
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
