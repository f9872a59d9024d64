"""The one retry policy is total over everything the API accepts (cluster/commands/values.py:
RetryPolicy): no OverflowError, no huge ints, a delay within [0, max_s] for every attempt."""

from __future__ import annotations

import math
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from cronwheel.cluster.commands.values import RetryPolicy
from cronwheel.cluster.dispatch.policy import (
    backoff_ceiling_s,
    backoff_s,
    decide_failure,
    decide_lapsed_lease,
    decide_timeout,
)

rand01 = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@st.composite
def accepted_policies(draw: st.DrawFn) -> RetryPolicy:
    """Every retry policy the API accepts (RetryPolicy.validate is the judge)."""
    initial = draw(st.floats(0, 86400))
    p = RetryPolicy(initial_s=initial, multiplier=draw(st.floats(1, 100)),
                    max_s=draw(st.floats(initial, 7 * 86400)), max_attempts=draw(st.integers(1, 1000)))
    return p.validate()


def test_backoff_at_attempt_156_with_multiplier_100_is_the_cap() -> None:
    assert backoff_ceiling_s(156, 30, 100.0, 21600) == 21600
    assert 0 <= backoff_s(156, 30, 100.0, 21600, 0.999) <= 21600


def test_backoff_at_attempt_1000_is_the_cap_for_any_multiplier() -> None:
    for mult in (1.0, 1.0001, 2.0, 4.0, 100.0):
        ceiling = backoff_ceiling_s(1000, 30, mult, 604800)
        assert ceiling == (30 if mult == 1.0 else 604800) or ceiling < 604800, mult
        assert math.isfinite(backoff_s(1000, 30, mult, 604800, 0.5))
    assert backoff_ceiling_s(1000, 86400, 100.0, 604800) == 604800


def test_failing_at_attempt_156_with_multiplier_100_schedules_a_retry_within_the_cap() -> None:
    d = decide_failure(attempt=156, max_attempts=1000, retryable=True, cancel_requested=False,
                       error_type="boom", initial_s=30.0, multiplier=100.0, max_s=21600.0, rand=0.5)
    assert d.state == "retry_scheduled" and d.delay_s == 10800.0


@given(accepted_policies(), st.integers(1, 1000), rand01)
def test_backoff_is_total_and_within_the_cap_for_every_accepted_policy(p: RetryPolicy, attempt: int,
                                                                      r: float) -> None:
    ceiling = backoff_ceiling_s(attempt, p.initial_s, p.multiplier, p.max_s)
    assert 0.0 <= ceiling <= p.max_s
    # The same value as the naive formula in exact decimal arithmetic (no float range to leave).
    exact = Decimal(p.initial_s) * Decimal(p.multiplier) ** (attempt - 1)
    naive = float(min(Decimal(p.max_s), exact))
    assert math.isclose(ceiling, naive, rel_tol=1e-9, abs_tol=1e-12)
    assert 0.0 <= backoff_s(attempt, p.initial_s, p.multiplier, p.max_s, r) <= p.max_s


@given(accepted_policies(), st.integers(1, 999))
def test_backoff_ceiling_never_shrinks_as_attempts_grow(p: RetryPolicy, attempt: int) -> None:
    a = backoff_ceiling_s(attempt, p.initial_s, p.multiplier, p.max_s)
    b = backoff_ceiling_s(attempt + 1, p.initial_s, p.multiplier, p.max_s)
    assert b >= a * (1 - 1e-12)


@given(accepted_policies(), st.integers(1, 1000), st.booleans(), rand01)
def test_every_decision_of_the_reaper_and_the_worker_path_is_total(p: RetryPolicy, attempt: int,
                                                                  cancel: bool, r: float) -> None:
    args = dict(attempt=attempt, max_attempts=p.max_attempts, cancel_requested=cancel)
    backoff = dict(initial_s=p.initial_s, multiplier=p.multiplier, max_s=p.max_s, rand=r)
    timeout = decide_timeout(**args, timeout_s=5.0, **backoff)  # type: ignore[arg-type]
    failure = decide_failure(**args, retryable=True, error_type="timeout", **backoff)  # type: ignore[arg-type]
    assert (timeout.state, timeout.delay_s) == (failure.state, failure.delay_s), "one policy for both paths"
    lapsed = decide_lapsed_lease(**args)  # type: ignore[arg-type]
    for d in (timeout, lapsed):
        assert 0.0 <= d.delay_s <= p.max_s
        if cancel:
            assert d.state == "cancelled"
        elif attempt >= p.max_attempts:
            assert d.state == "dead"
        else:
            assert d.state in ("retry_scheduled", "queued")
