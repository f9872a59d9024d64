"""The clock-skew guard's decision (cluster/coordination/clock_skew.py): pure, time as values."""

from __future__ import annotations

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.coordination.clock_skew import (
    ClockSkewConfig,
    ClockSkewGuard,
    SkewSample,
    SkewState,
    judge,
)
from cronwheel.errors import Unavailable

CONFIG = ClockSkewConfig(max_skew_s=2.0, recover_samples=3)
DB = 1_700_000_000.0


def sample(skew_s: float, round_trip_s: float = 0.002) -> SkewSample:
    """A node `skew_s` ahead of the database, read over `round_trip_s`."""
    return SkewSample(DB + skew_s - round_trip_s / 2, DB + skew_s + round_trip_s / 2, DB, round_trip_s)


def test_the_skew_is_the_midpoint_of_the_local_readings_minus_the_databases() -> None:
    assert sample(1.25, 0.1).skew_s == pytest.approx(1.25)
    assert sample(-3.0).skew_s == pytest.approx(-3.0)


@pytest.mark.parametrize("skew_s", [2.5, -2.5])
def test_a_node_beyond_the_bound_either_way_stands_down(skew_s: float) -> None:
    v = judge(SkewState(), sample(skew_s), CONFIG)
    assert v.changed and v.state.skewed and v.state.skew_s == pytest.approx(skew_s)


@pytest.mark.parametrize("skew_s", [0.0, 1.0, -1.99, 2.0])
def test_a_node_within_the_bound_keeps_its_partitions(skew_s: float) -> None:
    v = judge(SkewState(), sample(skew_s), CONFIG)
    assert not v.changed and not v.state.skewed


def test_a_sample_with_a_long_round_trip_changes_nothing() -> None:
    slow = sample(10.0, round_trip_s=CONFIG.max_round_trip_s + 0.1)
    v = judge(SkewState(), slow, CONFIG)
    assert not v.conclusive and not v.changed and v.state == SkewState()


def test_a_sample_during_which_the_wall_clock_stepped_changes_nothing() -> None:
    stepped = SkewSample(DB, DB + 5.0, DB, 0.002)  # the clock jumped 5 s ahead between the readings
    v = judge(SkewState(), stepped, CONFIG)
    assert not v.conclusive and v.state == SkewState()


def test_a_skewed_node_stands_up_after_recover_samples_in_a_row_within_the_bound() -> None:
    state = judge(SkewState(), sample(3.0), CONFIG).state
    changes = []
    for skew in (0.1, 0.1, 5.0, 0.1, 0.1, 0.1):  # a relapse resets the run of good samples
        v = judge(state, sample(skew), CONFIG)
        state = v.state
        changes.append((v.changed, v.state.skewed))
    assert changes == [(False, True), (False, True), (False, True), (False, True), (False, True), (True, False)]


def test_bad_configuration_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="max-clock-skew"):
        ClockSkewConfig(max_skew_s=0).validate()
    with pytest.raises(ValueError, match="recover_samples"):
        ClockSkewConfig(recover_samples=0).validate()


async def test_the_guard_stands_down_and_up_as_the_clock_against_the_database_moves() -> None:
    clock = FakeClock(start_ts=DB)
    offset = {"db": 0.0}  # the database's clock minus the node's
    calls: list[tuple[bool, float]] = []
    sampled: list[SkewState] = []

    async def database_ts() -> float:
        return clock.now_ts() + offset["db"]

    async def on_change(skewed: bool, skew_s: float) -> None:
        calls.append((skewed, round(skew_s, 3)))

    guard = ClockSkewGuard(database_ts, clock, CONFIG, on_change, on_sample=sampled.append)
    assert (await guard.check()) is not None and calls == []
    offset["db"] = -2.5  # the node runs 2.5 s ahead
    await guard.check()
    assert calls == [(True, 2.5)] and guard.state.skewed
    offset["db"] = 0.3
    for _ in range(CONFIG.recover_samples):
        await guard.check()
    assert calls == [(True, 2.5), (False, -0.3)] and not guard.state.skewed
    assert [s.skewed for s in sampled] == [False, True, True, True, False]


async def test_postgresql_away_leaves_the_state_as_it_was() -> None:
    clock = FakeClock(start_ts=DB)

    async def away() -> float:
        raise Unavailable("postgres", "connection refused")

    async def on_change(skewed: bool, skew_s: float) -> None:
        raise AssertionError("no verdict without a sample")

    guard = ClockSkewGuard(away, clock, CONFIG, on_change)
    guard.state = SkewState(True, 1, 3.0)
    assert await guard.check() is None
    assert guard.state == SkewState(True, 1, 3.0)
