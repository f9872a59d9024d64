"""bench.retention judges the write lag, not the fire lag: its ticks are queued a second ahead of
run_at, so fired_at - run_at is about -990 ms in every phase and a ratio of fire lags says nothing
(it printed "1.00x, met" whatever pruning cost)."""

from __future__ import annotations

import math

from bench.fire import AHEAD_S
from bench.retention import lag_line, phase_lags, verdict, write_ratio


def raw(write_ms: list[float]) -> list[float]:
    """fired_at - run_at of fires written `write_ms` after their wheel deadline (AHEAD_S before run_at)."""
    return [w / 1000 - AHEAD_S for w in write_ms]


def test_each_fire_gives_its_write_lag_from_the_wheel_deadline_and_its_fire_lag_from_run_at() -> None:
    got = phase_lags([-0.99, -0.98, 0.25])  # two queued ahead, one written 250 ms after its run_at
    assert [round(x, 6) for x in got.write] == [round(x + AHEAD_S, 6) for x in (-0.99, -0.98, 0.25)]
    assert got.fire == (0.0, 0.0, 0.25)  # claimable from run_at: 0 when written ahead


def test_the_judged_ratio_is_of_write_lag_p99s_where_the_fire_lags_are_all_zero() -> None:
    without = phase_lags(raw([5.0] * 99 + [10.0]))  # p99 of the write: 10 ms
    pruning = phase_lags(raw([5.0] * 99 + [15.0]))  # 15 ms: pruning costs the fire path 1.5x
    assert all(x == 0.0 for x in without.fire + pruning.fire)  # the fire lag cannot see it
    assert math.isclose(write_ratio(pruning, without), 1.5)
    assert verdict([write_ratio(pruning, without)]).endswith("target <= 1.2x: NOT met)")
    assert "write lag p50 5.0 ms, p99 15.0 ms" in lag_line(pruning, 1.0)


def test_phases_without_pruning_are_pooled_and_the_verdict_is_the_median_of_the_runs() -> None:
    a, c = phase_lags(raw([4.0] * 100)), phase_lags(raw([8.0] * 100))
    pooled = a + c
    assert len(pooled.write) == 200 and list(pooled.write) == sorted(pooled.write)
    assert math.isclose(write_ratio(phase_lags(raw([8.0] * 100)), pooled), 1.0)
    assert "median of 3 runs: 1.10x (1.50, 1.10, 1.00; target <= 1.2x: met)" in verdict([1.5, 1.1, 1.0])
