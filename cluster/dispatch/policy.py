"""Pure dispatch decisions: retry backoff and the weighted order in which priorities are polled.
No I/O, no clock, no randomness of their own: the caller passes a uniform random number in
[0, 1), so every decision is reproducible and testable.
"""

from __future__ import annotations

from dataclasses import dataclass

from cronwheel.cron import Priority

PRIORITIES = tuple(p.value for p in Priority)  # most urgent first: the one list (cron.Priority)


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
    state: str  # "retry_scheduled" | "failed" | "dead" | "cancelled" | "queued"
    delay_s: float
    reason: str


def backoff_s(attempt: int, initial_s: float, multiplier: float, max_s: float, rand: float) -> float:
    """Full jitter (AWS): uniform in [0, min(max, initial * multiplier^(attempt-1))]."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if not 0.0 <= rand < 1.0:
        raise ValueError(f"rand must be in [0, 1), got {rand}")
    exp = min(attempt - 1, 200)  # multiplier^200 overflows nothing we keep: capped below
    ceiling = min(max_s, initial_s * (multiplier ** exp)) if multiplier > 1 else min(max_s, initial_s)
    return ceiling * rand


def decide_failure(*, attempt: int, max_attempts: int, retryable: bool, cancel_requested: bool,
                   error_type: str, initial_s: float, multiplier: float, max_s: float,
                   rand: float) -> RetryDecision:
    """What a failed attempt becomes."""
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
