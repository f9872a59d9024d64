"""Infrastructure backoff, written once (issue 49): how long a loop waits before its next try after
an infrastructure failure (PostgreSQL or etcd unreachable, no node answering). The firing path's
loads and misfire writes, the coordinator's lease and watch loops, the client's transport and the
worker's report and lease calls all take their pause from `backoff_s`; each says its own first
pause and cap. A job's or a webhook delivery's retry is not this: it follows its retry policy
(cluster/dispatch/policy.py), which the user sets.

The pause after the n-th failure in a row is min(cap, initial_s * 2^(n-1)), the cap being max_s or
initial_s if that is more (a first pause is never cut, and the pauses never shrink); given `rand` (a draw
in [0, 1)) it is "equal jitter", uniform in [ceiling/2, ceiling): callers that failed together
spread out, and none retries at once. Pure: the caller draws `rand` and sleeps on its clock. A
shared leaf (the client imports it)."""

from __future__ import annotations


def backoff_s(failures: int, initial_s: float, max_s: float, rand: float | None = None) -> float:
    """The pause after `failures` (>= 1) failures in a row."""
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures}")
    if rand is not None and not 0.0 <= rand < 1.0:
        raise ValueError(f"rand must be in [0, 1), got {rand}")
    ceiling = min(max(max_s, initial_s), initial_s * 2 ** min(failures - 1, 60))
    return ceiling if rand is None else ceiling / 2 + ceiling / 2 * rand
