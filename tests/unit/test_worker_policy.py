"""The worker SDK's pure rules: lease sizes, stop reasons, status codes, what a handler reports."""

from __future__ import annotations

import grpc
import pytest

from cronwheel.client.worker_policy import (
    HOLD_COMPLETIONS_RUNS,
    HOLD_COMPLETIONS_S,
    LEASE_CALL_RUNS,
    MAX_LEASE_COUNT,
    NEXT_CALL_RUNS,
    CodeClass,
    StopReason,
    Verdict,
    backoff_s,
    classify,
    default_prefetch,
    hold_completions,
    lease_size,
    max_lease_calls,
    refill_at,
    status_code,
    stronger,
    verdict,
)


def test_a_large_room_is_asked_for_in_calls_of_lease_call_runs_all_in_flight_at_once() -> None:
    # The node claims one call at a time: calls of 250 are claimed one after the other while the
    # worker starts the runs of the earlier ones. Every call fits the node's limit.
    assert LEASE_CALL_RUNS <= MAX_LEASE_COUNT
    concurrency, running, reserved, calls, asked = 2 * MAX_LEASE_COUNT + 56, 0, 0, 0, []
    limit = max_lease_calls(concurrency)
    while n := lease_size(concurrency, running, reserved, calls, limit):
        asked.append(n)
        reserved += n
        calls += 1
    assert asked == [LEASE_CALL_RUNS] * 8 + [56]
    assert calls < limit  # one call is left for slots freed while these wait


def test_one_call_can_ask_for_a_whole_herd_of_a_default_worker() -> None:
    # 100 slots and 100 prefetched: one call asks for all 200 (it was two calls of at most 100)
    assert lease_size(200, running=0, reserved=0, calls_in_flight=0, max_calls=max_lease_calls(200)) == 200


def test_a_drained_worker_keeps_one_call_in_flight_whatever_its_room() -> None:
    # the node had fewer runs than the last call asked for: one long poll is enough
    assert lease_size(1000, running=0, reserved=250, calls_in_flight=1, max_calls=5, drained=True) == 0
    assert lease_size(1000, running=0, reserved=0, calls_in_flight=0, max_calls=5, drained=True) == LEASE_CALL_RUNS
    assert lease_size(1000, running=0, reserved=250, calls_in_flight=1, max_calls=5, drained=False) == LEASE_CALL_RUNS


def test_slots_freed_while_calls_wait_are_asked_for_by_one_more_call() -> None:
    assert max_lease_calls(100) == 2
    assert lease_size(100, running=60, reserved=30, calls_in_flight=1, max_calls=2) == 10
    assert lease_size(100, running=60, reserved=30, calls_in_flight=2, max_calls=2) == 0
    assert lease_size(4, running=4, reserved=0, calls_in_flight=0, max_calls=2) == 0


@pytest.mark.parametrize(("current", "new", "wins"), [
    (None, StopReason.SHUTDOWN, StopReason.SHUTDOWN),
    (StopReason.SHUTDOWN, StopReason.TIMEOUT, StopReason.TIMEOUT),
    (StopReason.TIMEOUT, StopReason.CANCEL, StopReason.CANCEL),
    (StopReason.CANCEL, StopReason.TIMEOUT, StopReason.CANCEL),
    (StopReason.CANCEL, StopReason.STALE, StopReason.STALE),
    (StopReason.STALE, StopReason.SHUTDOWN, StopReason.STALE),
])
def test_the_stronger_stop_reason_wins(current: StopReason | None, new: StopReason, wins: StopReason) -> None:
    assert stronger(current, new) is wins


@pytest.mark.parametrize(("code", "kind"), [
    (grpc.StatusCode.OK, CodeClass.OK),
    (grpc.StatusCode.UNAVAILABLE, CodeClass.RETRY),
    (grpc.StatusCode.DEADLINE_EXCEEDED, CodeClass.RETRY),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, CodeClass.RETRY),
    (grpc.StatusCode.UNAUTHENTICATED, CodeClass.FATAL),
    (grpc.StatusCode.PERMISSION_DENIED, CodeClass.FATAL),
    (grpc.StatusCode.FAILED_PRECONDITION, CodeClass.STALE),
    (grpc.StatusCode.NOT_FOUND, CodeClass.STALE),
    (grpc.StatusCode.INVALID_ARGUMENT, CodeClass.REFUSED),
])
def test_status_codes_are_classified_once(code: grpc.StatusCode, kind: CodeClass) -> None:
    assert classify(code) is kind
    assert status_code(code.value[0]) is code


def v(reason: StopReason | None, returned: bool = True, result: str = '{"ok": true}') -> Verdict:
    return verdict(reason=reason, returned=returned, result_json=result if returned else "",
                   error="" if returned else "boom", error_type="" if returned else "RuntimeError",
                   retryable=True, timeout_s=2.0)


def test_a_handler_that_returns_after_a_cancel_request_ends_cancelled_not_succeeded() -> None:
    for returned in (True, False):
        out = v(StopReason.CANCEL, returned)
        assert (out.kind, out.error_type, out.retryable) == ("fail", "cancelled", False)


def test_a_handler_stopped_at_its_timeout_reports_a_retryable_timeout() -> None:
    out = v(StopReason.TIMEOUT, returned=True)
    assert (out.kind, out.error_type, out.retryable) == ("fail", "timeout", True)
    assert "2 s" in out.error


def test_a_stale_run_reports_nothing_and_a_shutdown_hands_back_unless_it_finished() -> None:
    assert v(StopReason.STALE).kind == "drop"
    assert v(StopReason.SHUTDOWN).kind == "complete"
    assert v(StopReason.SHUTDOWN, result="").error_type == "worker_shutdown"
    assert v(StopReason.SHUTDOWN, returned=False).error_type == "worker_shutdown"


def test_an_undisturbed_handler_reports_what_it_did() -> None:
    assert v(None) == Verdict("complete", result_json='{"ok": true}')
    out = v(None, returned=False)
    assert (out.kind, out.error_type, out.retryable) == ("fail", "RuntimeError", True)


def test_backoff_grows_to_its_ceiling_with_jitter() -> None:
    assert backoff_s(1, 0.0) == pytest.approx(0.025)
    assert backoff_s(30, 0.999) <= 2.0
    assert backoff_s(3, 0.5) < backoff_s(4, 0.5)
    with pytest.raises(ValueError):
        backoff_s(0, 0.5)


def test_a_busy_worker_refills_its_prefetch_in_batches_an_idle_one_asks_at_once() -> None:
    # concurrency 100, prefetch 100: capacity 200. Busy with 100 running and 60 leased ahead,
    # 40 free is not worth a call (the 60 feed slots meanwhile); 50 free is.
    # (drained: the node's last answer was short; after a full one, see the test below)
    assert refill_at(100, busy=True) == 50
    assert lease_size(200, running=160, reserved=0, calls_in_flight=0, max_calls=2, prefetch=100, drained=True) == 0
    assert lease_size(200, running=150, reserved=0, calls_in_flight=0, max_calls=2, prefetch=100, drained=True) == 50
    # idle: any room at once (it waits in a long poll for work)
    assert refill_at(100, busy=False) == 1
    assert lease_size(200, running=0, reserved=0, calls_in_flight=0, max_calls=2, prefetch=100) == 200
    # a large prefetch: a busy worker asks once a whole call's worth is free, not half of 1,000
    assert refill_at(1000, busy=True) == LEASE_CALL_RUNS
    assert lease_size(1100, running=851, reserved=0, calls_in_flight=0, max_calls=6, prefetch=1000, drained=True) == 0
    assert lease_size(1100, running=600, reserved=0, calls_in_flight=0, max_calls=6, prefetch=1000) == 250
    assert lease_size(1100, running=600, reserved=250, calls_in_flight=1, max_calls=6, prefetch=1000) == 250
    assert lease_size(1100, running=600, reserved=500, calls_in_flight=2, max_calls=6, prefetch=1000) == 0
    # no prefetch: every freed slot is asked for, as before
    assert refill_at(0, busy=True) == 1
    assert lease_size(100, running=99, reserved=0, calls_in_flight=0, max_calls=2, prefetch=0) == 1


def test_after_a_full_answer_with_no_call_out_a_worker_asks_once_a_few_runs_are_free() -> None:
    # The node answered the worker's last call in full, so it may hold more queued runs for it,
    # and it claims nothing until the worker asks: with no call out, NEXT_CALL_RUNS free is
    # enough (the refill threshold would be 250 here: a herd's last runs waited for it).
    assert refill_at(1000, busy=True, awaited=True) == NEXT_CALL_RUNS
    assert refill_at(12, busy=True, awaited=True) == 6
    assert refill_at(1000, busy=False, awaited=True) == 1
    assert lease_size(1100, running=851, reserved=0, calls_in_flight=0, max_calls=6, prefetch=1000) == 249
    assert lease_size(1100, running=1100 - NEXT_CALL_RUNS, reserved=0, calls_in_flight=0, max_calls=6,
                      prefetch=1000) == NEXT_CALL_RUNS
    assert lease_size(1100, running=1100 - NEXT_CALL_RUNS + 1, reserved=0, calls_in_flight=0, max_calls=6,
                      prefetch=1000) == 0
    # a call already out: the node has one to answer, further calls wait for the threshold
    assert lease_size(1100, running=600, reserved=260, calls_in_flight=1, max_calls=6, prefetch=1000) == 0
    # after a short answer the node had nothing more: the threshold holds
    assert lease_size(1100, running=851, reserved=0, calls_in_flight=0, max_calls=6, prefetch=1000, drained=True) == 0
    # a threshold already under NEXT_CALL_RUNS (a small prefetch) is kept
    assert lease_size(24, running=19, reserved=0, calls_in_flight=0, max_calls=2, prefetch=12) == 0
    assert lease_size(24, running=18, reserved=0, calls_in_flight=0, max_calls=2, prefetch=12) == 6


def test_holding_back_never_idles_a_slot() -> None:
    # The worker starts leased-ahead runs the moment a slot frees, so a slot is free only when
    # nothing is leased ahead. In every such state the worker asks (holding back happens only
    # while every slot is busy or has a leased run waiting for it).
    for concurrency in (1, 4, 16, 100, 1000):
        for prefetch in (0, 1, 7, concurrency, 2 * concurrency, MAX_LEASE_COUNT):
            capacity = concurrency + prefetch
            for running in range(concurrency):  # a slot is free, nothing leased ahead
                n = lease_size(capacity, running, 0, 0, max_lease_calls(capacity), prefetch)
                assert n == min(capacity - running, LEASE_CALL_RUNS), (concurrency, prefetch, running, n)


def test_the_default_prefetch_is_twice_the_recent_starts_between_one_per_slot_and_the_limit() -> None:
    assert default_prefetch(100) == 100  # idle, or nothing started lately: one per slot
    assert default_prefetch(16, recent_starts=3) == 16
    assert default_prefetch(8, recent_starts=16) == 32  # 8 slots of 50 ms: 16 starts in 0.1 s
    assert default_prefetch(100, recent_starts=80) == 160
    assert default_prefetch(100, recent_starts=600) == MAX_LEASE_COUNT
    assert default_prefetch(MAX_LEASE_COUNT + 500) == MAX_LEASE_COUNT


@pytest.mark.parametrize(("intaking", "held", "held_s", "wait"), [
    (False, 10, 0.0, 0.0),                                   # no herd coming in: send now
    (True, 0, 0.0, 0.0),                                     # nothing to hold
    (True, 10, 0.0, HOLD_COMPLETIONS_S),                     # a herd: the first wait the whole hold
    (True, 10, HOLD_COMPLETIONS_S / 4, 0.75 * HOLD_COMPLETIONS_S),
    (True, 10, HOLD_COMPLETIONS_S, 0.0),                     # held long enough
    (True, 10, 5.0, 0.0),
    (True, HOLD_COMPLETIONS_RUNS, 0.0, 0.0),                 # enough held: they go
])
def test_completions_wait_only_while_a_herd_comes_in_and_never_long(intaking: bool, held: int, held_s: float,
                                                                    wait: float) -> None:
    assert hold_completions(intaking, held, held_s) == pytest.approx(wait)


def test_held_completions_stay_well_under_the_default_tenant_limit() -> None:
    # A held completion's run still counts as running against its tenant's concurrency limit
    # (cluster.commands.tenants): holding may not starve the claims it makes room for.
    from cronwheel.cluster.commands.tenants import DEFAULT_MAX_CONCURRENCY
    assert HOLD_COMPLETIONS_RUNS <= DEFAULT_MAX_CONCURRENCY // 2
    assert 0 < HOLD_COMPLETIONS_S <= 0.25
