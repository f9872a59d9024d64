"""The chaos checker can fail: each invariant is broken on purpose and must be reported.

Most tests start from a small clean history (one every-second schedule, one one-off job, one
partition owned by n1 and then n2) that passes every invariant, break exactly one thing by hand
(a row, a log line, a JSONL line, a fault record) and assert the checker names it. The last test
breaks the real thing: a zombie node that ignores its lease, against a database whose fence and
unique key were removed, must make the fencing and duplicate-tick invariants fail.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chaos.checker import InvariantResult, check
from chaos.checker_fencing import check_no_stale_write, check_takeover, takeover_times
from chaos.checker_model import check_ticks_exactly_once
from chaos.checker_timing import check_not_fired_early
from chaos.history import (
    EventRec,
    ExecutionRec,
    HealthSample,
    History,
    InjectionRecord,
    LogEventRec,
    OwnershipRec,
    PreviewRec,
    RunMeta,
    RunRec,
    ScheduleRec,
    SubmittedJob,
    history_from_json,
    history_to_json,
)
from chaos.scenarios import KNOWN_BUGS, SCENARIOS, KnownBug, plan, without_known_bugs
from cronwheel.cluster.coordination.clock_skew import ClockSkewConfig
from cronwheel.cluster.firing.firer import FiringConfig
from cronwheel.cron import parse_schedule
from tests.e2e.helpers import wait_until

T0 = 1_800_000_000.0  # a whole second
SID = "00000000-0000-4000-8000-000000000001"
JOB = "00000000-0000-4000-8000-0000000000aa"


def tick_row(t: float, **kw: object) -> ExecutionRec:
    base = ExecutionRec(id=f"e-{int(t - T0)}", schedule_id=SID, partition=0, type="tick", scheduled_for=t, run_at=t,
                        state="succeeded", attempt=1, fencing_token=1, fired_epoch=5, fired_at=t + 0.01,
                        started_at=t + 0.05, finished_at=t + 0.06, result_token=1)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def run(eid: str, token: int, t: float, worker: str = "w1", outcome: str | None = "ok",
        sched: str | None = None) -> list[RunRec]:
    start = RunRec("start", worker, eid, token, token, t, schedule_id=SID if sched else None, scheduled_for=sched)
    return [start] + ([RunRec("end", worker, eid, token, token, t + 0.01, outcome=outcome)] if outcome else [])


def clean(policy: str = "skip") -> History:
    ticks = [T0 + i for i in range(11)]  # (created_at, window_end] with created_at = T0 - 0.5
    rows = [tick_row(t) for t in ticks]
    job = ExecutionRec(id=JOB, schedule_id=None, partition=0, type="tick", scheduled_for=T0 + 3, run_at=T0 + 3,
                       state="succeeded", trigger="submit", attempt=1, fencing_token=1, fired_epoch=5,
                       fired_at=T0 + 3.01, result_token=1)
    runs = [r for t, e in zip(ticks, rows, strict=True)
            for r in run(e.id, 1, t + 0.05, sched=datetime.fromtimestamp(t, UTC).isoformat())]
    runs += run(JOB, 1, T0 + 3.05)
    return History(
        meta=RunMeta(scenario="t", seed=1, partitions=1, lease_ttl_s=3, misfire_grace_s=2, worker_lease_s=4,
                     window_start=T0 - 1, window_end=T0 + 10, collected_at=T0 + 20,
                     worker_nodes={"w1": "n1"}, queue_ahead_s=FiringConfig().queue_ahead_s,
                     max_clock_skew_s=ClockSkewConfig().max_skew_s),
        schedules=(ScheduleRec(SID, "every-second", "* * * * * *", "UTC", policy, 100, "allow", T0 - 0.5, 0),),
        executions=(*rows, job),
        ownership=(OwnershipRec(1, 0, 5, "n1", "acquired", T0 - 30, T0 - 30),
                   OwnershipRec(2, 0, 9, "n2", "acquired", T0 + 100, T0 + 100)),
        partitions_now={0: 9},
        runs=tuple(runs),
        submitted=(SubmittedJob(JOB, "tick", T0 + 3, "k1", T0),),
        health=(HealthSample(T0, "before:x", True, 0.1),),
        previews=(PreviewRec(SID, tuple((t, t) for t in [*ticks, T0 + 11])),),
    )


def result(h: History, name: str) -> InvariantResult:
    return next(r for r in check(h) if r.name == name)


def replace_rows(h: History, *rows: ExecutionRec, drop: tuple[str, ...] = ()) -> History:
    by_id = {e.id: e for e in h.executions}
    for r in rows:
        by_id[r.id] = r
    return dataclasses.replace(h, executions=tuple(e for i, e in by_id.items() if i not in drop))


def assert_fails(h: History, name: str, kind: str) -> InvariantResult:
    r = result(h, name)
    assert not r.ok, f"{name} did not fail: {r}"
    assert r.counts.get(f"violations.{kind}", 0) >= 1, r
    return r


def test_a_clean_history_passes_every_invariant() -> None:
    results = check(clean())
    assert [r for r in results if not r.ok] == []
    assert result(clean(), "ticks_exactly_once").counts["ticks_expected"] == 11


def test_history_round_trips_through_json() -> None:
    h = clean()
    assert history_from_json(history_to_json(h)) == h


# ---------------------------------------------------------------------------------- ticks


def test_a_lost_tick_is_reported() -> None:
    assert_fails(replace_rows(clean(), drop=("e-4",)), "ticks_exactly_once", "lost")


def test_a_tick_refused_beyond_max_catch_up_with_an_alert_is_not_lost() -> None:
    h = replace_rows(clean("catch_up"), drop=("e-4", "e-5"))
    ev = EventRec("misfire_refused", T0 + 6, SID, True,
                  {"first_missed": datetime.fromtimestamp(T0 + 4, UTC).isoformat(),
                   "latest_missed": datetime.fromtimestamp(T0 + 5, UTC).isoformat()})
    r = result(dataclasses.replace(h, events=(ev,)), "ticks_exactly_once")
    assert r.ok and r.counts["refused_with_alert"] == 2


def test_a_misfire_skip_the_policy_does_not_define_is_reported() -> None:
    skipped = tick_row(T0 + 4, state="skipped", state_reason="misfire:skip", fired_at=T0 + 7)
    assert_fails(replace_rows(clean("catch_up"), skipped), "ticks_exactly_once", "policy")


def buffer_one(h: History) -> History:
    return dataclasses.replace(h, schedules=(dataclasses.replace(h.schedules[0], overlap_policy="buffer_one"),))


def test_a_buffer_one_skip_while_an_earlier_tick_waits_in_the_buffer_is_the_policy() -> None:
    # Tick 5 ran long (its node paused holding the lease); tick 6 waited in the buffer until 8.2,
    # so tick 7 found the buffer full and was skipped, as buffer_one says.
    stalled = tick_row(T0 + 5, started_at=T0 + 8.1, finished_at=T0 + 8.15, attempt=2)
    waiting = tick_row(T0 + 6, started_at=T0 + 8.2, finished_at=T0 + 8.25)
    skipped = tick_row(T0 + 7, state="skipped", state_reason="overlap: buffer of one is full: 1 running, 1 buffered",
                       started_at=None, finished_at=None, attempt=0)
    r = result(buffer_one(replace_rows(clean(), stalled, waiting, skipped)), "ticks_exactly_once")
    assert r.ok and r.counts["outcome.skipped:overlap"] == 1, r


def test_an_overlap_skip_with_nothing_buffered_is_reported_under_buffer_one_and_allow() -> None:
    skipped = tick_row(T0 + 7, state="skipped", state_reason="overlap: buffer of one is full", started_at=None,
                       finished_at=None, attempt=0)  # tick 6 had started before tick 7 fired
    assert_fails(buffer_one(replace_rows(clean(), skipped)), "ticks_exactly_once", "policy")
    assert_fails(replace_rows(clean(), skipped), "ticks_exactly_once", "policy")  # allow never skips


def test_a_misfire_skip_of_a_tick_younger_than_the_grace_is_reported() -> None:
    skipped = tick_row(T0 + 4, state="skipped", state_reason="misfire:skip", fired_at=T0 + 5)  # 1 s < grace 2 s
    assert_fails(replace_rows(clean("skip"), skipped), "ticks_exactly_once", "unjustified_skip")
    justified = tick_row(T0 + 4, state="skipped", state_reason="misfire:skip", fired_at=T0 + 6.5)
    assert result(replace_rows(clean("skip"), justified), "ticks_exactly_once").ok


def test_run_once_must_fire_the_latest_missed_tick_with_its_skips() -> None:
    skip = tick_row(T0 + 4, state="skipped", state_reason="misfire:run_once", fired_at=T0 + 8)
    alone = replace_rows(clean("run_once"), skip)
    assert_fails(alone, "ticks_exactly_once", "policy")
    latest = tick_row(T0 + 5, trigger="catch_up", fired_at=T0 + 8.001)
    assert result(replace_rows(clean("run_once"), skip, latest), "ticks_exactly_once").ok


def test_a_catch_up_replay_under_policy_skip_is_reported() -> None:
    replay = tick_row(T0 + 4, trigger="catch_up", fired_at=T0 + 7)
    assert_fails(replace_rows(clean("skip"), replay), "ticks_exactly_once", "policy")


def test_an_execution_for_an_instant_that_is_not_a_tick_is_reported() -> None:
    phantom = tick_row(T0 + 4.5, id="phantom")
    assert_fails(replace_rows(clean(), phantom), "ticks_exactly_once", "phantom")


def test_two_execution_rows_for_one_tick_are_reported() -> None:
    dup = tick_row(T0 + 4, id="dup-of-4")
    h = replace_rows(clean(), dup)
    assert_fails(h, "no_duplicate_tick", "rows")
    assert_fails(h, "ticks_exactly_once", "duplicate")


def test_one_tick_run_by_workers_as_two_executions_is_reported() -> None:
    h = clean()
    sched = datetime.fromtimestamp(T0 + 4, UTC).isoformat()
    extra = RunRec("start", "w2", "some-other-execution", 1, 1, T0 + 4.2, schedule_id=SID, scheduled_for=sched)
    assert_fails(dataclasses.replace(h, runs=(*h.runs, extra)), "no_duplicate_tick", "runs")


# ---------------------------------------------------------------------------------- jobs


def test_a_oneoff_job_that_never_ran_or_never_finished_is_reported() -> None:
    h = clean()
    queued = dataclasses.replace(next(e for e in h.executions if e.id == JOB), state="queued", attempt=0)
    h = dataclasses.replace(replace_rows(h, queued), runs=tuple(r for r in h.runs if r.execution_id != JOB))
    r = assert_fails(h, "oneoffs_completed", "never_started")
    assert r.counts["violations.not_terminal"] == 1


def test_a_fired_cron_run_left_queued_is_reported() -> None:
    assert_fails(replace_rows(clean(), tick_row(T0 + 4, state="queued")), "fired_runs_completed", "not_terminal")


def test_runs_waiting_in_a_buffer_still_draining_at_collection_are_not_stuck() -> None:
    # Seed 45318: g8 (buffer_all/skip, every second, a long job of 2-25 s under load) had 42 rows of
    # the window buffered or queued at collection (15:56:18.49), behind runs that had ended one after
    # another up to 15:56:17.5: a backlog that grows by a tick a second and drains by a run every 2+ s.
    # Reported "not_terminal" before; a buffer whose runs stopped ending is still reported.
    buffer_all = dataclasses.replace(clean().schedules[0], overlap_policy="buffer_all")
    h = dataclasses.replace(clean(), schedules=(buffer_all,))
    end = h.meta.collected_at
    waiting = [tick_row(T0 + i, state="scheduled", state_reason="buffered", started_at=None, finished_at=None,
                        result_token=None) for i in (8, 9, 10)]
    moving = replace_rows(h, tick_row(T0 + 7, finished_at=end - 1.0), *waiting)
    r = result(moving, "fired_runs_completed")
    assert r.ok and r.counts["waiting_in_a_draining_buffer"] == 2, r  # tick 10 fired after the window
    assert_fails(replace_rows(h, tick_row(T0 + 7, finished_at=end - 30.0), *waiting),
                 "fired_runs_completed", "not_terminal")
    allow = dataclasses.replace(moving, schedules=clean().schedules)  # no buffer: nothing to drain
    assert_fails(allow, "fired_runs_completed", "not_terminal")


# ---------------------------------------------------------------------------------- fencing


def test_a_write_with_an_epoch_no_longer_in_force_is_reported() -> None:
    # Epoch 5 (n1) is superseded by epoch 9 (n2) at T0 + 100; a row fired with 5 after that landed.
    late = tick_row(T0 + 4, fired_at=T0 + 100.5)
    assert_fails(replace_rows(clean(), late), "no_stale_write_landed", "epoch")


def test_a_write_with_an_epoch_never_acquired_is_reported() -> None:
    assert_fails(replace_rows(clean(), tick_row(T0 + 4, fired_epoch=7)), "no_stale_write_landed", "epoch")


def test_without_commit_timestamps_the_interval_end_gets_slack_but_not_more() -> None:
    h = clean()
    h = dataclasses.replace(h, meta=dataclasses.replace(h.meta, commit_timestamps=False))
    assert result(replace_rows(h, tick_row(T0 + 4, fired_at=T0 + 101)), "no_stale_write_landed").ok
    assert_fails(replace_rows(h, tick_row(T0 + 4, fired_at=T0 + 103)), "no_stale_write_landed", "epoch")


def test_a_completion_or_failure_with_a_stale_token_is_reported() -> None:
    stale_ok = tick_row(T0 + 4, fencing_token=3, result_token=2)
    assert_fails(replace_rows(clean(), stale_ok), "no_stale_write_landed", "token")
    stale_fail = tick_row(T0 + 5, state="dead", fencing_token=3, result_token=None,
                          error="RuntimeError: planned failure of the first attempt (token=2)")
    assert_fails(replace_rows(clean(), stale_fail), "no_stale_write_landed", "token")


def test_refused_writes_are_counted_from_node_and_worker_logs() -> None:
    logs = (LogEventRec("n1", "stale_epoch", T0 + 101, partition=0, epoch=5),
            LogEventRec("n1", "stale_epoch", T0 + 102, partition=0, epoch=5),
            LogEventRec("w1", "report_refused", T0 + 103, execution_id=JOB))
    h = clean()
    runs = (*h.runs, RunRec("end", "w1", JOB, 1, 1, T0 + 104, outcome="stale"))
    r = check_no_stale_write(dataclasses.replace(h, log_events=logs, runs=runs))
    assert r.ok
    assert r.counts["refused.stale_epoch_writes"] == 2
    assert r.counts["refused.worker_reports"] == 1
    assert r.counts["refused.worker_checkpoints"] == 1


# ---------------------------------------------------------------------------------- runs


def second_run(h: History, token: int, t: float, worker: str = "w2", first_outcome: str | None = "ok") -> History:
    runs = [r for r in h.runs if r.execution_id != JOB] + run(JOB, 1, T0 + 3.05, outcome=first_outcome)
    runs += run(JOB, token, t, worker=worker)
    job = dataclasses.replace(next(e for e in h.executions if e.id == JOB), fencing_token=token, result_token=token)
    return dataclasses.replace(replace_rows(h, job), runs=tuple(runs))


def test_a_job_run_again_with_no_fault_to_explain_it_is_reported() -> None:
    assert_fails(second_run(clean(), 2, T0 + 8), "duplicate_runs_explained", "unexplained")


def test_a_job_run_again_after_its_worker_was_killed_is_explained() -> None:
    h = second_run(clean(), 2, T0 + 8, first_outcome=None)
    kill = InjectionRecord("kill-worker", "w1", T0 + 3.5, T0 + 5)
    r = result(dataclasses.replace(h, injections=(kill,)), "duplicate_runs_explained")
    assert r.ok and r.counts["reruns.after_kill-worker"] == 1
    elsewhere = InjectionRecord("kill-worker", "w9", T0 + 3.5, T0 + 5)  # another worker's fault explains nothing
    assert_fails(dataclasses.replace(h, injections=(elsewhere,)), "duplicate_runs_explained", "unexplained")


def lapse(event: str, t: float, worker: str = "w1", eid: str | None = JOB) -> LogEventRec:
    return LogEventRec(source=worker, event=event, ts=t, execution_id=eid)


def test_a_rerun_after_its_worker_could_not_heartbeat_is_explained_with_no_fault_injected() -> None:
    # Recorded (seed 79873, load average 20+, no fault on w2, n2 or PostgreSQL then): execution
    # 01a25133-444f... ran with token 1 on w2 at 15:51:29.759 (outcome stale), w2 logged
    # heartbeat_failed DEADLINE_EXCEEDED for it 3.2, 5.2 and 7.2 s later, and token 2 ran at +7.5 s.
    # Judged "unexplained" before: a lease lapse the worker logged is a fault the checker can see.
    h = second_run(clean(), 2, T0 + 3.05 + 7.5, worker="w1", first_outcome="stale")
    seen = dataclasses.replace(h, log_events=tuple(lapse("heartbeat_failed", T0 + 3.05 + d) for d in (3.2, 5.2, 7.2)))
    r = result(seen, "duplicate_runs_explained")
    assert r.ok and r.counts["reruns.after_heartbeat_failed"] == 1, r
    for unrelated in (lapse("heartbeat_failed", T0 + 6, eid="another-run"),   # another run's heartbeat
                      lapse("heartbeat_failed", T0 + 6, worker="w2"),         # another worker
                      lapse("heartbeat_failed", T0 + 11),                     # after the rerun started
                      lapse("report_refused", T0 + 6)):                       # a refusal follows a requeue
        assert_fails(dataclasses.replace(h, log_events=(unrelated,)), "duplicate_runs_explained", "unexplained")


def test_a_rerun_after_its_worker_stalled_past_a_lease_is_explained() -> None:
    # Recorded (seed 45318): w1 started five tick runs at 15:55:52.460 and logged nothing until
    # 15:55:56.953, when it found 20 leased runs 4.1-5.2 s old (lease_lapsed_before_start); their
    # reports were refused as stale and the five ran again from 15:55:57.130.
    h = second_run(clean(), 2, T0 + 3.05 + 4.7, worker="w2")
    stalled = lapse("lease_lapsed_before_start", T0 + 3.05 + 4.5, eid="a-run-leased-while-stalled")
    r = result(dataclasses.replace(h, log_events=(stalled,)), "duplicate_runs_explained")
    assert r.ok and r.counts["reruns.after_lease_lapsed_before_start"] == 1, r
    on_w2 = dataclasses.replace(stalled, source="w2")  # the rerun's worker stalling says nothing of w1's lease
    assert_fails(dataclasses.replace(h, log_events=(on_w2,)), "duplicate_runs_explained", "unexplained")


def test_a_retry_after_a_reported_failure_is_not_a_duplicate() -> None:
    r = result(second_run(clean(), 2, T0 + 8, first_outcome="error"), "duplicate_runs_explained")
    assert r.ok and r.counts["reruns.retry_after_failure"] == 1


def test_one_lease_run_twice_or_a_token_never_issued_is_reported() -> None:
    h = clean()
    twice = dataclasses.replace(h, runs=(*h.runs, *run(JOB, 1, T0 + 3.5, worker="w2")))
    assert_fails(twice, "duplicate_runs_explained", "same_lease_twice")
    unissued = dataclasses.replace(h, runs=(*h.runs, *run(JOB, 7, T0 + 6)))
    assert_fails(unissued, "duplicate_runs_explained", "token_not_issued")


# ---------------------------------------------------------------------------------- takeover, stuck, epochs


def killed_n1(acquired_after_s: float | None) -> History:
    h = clean()
    kill = InjectionRecord("kill-node", "n1", T0 + 50, T0 + 55, details={"signal_at": T0 + 50})
    own = [h.ownership[0]]
    if acquired_after_s is not None:
        t = T0 + 50 + acquired_after_s
        own.append(OwnershipRec(2, 0, 9, "n2", "acquired", t, t))
    return dataclasses.replace(h, injections=(kill,), ownership=tuple(own))


def test_a_takeover_slower_than_ttl_plus_one_is_reported() -> None:
    assert check_takeover(killed_n1(3.5)).ok
    assert takeover_times(killed_n1(3.5))[0]["max_s"] == 3.5
    assert_fails(killed_n1(4.5), "takeover_within_ttl", "slow")


def test_a_partition_never_taken_over_is_reported() -> None:
    assert_fails(killed_n1(None), "takeover_within_ttl", "never")


def test_an_execution_stuck_running_past_its_lease_is_reported() -> None:
    stuck = tick_row(T0 + 4, state="running", lease_expires=T0 + 10)  # collected at T0 + 20, grace 6 s
    assert_fails(replace_rows(clean(), stuck), "no_stuck_running", "final")
    fresh = tick_row(T0 + 4, state="running", lease_expires=T0 + 16)
    assert result(replace_rows(clean(), fresh), "no_stuck_running").counts.get("violations.final", 0) == 0
    h = clean()
    sample = HealthSample(T0 + 5, "after:kill-worker", True, 0.2, overdue_running=2)
    assert_fails(dataclasses.replace(h, health=(*h.health, sample)), "no_stuck_running", "sample")


def test_an_epoch_that_goes_backwards_or_a_fence_behind_the_history_is_reported() -> None:
    h = clean()
    backwards = (*h.ownership, OwnershipRec(3, 0, 8, "n3", "acquired", T0 + 200, T0 + 200))
    assert_fails(dataclasses.replace(h, ownership=backwards, partitions_now={0: 9}), "epochs_increase", "order")
    assert_fails(dataclasses.replace(h, partitions_now={0: 5}), "epochs_increase", "fence")


def test_an_unhealthy_sample_or_a_failed_injection_is_reported() -> None:
    h = clean()
    sick = HealthSample(T0 + 5, "after:kill-node", False, 30.0, "not converged")
    assert_fails(dataclasses.replace(h, health=(sick,)), "cluster_healthy", "unhealthy")
    broken = InjectionRecord("pause-node", "n1", T0, T0 + 6, ok=False, error="boom")
    assert_fails(dataclasses.replace(h, injections=(broken,)), "cluster_healthy", "injection")


def test_a_tick_fired_early_is_reported_unless_its_node_clock_was_skewed() -> None:
    """A policed tick (overlap forbid) is decided at its time; an overlap-allow tick is queued up
    to FiringConfig.queue_ahead_s ahead by design (stop 42), and no earlier."""
    forbid = dataclasses.replace(clean().schedules[0], overlap_policy="forbid")
    policed = dataclasses.replace(clean(), schedules=(forbid,))
    early = replace_rows(policed, tick_row(T0 + 4, fired_at=T0 + 3.6))
    assert_fails(early, "not_fired_early", "early")
    skewed = dataclasses.replace(early, meta=dataclasses.replace(early.meta, skews={"n1": 0.5}))
    r = check_not_fired_early(skewed)
    assert r.ok and r.counts["early_within_node_skew"] == 1
    ahead = FiringConfig().queue_ahead_s
    assert check_not_fired_early(replace_rows(clean(), tick_row(T0 + 4, fired_at=T0 + 4 - ahead + 0.1))).ok
    assert_fails(replace_rows(clean(), tick_row(T0 + 4, fired_at=T0 + 4 - ahead - 0.3)), "not_fired_early", "early")


def test_a_delayed_job_may_be_queued_queue_ahead_s_early_but_no_run_may_start_early() -> None:
    """A delayed one-off job is queued FiringConfig.queue_ahead_s before its run_at by design;
    earlier than that is a fire too early, and any run (tick or job) started before its run_at
    is a claim too early. Fails without the change (the job queued 0.9 s early is reported)."""
    ahead = FiringConfig().queue_ahead_s
    job = next(e for e in clean().executions if e.id == JOB)
    queued_ahead = replace_rows(clean(), dataclasses.replace(job, fired_at=T0 + 3 - ahead + 0.1))
    assert check_not_fired_early(queued_ahead).ok
    too_soon = replace_rows(clean(), dataclasses.replace(job, fired_at=T0 + 3 - ahead - 0.3))
    assert_fails(too_soon, "not_fired_early", "early")
    started = replace_rows(clean(), dataclasses.replace(job, fired_at=T0 + 2.5, started_at=T0 + 2.9))
    assert_fails(started, "not_fired_early", "started_early")
    tick_started = replace_rows(clean(), tick_row(T0 + 4, started_at=T0 + 3.7))
    assert_fails(tick_started, "not_fired_early", "started_early")


def test_a_tick_fired_late_with_no_fault_in_progress_is_a_stall() -> None:
    late = replace_rows(clean(), tick_row(T0 + 4, fired_at=T0 + 6.5))  # 2.5 s late, nothing happening
    r = assert_fails(late, "fire_lag_bounded", "stall")
    assert "no fault in progress" in r.violations[0]


def test_lateness_during_a_fault_is_allowed_until_its_recovery_allowance() -> None:
    restart = InjectionRecord("restart-postgres", "postgres", T0 + 3.5, T0 + 3.7)  # allowance: +3 s
    within = replace_rows(clean(), tick_row(T0 + 4, fired_at=T0 + 8.5))  # <= 3.7 + 3 + 2
    assert result(dataclasses.replace(within, injections=(restart,)), "fire_lag_bounded").ok
    beyond = replace_rows(clean(), tick_row(T0 + 4, state="skipped", state_reason="misfire:skip", fired_at=T0 + 9.2))
    r = assert_fails(dataclasses.replace(beyond, injections=(restart,)), "fire_lag_bounded", "stall")
    assert "recorded as misfire:skip" in r.violations[0]
    kill = InjectionRecord("kill-node", "n1", T0 + 3.5, T0 + 3.7)  # moves partitions: TTL + 2 s
    assert result(dataclasses.replace(beyond, injections=(kill,)), "fire_lag_bounded").ok


def test_a_tick_fired_by_a_new_owner_still_recovering_from_its_own_fault_is_not_a_stall() -> None:
    # n1 holds the partition; n2 was cut off until T0 + 3 and takes the partition back at T0 + 4.5
    # (a rebalance), then fires the tick due at T0 + 4 six seconds late: n2's own fault excuses it.
    h = clean()
    own = (*h.ownership[:1], OwnershipRec(2, 0, 9, "n2", "acquired", T0 + 4.5, T0 + 4.5))
    late = tick_row(T0 + 4, fired_epoch=9, fired_at=T0 + 9.5)
    h = dataclasses.replace(replace_rows(h, late), ownership=own, partitions_now={0: 9})
    rows = [dataclasses.replace(e, fired_epoch=9) if e.fired_at and e.fired_at > T0 + 4.5 else e
            for e in h.executions]
    h = dataclasses.replace(h, executions=tuple(rows))
    assert_fails(h, "fire_lag_bounded", "stall")
    cut = InjectionRecord("partition-node", "n2", T0 - 3, T0 + 3)  # allowance TTL + 2 s: until T0 + 8
    assert result(dataclasses.replace(h, injections=(cut,)), "fire_lag_bounded").ok


def test_the_tick_check_takes_its_ticks_from_the_recorded_preview() -> None:
    # Every 5 seconds from an offset hashed from the schedule id, in Lord Howe (UTC+10:30/+11): the
    # checker computes no cron, so the ticks are the preview's (here the product's cron, as
    # PreviewSchedule answers); a missing one is lost and a row on any other second is a phantom.
    sid = str(uuid.UUID(int=42))
    sched = ScheduleRec(sid, "h5", "H/5 * * * * *", "Australia/Lord_Howe", "skip", 10, "allow", T0 - 0.5, 0)
    cron = parse_schedule(sched.cron, sched.timezone, schedule_id=sid)
    ticks = [t.timestamp() for t in cron.ticks_between(datetime.fromtimestamp(T0 - 0.5, UTC),
                                                       datetime.fromtimestamp(T0 + 20, UTC))]
    h = clean()
    h = dataclasses.replace(h, schedules=(*h.schedules, sched),
                            previews=(*h.previews, PreviewRec(sid, tuple((t, t) for t in ticks))))
    window = [t for t in ticks if t <= T0 + 10]
    assert len(window) in (2, 3) and all(b - a == 5 for a, b in zip(ticks, ticks[1:], strict=False))
    assert check_ticks_exactly_once(h).counts["violations.lost"] == len(window)
    rows = [tick_row(t, id=f"h5-{t}", schedule_id=sid) for t in window]
    assert check_ticks_exactly_once(replace_rows(h, *rows)).ok
    wrong = tick_row(window[0] + 1, id="h5-wrong", schedule_id=sid)
    assert_fails(replace_rows(h, *rows, wrong), "ticks_exactly_once", "phantom")
    no_preview = dataclasses.replace(h, previews=h.previews[:1])
    assert_fails(no_preview, "ticks_exactly_once", "no_preview")


# ---------------------------------------------------------------------------------- timelines


def test_the_same_seed_plans_the_same_timeline_and_another_seed_another() -> None:
    s = SCENARIOS["all"]
    assert plan(s, 7) == plan(s, 7)
    assert plan(s, 7) != plan(s, 8)
    first = [step.failpoint for step in plan(s, 7)[:len(s.failpoints)]]
    assert sorted(first) == sorted(s.failpoints)  # each failpoint once, first
    assert first.index("scale-out") < first.index("scale-in")


@pytest.mark.parametrize("bugs", [KNOWN_BUGS, (KnownBug("partition-heal-drops-partition", ("partition-node",)),
                                              KnownBug("overlap-policy-crash", overlap_schedules=True))])
def test_known_bugs_are_left_out_of_all_and_each_has_its_regression_scenario(
        bugs: tuple[KnownBug, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("chaos.scenarios.KNOWN_BUGS", bugs)
    scenario, notes = without_known_bugs(SCENARIOS["all"])
    for bug in bugs:
        assert SCENARIOS[bug.regression].regression, bug
        assert not set(bug.failpoints) & set(scenario.failpoints)
        assert not (bug.overlap_schedules and scenario.overlap_schedules)
        assert any(bug.regression in n for n in notes)
    assert len(notes) == len(bugs)
    assert without_known_bugs(SCENARIOS["kill-node"]) == (SCENARIOS["kill-node"], [])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_plans_only_known_failpoints(name: str) -> None:
    from chaos.failpoints import FAILPOINTS

    assert {s.failpoint for s in plan(SCENARIOS[name], 1)} <= set(FAILPOINTS)


# ---------------------------------------------------------------------------------- the real thing

UNFENCE = """
ALTER TABLE partitions RENAME TO partitions_real;
CREATE TABLE any_epoch (epoch bigint PRIMARY KEY);
INSERT INTO any_epoch SELECT generate_series(0, 20000);
-- Every epoch matches: the fence's `epoch = %(epoch)s` checks always pass.
CREATE VIEW partitions AS
    SELECT p.id, e.epoch, p.owner, p.acquired_at, p.epoch AS real_epoch
      FROM partitions_real p CROSS JOIN any_epoch e;
CREATE FUNCTION partitions_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.epoch <> OLD.real_epoch THEN RETURN NULL; END IF;  -- one row per partition is real
    UPDATE partitions_real SET epoch = NEW.epoch, owner = NEW.owner, acquired_at = NEW.acquired_at
     WHERE id = OLD.id;
    RETURN NEW;
END $$;
CREATE TRIGGER partitions_update INSTEAD OF UPDATE ON partitions
    FOR EACH ROW EXECUTE FUNCTION partitions_update();
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_a_zombie_that_ignores_its_lease_against_an_unfenced_database_fails_the_checker(tmp_path: Path) -> None:
    """Break fencing for real: a database whose fence accepts every epoch, and a node (`z`, started
    with --unsafe-ignore-local-trust) cut off from etcd, so it keeps firing for partitions another
    node has taken over. Its writes land with the old epoch; the checker must say so. Then the unique
    key is dropped in the same throwaway database and a second execution of a tick is inserted by
    hand: the duplicate-tick invariant must fail too."""
    import psycopg

    from chaos.collect import collect
    from cronwheel.devtools.harness import ProcessCluster, create_schedules

    ttl, parts = 3, 8
    (tmp_path / "c").mkdir()
    with ProcessCluster(partitions=parts, lease_ttl_s=ttl, etcd_size=3, workdir=tmp_path / "c") as c:
        with psycopg.connect(c.pg.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET track_commit_timestamp = on")
        c.pg.restart()
        with psycopg.connect(c.dsn, autocommit=True) as conn:
            conn.execute(UNFENCE)
        ends = c.etcd.endpoints
        c.start_node("n1", "--etcd", ",".join(ends[:2]))
        c.start_node("z", "--etcd", ends[2], "--unsafe-ignore-local-trust")
        wait_until(lambda: len(c.owners()) == parts and {o for o, _ in c.owners().values()} == {"n1", "z"}, 20,
                   "n1 and z to share the partitions", interval_s=0.1)
        rows = create_schedules(c, [
            dict(tenant="t", name=f"s{i}", cron="* * * * * *", timezone="UTC", job_type="tick",
                 misfire_policy="skip") for i in range(16)])
        window_start = time.time()
        with_schedules = {r.partition for r in rows}
        wait_until(lambda: with_schedules <= {p for (p,) in c.sql("SELECT DISTINCT partition FROM executions")}, 15,
                   "both owners to fire on every partition that holds a schedule", interval_s=0.1)
        t_cut = time.time()
        c.etcd.kill_member(2)  # z's only etcd member: z hears nothing more, and ignores its lease
        wait_until(lambda: len(c.owners()) == parts and all(o == "n1" for o, _ in c.owners().values()), ttl + 8,
                   "n1 to take every partition over from the cut-off z", interval_s=0.1)
        # Both fire every tick now: n1 with the new epochs, z with the old ones. Wait for what the
        # checker must catch: a row of z's old epoch committed after n1's epoch was (commit timestamps,
        # as the checker bounds the epochs; the acquisition and its history row are one transaction).
        wait_until(lambda: c.sql(
            "SELECT count(*) FROM executions e JOIN partitions_real p ON p.id = e.partition"
            " WHERE e.fired_epoch < p.epoch AND e.fired_at > pg_xact_commit_timestamp(p.xmin)")[0][0], 15,
            "a write of z's old epoch to land after n1 took its partition", interval_s=0.1)
        window_end = time.time() - 2
        meta = RunMeta(scenario="unfenced-zombie", seed=0, partitions=parts, lease_ttl_s=ttl, misfire_grace_s=10,
                       worker_lease_s=60, window_start=window_start, window_end=window_end,
                       collected_at=time.time())
        cut = InjectionRecord("partition-node", "z", t_cut, time.time(), details={"signal_at": t_cut})
        h = collect(c.dsn, c.workdir, tmp_path / "no-jsonl", meta, ["n1", "z"], [], [cut], [],
                    partitions_table="partitions_real")
        landed = check_no_stale_write(h)
        assert not landed.ok, landed
        assert landed.counts["violations.epoch"] >= 1
        assert any("z, in force only" in v for v in landed.violations), landed.violations
        assert result(h, "epochs_increase").ok  # the ownership history itself is sound
        assert result(h, "no_duplicate_tick").ok  # the unique key still holds here

        with psycopg.connect(c.dsn, autocommit=True) as conn:
            conn.execute("DROP INDEX executions_schedule_tick")
            conn.execute("INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at,"
                         " state, trigger) SELECT gen_random_uuid(), schedule_id, tenant, type, partition,"
                         " scheduled_for, run_at, 'queued', 'cron' FROM executions"
                         " WHERE schedule_id IS NOT NULL ORDER BY scheduled_for LIMIT 1")
        h2 = collect(c.dsn, c.workdir, tmp_path / "no-jsonl", meta, ["n1", "z"], [], [cut], [],
                     partitions_table="partitions_real")
    dup = result(h2, "no_duplicate_tick")
    assert not dup.ok and dup.counts["violations.rows"] == 1, dup


def test_early_fires_are_judged_by_the_bounds_the_nodes_stated_and_not_without_them() -> None:
    """The checker imports no server code: the queue-ahead and the skew bound are the nodes' own
    (RunMeta, from their node_started lines). A smaller stated queue-ahead makes the same fire
    early; a history that does not record them cannot pass."""
    ahead = FiringConfig().queue_ahead_s
    h = replace_rows(clean(), tick_row(T0 + 4, fired_at=T0 + 4 - ahead + 0.1))
    assert check_not_fired_early(h).ok
    assert_fails(dataclasses.replace(h, meta=dataclasses.replace(h.meta, queue_ahead_s=ahead / 4)),
                 "not_fired_early", "early")
    assert_fails(dataclasses.replace(h, meta=dataclasses.replace(h.meta, queue_ahead_s=None)),
                 "not_fired_early", "unrecorded")


@pytest.mark.e2e
def test_the_collector_records_the_settings_each_node_states_when_it_starts() -> None:
    """A real node's node_started line carries its queue-ahead and its --max-clock-skew."""
    from chaos.collect import read_node_settings
    from cronwheel.devtools.harness import ProcessCluster

    with ProcessCluster(partitions=2, lease_ttl_s=3) as c:
        c.start_node("n1", "--max-clock-skew", "1.5")
        wait_until(lambda: c.nodes["n1"].log_events("node_started"), 30, "n1's node_started line")
        assert read_node_settings(c.workdir, ["n1"]) == {"queue_ahead_s": FiringConfig().queue_ahead_s,
                                                         "max_clock_skew_s": 1.5}


def test_no_handler_may_begin_earlier_than_its_run_at_minus_the_clock_skew_bound() -> None:
    """The nodes stand down beyond --max-clock-skew (issue 47, item 6), so a worker's own start
    line (true time) earlier than run_at minus that bound is a violation whatever skew the run
    recorded; within the bound it is the skew's, judged by the other checks."""
    bound = ClockSkewConfig().max_skew_s
    h = dataclasses.replace(clean(), meta=dataclasses.replace(clean().meta, skews={"n1": 5.0}))
    assert check_not_fired_early(h).counts["handler_starts_checked"] == len(h.runs) // 2
    within = dataclasses.replace(h, runs=(*h.runs, *run(JOB, 2, T0 + 3 - bound + 0.2, outcome=None)))
    assert check_not_fired_early(within).ok
    beyond = dataclasses.replace(h, runs=(*h.runs, *run(JOB, 2, T0 + 3 - bound - 0.5, outcome=None)))
    assert_fails(beyond, "not_fired_early", "started_before_skew_bound")
