"""Pure decisions of the worker SDK: how much to lease, how to treat a status code, what a
finished handler reports. No I/O, no clock, no randomness of their own (the caller passes a
uniform number in [0, 1)), so each rule is a table test.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import grpc

from cronwheel import backoff

# The node's per-call limit on LeaseExecutions, from the one module both sides read.
from cronwheel.limits import MAX_LEASE_COUNT


class StopReason(StrEnum):
    """Why the worker told a handler to stop (ctx.cancelled), strongest first."""

    STALE = "stale"          # leased again elsewhere: drop the result, report nothing
    CANCEL = "cancel"        # a cancel request (CancelExecution, overlap `replace`)
    TIMEOUT = "timeout"      # past the attempt's timeout
    SHUTDOWN = "shutdown"    # the worker is stopping: hand the run back


_RANK = {StopReason.STALE: 0, StopReason.CANCEL: 1, StopReason.TIMEOUT: 2, StopReason.SHUTDOWN: 3}


def stronger(current: StopReason | None, new: StopReason) -> StopReason:
    """The reason that wins when a second one arrives (a cancel outranks a timeout, ...)."""
    if current is None or _RANK[new] < _RANK[current]:
        return new
    return current


class CodeClass(StrEnum):
    OK = "ok"
    RETRY = "retry"          # transient: try again with backoff
    STALE = "stale"          # the run is no longer ours: stop, report nothing more
    FATAL = "fatal"          # the worker cannot work at all (credentials, permissions)
    REFUSED = "refused"      # this request can never succeed (bad argument)


_TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                        grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED})
_FATAL = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
_STALE = frozenset({grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND})
_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The StatusCode of a numeric code (CompleteExecutionOutcome.code)."""
    return _BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)


def classify(code: grpc.StatusCode) -> CodeClass:
    if code == grpc.StatusCode.OK:
        return CodeClass.OK
    if code in _TRANSIENT:
        return CodeClass.RETRY
    if code in _FATAL:
        return CodeClass.FATAL
    if code in _STALE:
        return CodeClass.STALE
    return CodeClass.REFUSED


# A lease call asks for at most this many runs (the node's limit per call is MAX_LEASE_COUNT).
# The node claims one call of a tenant at a time, so a large refill sent as several calls of 250
# is pipelined: the node claims the next while the worker starts the runs of the one before. One
# call of 1,000 runs made a worker wait for the whole claim and its answer (W3 with prefetch
# 1,000: the first of 885 runs started 90 ms after the claim; as calls of 250, 20-28 ms).
LEASE_CALL_RUNS = 250
# After a full answer, with no call of its own out, a worker asks once this many runs are free
# (lease_size). W3 (1,000 runs at one boundary): its last ~50 runs went in a claim of their own
# 10-28 ms after the one before, the worker waiting for 250 free (stop 39's trace).
NEXT_CALL_RUNS = 32
# The default prefetch follows the worker's recent pace: twice the runs it started in the last
# PREFETCH_WINDOW_S (never below one per slot nor above MAX_LEASE_COUNT).
PREFETCH_WINDOW_S = 0.1
PREFETCH_PACE_FACTOR = 2


def lease_size(concurrency: int, running: int, reserved: int, calls_in_flight: int, max_calls: int,
               prefetch: int = 0, drained: bool = False) -> int:
    """How many runs the next LeaseExecutions asks for (0: start no call now). `concurrency` is
    the worker's capacity (slots plus prefetch), `running` what it holds (running or leased
    ahead), `reserved` runs asked for by calls already in flight. A call asks for the room not
    yet asked for, at most LEASE_CALL_RUNS; none while that room is under
    `refill_at(prefetch, busy, awaited)`.

    `drained`: the worker's last answered call got fewer runs than it asked for, so the node had
    no more queued for it. Then one call in flight is enough (it is a long poll: the node answers
    it as soon as work is queued); more would each wake on the same notification and claim
    after the first, mostly nothing, and under a trickle of work the worker's calls (and the
    node's claims) would multiply, each with few runs. A full answer lifts the limit again."""
    if calls_in_flight >= (1 if drained else max_calls):
        return 0
    room = concurrency - running - reserved
    awaited = calls_in_flight == 0 and not drained  # the node may hold more for it, unasked
    return min(room, LEASE_CALL_RUNS) if room >= refill_at(prefetch, running > 0, awaited) else 0


def refill_at(prefetch: int, busy: bool, awaited: bool = False) -> int:
    """The least room (runs not held nor asked for) that starts a lease call. An idle worker
    (nothing running, nothing leased ahead) asks for any room at once. A busy one waits until
    half its prefetch, or one call's worth (LEASE_CALL_RUNS) if that is less, is free: the rest
    of the prefetch still feeds slots as they free while the call is out, so no slot waits for
    it, and the node, which claims one call at a time, gets a few calls of many runs instead of
    a call per handler that returned (1,000 runs at one instant were claims of 3-10 runs, ~12 ms
    each).

    `awaited`: the node's last answer was full and none of the worker's calls is out, so the node
    may still hold queued runs for it and claims nothing until it asks: NEXT_CALL_RUNS free is
    enough then. That is the tail of a herd, whose last runs waited in the queue while the
    worker's room grew to the threshold."""
    if not busy:
        return 1
    threshold = max(1, min(prefetch // 2, LEASE_CALL_RUNS))
    return min(threshold, NEXT_CALL_RUNS) if awaited else threshold


def default_prefetch(concurrency: int, recent_starts: int = 0) -> int:
    """Runs a worker leases ahead of its free slots when the user set no prefetch: one run per
    slot (at most MAX_LEASE_COUNT), so the next batch is already on its way while the current
    one runs (a worker whose handlers return at once otherwise waits a lease round trip per
    batch); more while the slots turn over fast: PREFETCH_PACE_FACTOR times the runs the worker
    started in the last PREFETCH_WINDOW_S (`recent_starts`), at most MAX_LEASE_COUNT.

    So the runs held ahead are at most about 0.2 s of work at the worker's own recent pace, which
    it measures whatever the handlers are: 100 slots of 1 ms handlers start ~10,000 runs in
    0.1 s and lease 1,000 ahead (a 1,000-run herd in a few large claims instead of ten of 100);
    8 slots of 50 ms handlers start 16 and lease 32 ahead; slow or idle slots lease one per
    slot, as before. The pace is measured, not predicted, so slots taken by slow runs shrink it
    at once: what was leased ahead while runs were fast (at most MAX_LEASE_COUNT) still waits
    for slots (see docs/semantics.md)."""
    floor = min(concurrency, MAX_LEASE_COUNT)
    return min(MAX_LEASE_COUNT, max(floor, PREFETCH_PACE_FACTOR * recent_starts))


# While a herd is being leased (the worker's last lease answer was full and a call is out), its
# completions wait: each is a row update PostgreSQL would make beside the node's next claims.
# They leave when the herd is in (an answer came back short, or no call is out), after
# HOLD_COMPLETIONS_S, or once HOLD_COMPLETIONS_RUNS wait, whichever comes first.
HOLD_COMPLETIONS_S = 0.1
HOLD_COMPLETIONS_RUNS = 500


def hold_completions(intaking: bool, held: int, held_s: float) -> float:
    """Seconds the worker still keeps its `held` completions back, the oldest of which waited
    `held_s` (0: send them now). Only while `intaking` (a lease call is out and the last answer
    was full), at most HOLD_COMPLETIONS_S and HOLD_COMPLETIONS_RUNS: a held completion keeps its
    run counted against the tenant's concurrency limit, and its slot is free already."""
    if not intaking or held == 0 or held >= HOLD_COMPLETIONS_RUNS:
        return 0.0
    left = HOLD_COMPLETIONS_S - held_s
    return left if left >= 0.001 else 0.0  # under a millisecond: not worth another wait


def max_lease_calls(concurrency: int) -> int:
    """Lease calls kept in flight at once: enough to ask for every slot in calls of
    LEASE_CALL_RUNS, plus one so slots freed while those wait are asked for too."""
    return -(-concurrency // LEASE_CALL_RUNS) + 1


def backoff_s(attempt: int, rand: float, initial_s: float = 0.05, max_s: float = 2.0) -> float:
    """Retry delay of a report or lease call: the infrastructure backoff (cronwheel/backoff.py,
    equal jitter) with the worker's first pause and cap."""
    return backoff.backoff_s(attempt, initial_s, max_s, rand)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a finished handler reports: complete (result_json) or fail, or nothing (drop)."""

    kind: str  # "complete" | "fail" | "drop"
    result_json: str = ""
    error: str = ""
    retryable: bool = True
    error_type: str = ""
    retry_after_s: float | None = None  # the earliest next attempt (JobFailed); None: the policy's backoff


def verdict(*, reason: StopReason | None, returned: bool, result_json: str, error: str,
            error_type: str, retryable: bool, timeout_s: float | None,
            retry_after_s: float | None = None) -> Verdict:
    """What a handler that returned (`returned`, with `result_json`) or raised / was stopped
    (`error`, `error_type`, `retryable`) reports, given why the worker had told it to stop.

    A cancel request or a passed timeout decides the outcome whatever the handler did after it
    was told: the server turns a failure of a run with cancel_requested into CANCELLED, and a
    timeout failure is retried as the run's retry policy says. A handler told to stop because
    the worker shuts down may still finish with a result; otherwise its run is handed back."""
    if reason is StopReason.STALE:
        return Verdict("drop")
    if reason is StopReason.CANCEL:
        return Verdict("fail", error="cancelled while running (the handler was told by ctx.cancelled)",
                       retryable=False, error_type="cancelled")
    if reason is StopReason.TIMEOUT:
        limit = f"{timeout_s:g} s" if timeout_s is not None else "its timeout"
        return Verdict("fail", error=f"timed out after {limit} (stopped by the worker)", retryable=True,
                       error_type="timeout")
    if reason is StopReason.SHUTDOWN and not (returned and result_json):
        return Verdict("fail", error="worker shutting down", retryable=True, error_type="worker_shutdown")
    if returned:
        return Verdict("complete", result_json=result_json)
    return Verdict("fail", error=error, retryable=retryable, error_type=error_type, retry_after_s=retry_after_s)
