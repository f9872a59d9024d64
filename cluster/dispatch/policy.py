"""Pure dispatch decisions: the one retry policy and the weighted order in which priorities are
polled. No I/O, no clock, no randomness of their own: the caller passes a uniform random number
in [0, 1), so every decision is reproducible and testable.

The retry policy is called by both paths that end an attempt: the worker's FailExecution
(`decide_failure`) and the reaper (`decide_timeout`, `decide_lapsed_lease`); the SQL only
applies the decided state and run_at (River's rescuer calls the client's retry policy the same
way). It is total over every value the API accepts (multiplier 1..100, up to 1,000 attempts,
initial 0..86,400 s, max up to 604,800 s): the exponential is compared with the cap in log
space, so `multiplier ** (attempt - 1)` is only computed when it is below the cap and can
neither overflow a float nor build a huge int.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cronwheel.cron import Priority

PRIORITIES = tuple(p.value for p in Priority)  # most urgent first: the one list (cron.Priority)

# Fair share between tenants (the claim, storage/sql/queries/dispatch.sql): a tenant's starts
# divided by its weight, decayed by exp(-age / FAIR_SHARE_TAU_S), order the pick; backlogged
# tenants' starts converge to their weights' ratio. The memory is short so a tenant back from
# idle catches up with about one tau's worth of its share, not with the whole time it was idle.
FAIR_SHARE_TAU_S = 1.0
# A claim that came back empty while queued work waits (a rate-limited tenant's whole token, a
# run queued ahead of its run_at) waits until the soonest of them (claim_wait), but at least this
# long (no busy loop on a fractional token, or on a timer that woke a hair before run_at).
MIN_CLAIM_WAIT_S = 0.002


@dataclass(frozen=True, slots=True)
class PriorityWeights:
    """Relative share of polls each priority goes first in. Bulk is slow, never starved: it is
    polled first 1/21 of the time, and always when nothing else is queued."""

    critical: int = 16
    default: int = 4
    bulk: int = 1

    def validate(self) -> PriorityWeights:
        if min(self.critical, self.default, self.bulk) < 1:
            raise ValueError("every priority weight must be >= 1 (a zero weight could starve)")
        return self


def priority_order(weights: PriorityWeights, rand: float) -> tuple[str, ...]:
    """Which priority to poll first (drawn by weight), then the rest in priority order."""
    if not 0.0 <= rand < 1.0:
        raise ValueError(f"rand must be in [0, 1), got {rand}")
    w = (weights.critical, weights.default, weights.bulk)
    x = rand * sum(w)
    first = 0
    while x >= w[first]:
        x -= w[first]
        first += 1
    return (PRIORITIES[first], *(p for i, p in enumerate(PRIORITIES) if i != first))


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What an ended attempt becomes. `delay_s` is the wait before a `retry_scheduled` run is
    claimable again (0 for every other state)."""

    state: str  # "retry_scheduled" | "failed" | "dead" | "cancelled" | "queued"
    delay_s: float
    reason: str

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


TERMINAL_STATES = frozenset({"succeeded", "failed", "dead", "cancelled"})


def backoff_ceiling_s(attempt: int, initial_s: float, multiplier: float, max_s: float) -> float:
    """min(max_s, initial_s * multiplier^(attempt-1)), computed without overflow for any attempt."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    for name, v in (("initial_s", initial_s), ("multiplier", multiplier), ("max_s", max_s)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be finite and >= 0, got {v}")
    if initial_s == 0.0 or max_s == 0.0:
        return 0.0
    if multiplier <= 1.0 or attempt == 1:
        return min(max_s, initial_s)
    # Compare in log space: initial * m^n >= max  <=>  log(initial) + n * log(m) >= log(max).
    # The power alone may overflow even when the product is small (initial_s = 5e-324 and
    # 14^283, found by hypothesis), so the product is formed in log space too.
    log_ceiling = math.log(initial_s) + (attempt - 1) * math.log(multiplier)
    if log_ceiling >= math.log(max_s):
        return max_s
    return min(max_s, math.exp(log_ceiling))  # exp of less than log(max_s): no overflow


def backoff_s(attempt: int, initial_s: float, multiplier: float, max_s: float, rand: float) -> float:
    """Full jitter (AWS): uniform in [0, min(max, initial * multiplier^(attempt-1))]."""
    if not 0.0 <= rand < 1.0:
        raise ValueError(f"rand must be in [0, 1), got {rand}")
    return backoff_ceiling_s(attempt, initial_s, multiplier, max_s) * rand


def decide_failure(*, attempt: int, max_attempts: int, retryable: bool, cancel_requested: bool,
                   error_type: str, initial_s: float, multiplier: float, max_s: float,
                   rand: float) -> RetryDecision:
    """What a failed attempt becomes (a worker's FailExecution, or a timeout the reaper saw)."""
    if cancel_requested:
        return RetryDecision("cancelled", 0.0, "cancelled while running")
    if error_type == "worker_shutdown":
        return RetryDecision("queued", 0.0, "worker shut down; handed to another worker")
    if not retryable:
        return RetryDecision("failed", 0.0, f"non-retryable {error_type or 'error'}")
    if attempt >= max_attempts:
        return RetryDecision("dead", 0.0, f"{error_type or 'error'} on the last of {max_attempts} attempts")
    delay = backoff_s(attempt, initial_s, multiplier, max_s, rand)
    return RetryDecision("retry_scheduled", delay, f"{error_type or 'error'}; attempt {attempt} of {max_attempts}")


def decide_timeout(*, attempt: int, max_attempts: int, cancel_requested: bool, timeout_s: float,
                   initial_s: float, multiplier: float, max_s: float, rand: float) -> RetryDecision:
    """A run past its per-job timeout: a retryable failure of type `timeout`."""
    d = decide_failure(attempt=attempt, max_attempts=max_attempts, retryable=True,
                       cancel_requested=cancel_requested, error_type="timeout", initial_s=initial_s,
                       multiplier=multiplier, max_s=max_s, rand=rand)
    return RetryDecision(d.state, d.delay_s, f"timed out after {timeout_s:g} s")


def decide_lapsed_lease(*, attempt: int, max_attempts: int, cancel_requested: bool) -> RetryDecision:
    """A run whose worker stopped heartbeating: back to the queue at once (the worker may have
    died mid-run; at-least-once), or ended when cancelled or out of attempts."""
    if cancel_requested:
        return RetryDecision("cancelled", 0.0, "lease expired without heartbeat")
    if attempt >= max_attempts:
        return RetryDecision("dead", 0.0, "lease expired without heartbeat")
    return RetryDecision("queued", 0.0, "lease expired without heartbeat")
