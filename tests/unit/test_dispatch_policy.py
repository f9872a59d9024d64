from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronwheel.cluster.dispatch.policy import (
    PRIORITIES,
    PriorityWeights,
    backoff_s,
    decide_failure,
    priority_order,
)

rand01 = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(rand01)
def test_priority_order_is_a_permutation(r: float) -> None:
    order = priority_order(PriorityWeights(), r)
    assert sorted(order) == sorted(PRIORITIES)


def test_priorities_go_first_in_proportion_to_their_weight() -> None:
    w = PriorityWeights(critical=16, default=4, bulk=1)
    n = 21_000
    firsts = Counter(priority_order(w, i / n)[0] for i in range(n))
    assert firsts == {"critical": 16_000, "default": 4_000, "bulk": 1_000}


def test_bulk_is_never_starved_by_weight_zero() -> None:
    with pytest.raises(ValueError, match="starve"):
        PriorityWeights(bulk=0).validate()


@given(st.integers(1, 60), st.floats(0, 1000), st.floats(1, 10), st.floats(0, 86400), rand01)
def test_backoff_is_full_jitter_within_the_capped_exponential(
    attempt: int, initial: float, mult: float, cap: float, r: float
) -> None:
    d = backoff_s(attempt, initial, mult, cap, r)
    ceiling = min(cap, initial * mult ** (attempt - 1))
    assert 0.0 <= d <= ceiling + 1e-9


def test_defaults_back_off_30s_times_4_up_to_6h() -> None:
    ceilings = [backoff_s(a, 30, 4, 21600, 0.999999) for a in range(1, 8)]
    assert [round(c) for c in ceilings] == [30, 120, 480, 1920, 7680, 21600, 21600]


def test_failure_decisions_table() -> None:
    base = dict(initial_s=30.0, multiplier=4.0, max_s=21600.0, rand=0.5)
    assert decide_failure(attempt=1, max_attempts=5, retryable=True, cancel_requested=False,
                          error_type="boom", **base).state == "retry_scheduled"
    assert decide_failure(attempt=5, max_attempts=5, retryable=True, cancel_requested=False,
                          error_type="boom", **base).state == "dead"
    assert decide_failure(attempt=1, max_attempts=5, retryable=False, cancel_requested=False,
                          error_type="bad input", **base).state == "failed"
    assert decide_failure(attempt=1, max_attempts=5, retryable=True, cancel_requested=True,
                          error_type="boom", **base).state == "cancelled"
    shutdown = decide_failure(attempt=5, max_attempts=5, retryable=True, cancel_requested=False,
                              error_type="worker_shutdown", **base)
    assert shutdown.state == "queued" and shutdown.delay_s == 0
