"""The reaper's decisions are the retry policy's, written as the row's next state at `now`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.cluster.dispatch.reaper import application, decide
from cronwheel.storage.dispatch import ReapCandidate

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def cand(kind: str, attempt: int, max_attempts: int = 1000, multiplier: float = 100.0,
         cancel: bool = False) -> ReapCandidate:
    return ReapCandidate(uuid.uuid4(), kind, attempt, max_attempts, cancel, 60.0, 30.0, multiplier, 21600.0,
                         None, "t")


@pytest.mark.parametrize(("attempt", "multiplier"), [(156, 100.0), (513, 4.0), (600, 4.0), (999, 100.0)])
def test_a_timeout_at_a_long_history_is_a_retry_within_the_cap(attempt: int, multiplier: float) -> None:
    c = cand("timed_out", attempt, multiplier=multiplier)
    d = decide(c, 0.5)
    assert (d.state, d.delay_s) == ("retry_scheduled", 10800.0)
    a = application(c, d, 3, 7, NOW)
    assert a.run_at == NOW + timedelta(seconds=10800) and a.finished_at is None and a.queued_at is None
    assert (a.error_type, a.reason) == ("timeout", "timed out after 60 s")


def test_a_lapsed_lease_is_requeued_at_once_and_keeps_its_attempt() -> None:
    c = cand("expired", 600)
    a = application(c, decide(c, 0.5), 3, 7, NOW)
    assert (a.state, a.queued_at, a.run_at, a.finished_at, a.error_type) == ("queued", NOW, None, None,
                                                                              "lease_expired")


@pytest.mark.parametrize("kind", ["expired", "timed_out"])
def test_the_last_attempt_is_dead_and_a_cancelled_run_is_cancelled_both_at_now(kind: str) -> None:
    dead = cand(kind, 1000)
    assert application(dead, decide(dead, 0.5), 3, 7, NOW).finished_at == NOW
    assert decide(dead, 0.5).state == "dead"
    cancelled = cand(kind, 5, cancel=True)
    assert decide(cancelled, 0.5).state == "cancelled"
    assert application(cancelled, decide(cancelled, 0.5), 3, 7, NOW).finished_at == NOW
