"""The model-based checks (chaos.checker_model) can fail: each is broken on purpose on the clean
history of tests/chaos/test_checker.py (one every-second schedule, ticks T0..T0+10) and must name
what broke. Each case is one of issue 47's holes as the generative run meets it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from chaos.checker_explain import check_explain_agrees
from chaos.checker_model import check_buffered_runs_released, check_quota_counts_created, check_ticks_exactly_once
from chaos.history import ExplainRec, History, OpRec, OwnershipRec, PreviewRec
from storage.ids import uuid7
from tests.chaos.test_checker import SID, T0, assert_fails, clean, replace_rows, result, run, tick_row


def with_ops(h: History, *ops: OpRec) -> History:
    return dataclasses.replace(h, ops=ops)


def without(h: History, *ids: str) -> History:
    """The rows and the workers' runs of these executions gone: the ticks never ran."""
    h = replace_rows(h, drop=ids)
    return dataclasses.replace(h, runs=tuple(r for r in h.runs if r.execution_id not in ids))


def policies(h: History, **kw: object) -> History:
    return dataclasses.replace(h, schedules=(dataclasses.replace(h.schedules[0], **kw),))  # type: ignore[arg-type]


def test_a_tick_run_after_a_pause_answered_before_its_run_at_is_reported() -> None:
    # Item 3: the pause answered 0.8 s before tick 6, which still ran.
    h = with_ops(clean(), OpRec("pause", SID, T0 + 5.1, T0 + 5.2), OpRec("resume", SID, T0 + 8.5, T0 + 8.6))
    h = without(h, "e-7", "e-8")  # 7 and 8 were taken back, as they should
    r = assert_fails(h, "ticks_exactly_once", "not_taken_back")
    assert r.counts["violations.not_taken_back"] == 1 and r.counts["taken_back"] == 2
    assert result(without(h, "e-6"), "ticks_exactly_once").ok


def test_a_pause_whose_interval_spans_the_run_at_allows_both_and_is_counted_ambiguous() -> None:
    h = with_ops(clean(), OpRec("pause", SID, T0 + 5.9, T0 + 6.2), OpRec("resume", SID, T0 + 6.3, T0 + 6.4))
    for drop in ((), ("e-6",)):
        r = result(without(h, *drop), "ticks_exactly_once")
        assert r.ok and r.counts["ambiguous"] == 1 and r.counts["ambiguous_share"] == round(1 / 11, 4), r


def test_a_tick_fired_with_the_payload_of_before_an_edit_answered_before_its_run_at_is_reported() -> None:
    # Item 3: a fire statement blocked on schedule_due rechecked an old version and inserted the old payload.
    h = with_ops(clean(), OpRec("update", SID, T0 + 4.5, T0 + 4.6, version=1))
    rows = [tick_row(T0 + i, payload_v=0 if i < 5 else 1) for i in range(11)]
    assert result(replace_rows(h, *rows), "ticks_exactly_once").ok
    stale = tick_row(T0 + 5, payload_v=0)
    assert_fails(replace_rows(h, *rows, stale), "ticks_exactly_once", "stale_payload")


def test_a_jittered_tick_recorded_as_a_misfire_before_its_run_time_is_reported() -> None:
    # Item 2: an UpdateSchedule reload 30 s before a jittered tick's run_at recorded it misfire:skip.
    h = clean("skip")
    ticks = [(T0 + i, T0 + i + (40.0 if i == 5 else 0.0)) for i in range(12)]
    h = dataclasses.replace(h, previews=(PreviewRec(SID, tuple(ticks)),))
    skipped = tick_row(T0 + 5, run_at=T0 + 45, state="skipped", state_reason="misfire:skip", fired_at=T0 + 10,
                       started_at=None, finished_at=None)
    assert_fails(replace_rows(h, skipped), "ticks_exactly_once", "unjustified_skip")


def test_a_missed_tick_skipped_for_overlap_instead_of_replayed_is_reported() -> None:
    # Item 1: forbid + catch_up replayed 1 of the missed ticks and skipped the others for overlap.
    h = policies(clean("catch_up"), overlap_policy="forbid")
    replay = tick_row(T0 + 2, trigger="catch_up", fired_at=T0 + 8, started_at=T0 + 8.1, finished_at=T0 + 12)
    overlap = [tick_row(T0 + i, state="skipped", state_reason="overlap: overlap forbidden: 1 running, 0 buffered",
                        fired_at=T0 + 8.01, started_at=None, finished_at=None) for i in (3, 4, 5)]
    assert_fails(replace_rows(h, replay, *overlap), "ticks_exactly_once", "overlap_on_missed")


def test_a_buffered_run_left_waiting_with_nothing_ahead_is_reported() -> None:
    # Item 1: buffer_one after a restart: a buffered row nothing releases, the later ticks skipped.
    h = policies(clean(), overlap_policy="buffer_one")
    stuck = tick_row(T0 + 3, state="scheduled", state_reason="buffered", started_at=None, finished_at=None)
    full = [tick_row(T0 + i, state="skipped", state_reason="overlap: buffer of one is full: 0 running, 1 buffered",
                     started_at=None, finished_at=None) for i in range(4, 11)]
    h = replace_rows(h, stuck, *full)
    h = dataclasses.replace(h, runs=tuple(r for r in h.runs if r.execution_id != "e-3"))  # it never started
    assert not check_buffered_runs_released(h).ok
    assert check_buffered_runs_released(h).counts["violations.nothing_ahead"] == 1
    # Waiting behind a run that really was unfinished is the policy.
    ahead = tick_row(T0 + 2, finished_at=T0 + 9.5)
    waited = tick_row(T0 + 3, started_at=T0 + 9.6, finished_at=T0 + 9.7)
    assert check_buffered_runs_released(replace_rows(policies(clean(), overlap_policy="buffer_one"), ahead,
                                                     waited)).ok


def test_runs_beyond_the_daily_quota_counted_from_the_workers_starts_are_reported() -> None:
    # Item 4: keep_last=0 pruned the rows, the quota counted what was left: 11 runs under a quota of 3.
    h = dataclasses.replace(clean(), meta=dataclasses.replace(clean().meta, quotas={"chaos-quota": 3}, partitions=1))
    h = policies(h, tenant="chaos-quota", keep_last=0)
    h = dataclasses.replace(h, executions=tuple(e for e in h.executions if e.schedule_id is None))
    r = check_quota_counts_created(h)
    assert not r.ok and r.counts["counted_from_runs"] == 11, r


def test_explain_saying_missed_or_contradicting_the_rows_is_reported() -> None:
    h = clean()
    ok = ExplainRec(SID, tuple((T0 + i, "fired", f"e-{i}", "") for i in range(11)))
    assert check_explain_agrees(dataclasses.replace(h, explains=(ok,))).ok
    bad = ExplainRec(SID, ((T0 + 1, "missed", None, "no execution"), (T0 + 2, "skipped_overlap", None, ""),
                           (T0 + 3, "pruned_by_retention", None, "")))
    r = check_explain_agrees(dataclasses.replace(h, explains=(bad,)))
    assert r.counts["violations.missed"] == 1 and r.counts["violations.disagrees"] == 2, r


def test_a_tick_taken_back_by_a_pause_is_not_lost_and_one_never_recorded_is() -> None:
    h = with_ops(clean(), OpRec("pause", SID, T0 + 1.1, T0 + 1.2))
    h = without(h, *(f"e-{i}" for i in range(2, 11)))
    assert check_ticks_exactly_once(h).ok
    assert_fails(without(clean(), "e-2"), "ticks_exactly_once", "lost")


def test_a_jittered_tick_buffered_behind_a_run_that_just_ended_and_never_released_is_reported() -> None:
    # Seed 1 (30 s, at fc3593a): buffer_one with jitter 12 s, ticks 45 and 50 came due out of
    # order (run_at 52.397 and 52.293); tick 50 was buffered at 52.414 behind tick 45's run, which
    # had ended at 52.412, so nothing released it and every later tick was skipped as "buffer of one
    # is full: 0 running, 1 buffered" for the rest of the run. The docs say a buffered run waits only
    # behind an unfinished one: the product is wrong.
    h = policies(clean(), overlap_policy="buffer_one", jitter_s=12.0)
    ahead = tick_row(T0 + 2, run_at=T0 + 4.397, fired_at=T0 + 4.402, started_at=T0 + 4.404, finished_at=T0 + 4.412)
    stuck = tick_row(T0 + 3, run_at=T0 + 4.293, fired_at=T0 + 4.414, state="scheduled", state_reason="buffered",
                     started_at=None, finished_at=None)
    full = [tick_row(T0 + i, state="skipped", state_reason="overlap: buffer of one is full: 0 running, 1 buffered",
                     started_at=None, finished_at=None) for i in range(4, 11)]
    r = check_buffered_runs_released(replace_rows(h, ahead, stuck, *full))
    assert r.counts["violations.nothing_ahead"] == 1, r
    assert_fails(replace_rows(h, ahead, stuck, *full), "fired_runs_completed", "not_terminal")


def test_replace_must_cancel_a_run_still_queued_when_the_next_tick_came_due() -> None:
    h = policies(clean(), overlap_policy="replace")
    queued = tick_row(T0 + 4, started_at=None, finished_at=T0 + 5.02, state="cancelled")  # by tick 5's fire
    h2 = replace_rows(h, queued)
    h2 = dataclasses.replace(h2, runs=tuple(r for r in h2.runs if r.execution_id != "e-4"))
    r = check_ticks_exactly_once(h2)
    assert r.ok and r.counts["replaced_queued"] == 1, r
    ran_anyway = tick_row(T0 + 4, started_at=T0 + 6.0, finished_at=T0 + 6.1)  # started after tick 5 replaced it
    assert_fails(replace_rows(h, ran_anyway), "ticks_exactly_once", "not_replaced")


def test_a_tick_fired_late_carries_the_edit_answered_before_its_fire() -> None:
    # Merged main, seed 1: g17 (buffer_one, jitter 12 s) tick 38:00 had run_at 38:05.140 but fired at
    # 38:06.076, behind tick 37:55 (run_at 38:06.011); an edit answered at 38:05.902, after the run_at
    # but before the fire, and the fire carried it. The fire reads the schedule as it is then: the
    # model was wrong to call that stale.
    h = with_ops(clean(), OpRec("update", SID, T0 + 5.2, T0 + 5.3, version=1))
    rows = [tick_row(T0 + i, payload_v=0 if i < 6 else 1) for i in range(11)]
    late = tick_row(T0 + 5, fired_at=T0 + 5.9, payload_v=1)
    assert result(replace_rows(h, *rows, late), "ticks_exactly_once").ok
    assert_fails(replace_rows(h, *rows, tick_row(T0 + 5, payload_v=1)), "ticks_exactly_once", "stale_payload")


def test_a_jittered_tick_due_before_its_predecessor_fires_right_after_it_and_is_not_a_stall() -> None:
    # Merged main, seed 1: g17 (every 5 s, jitter 12 s) tick 38:20 had run_at 38:20.779 and fired at
    # 38:26.382, just after tick 38:15 (run_at 38:26.347): a schedule's ticks fire in order (its due
    # cursor holds one tick). The docs did not say so and fire_lag_bounded called it a stall.
    from cronwheel.cron import jitter_offset_s

    h = policies(clean(), jitter_s=12.0)
    h = dataclasses.replace(h, meta=dataclasses.replace(h.meta, window_end=T0 + 30))
    run_at = {i: T0 + i + jitter_offset_s(SID, datetime.fromtimestamp(T0 + i, UTC), 12.0) for i in range(11)}
    i = next(i for i in range(10) if run_at[i] - run_at[i + 1] > 3.0)
    rows = [tick_row(T0 + k, run_at=run_at[k], fired_at=run_at[k] + 0.01, started_at=run_at[k] + 0.02,
                     finished_at=run_at[k] + 0.03) for k in range(11)]
    behind = tick_row(T0 + i + 1, run_at=run_at[i + 1], fired_at=run_at[i] + 0.02, started_at=run_at[i] + 0.03,
                      finished_at=run_at[i] + 0.04)
    assert result(replace_rows(h, *rows, behind), "fire_lag_bounded").ok
    stalled = tick_row(T0 + i + 1, run_at=run_at[i + 1], fired_at=run_at[i] + 2.5, started_at=run_at[i] + 2.6,
                       finished_at=run_at[i] + 2.7)
    assert_fails(replace_rows(h, *rows, stalled), "fire_lag_bounded", "stall")


def test_a_run_that_started_on_time_and_was_retried_after_its_worker_stopped_did_not_wait_in_a_buffer() -> None:
    # Merged main, seed 2: g11 (buffer_all) tick 40:00 started on w1 0.1 s after its fire; w1 was
    # SIGSTOPped and the run's second attempt started on w2 6 s later. The check read the row's
    # started_at (the last attempt's) and called it a buffered run with nothing ahead (checker wrong).
    h = policies(clean(), overlap_policy="buffer_all")
    retried = tick_row(T0 + 5, started_at=T0 + 9.0, finished_at=T0 + 9.1, attempt=2)
    assert check_buffered_runs_released(replace_rows(h, retried)).ok
    never = dataclasses.replace(h, runs=tuple(r for r in h.runs if r.execution_id != "e-5"))
    assert not check_buffered_runs_released(replace_rows(never, retried)).ok


def test_a_replace_tick_cancelled_before_it_started_may_be_pruned_without_a_trace() -> None:
    # Merged main, seed 1: g9 (replace, keep_succeeded_for 60 s) tick 37:50 has no row and no
    # start: a newer tick cancelled its queued run ("replaced by a newer run") and retention pruned
    # the cancelled row as it prunes succeeded ones. The check called it lost (checker wrong).
    h = policies(clean(), overlap_policy="replace", keep_succeeded_for_s=60.0)
    assert check_ticks_exactly_once(without(h, "e-4")).ok
    assert_fails(without(policies(clean(), overlap_policy="replace"), "e-4"), "ticks_exactly_once", "lost")


def test_a_run_whose_completion_committed_after_the_fire_may_still_count_as_unfinished() -> None:
    # Merged main, seed 1: g0 (forbid) tick 57:48 was skipped 'overlap forbidden: 1 running' at
    # 57:48.436, the run of tick 57:46 having finished_at 57:47.855, just after a PostgreSQL restart:
    # finished_at is the node's clock when it handled the completion, the fire sees the end only
    # once it commits. The checker judged by finished_at alone (checker wrong).
    h = policies(clean(), overlap_policy="forbid")
    ahead = tick_row(T0 + 3, finished_at=T0 + 3.3, committed_at=T0 + 4.5)
    skipped = tick_row(T0 + 4, state="skipped", state_reason="overlap: overlap forbidden: 1 running, 0 buffered",
                       fired_at=T0 + 4.2, started_at=None, finished_at=None)
    assert result(replace_rows(h, ahead, skipped), "ticks_exactly_once").ok
    assert_fails(replace_rows(h, tick_row(T0 + 3, finished_at=T0 + 3.3), skipped), "ticks_exactly_once", "policy")


def test_a_tick_held_behind_its_predecessor_may_be_taken_back_by_a_pause_after_its_run_time() -> None:
    # Seed 5 (item 1 proof run): g4 (every 5 s, jitter 12 s) tick 46:00 (run_at 46:02.611) waited
    # for tick 45:55, of later run time; a pause answered at 46:03.747, after 46:00's run time but
    # before its fire in order, took it back: no row. The check called it lost.
    ticks = tuple((T0 + i, T0 + i + (4.0 if i == 3 else 0.0)) for i in range(12))
    h = dataclasses.replace(clean(), previews=(PreviewRec(SID, ticks),))
    h = with_ops(h, OpRec("pause", SID, T0 + 4.5, T0 + 4.6), OpRec("resume", SID, T0 + 9.5, T0 + 9.6))
    h = without(h, *(f"e-{i}" for i in (3, 4, 5, 6, 7, 8, 9)))
    r = result(h, "ticks_exactly_once")
    assert r.ok and r.counts["taken_back"] == 6 and r.counts["ambiguous"] == 1, r  # tick 4: held behind 3


def test_a_run_cancelled_before_it_started_and_pruned_is_not_lost() -> None:
    # Seed 4 (item 3 proof run): g8 (buffer_all, keep_last 3) tick 49:45 had no row and no start: a
    # CancelExecution answered at 49:51.733 cancelled its run, which keep_last then pruned.
    h = policies(clean(), keep_last=3)
    gone = without(h, "e-4")
    assert_fails(gone, "ticks_exactly_once", "lost")
    assert result(with_ops(gone, OpRec("cancel", SID, T0 + 4.5, T0 + 4.6, execution_id="e-4")),
                  "ticks_exactly_once").ok


def test_a_manual_run_triggered_just_after_a_tick_counts_as_unfinished_for_it() -> None:
    # Seed 1717: g14 (forbid) tick 09:28 came due (fired late, 09:29.570, after a node kill) while
    # a TriggerSchedule run created at 09:28.217 ran; its scheduled_for is its own instant, after the
    # tick, and the check left it out of the runs unfinished (checker wrong): 'skipped:overlap with
    # 0..0 earlier runs unfinished'.
    h = policies(clean(), overlap_policy="forbid")
    manual = tick_row(T0 + 4.2, id="m-1", trigger="manual", fired_at=T0 + 4.2, started_at=T0 + 4.25,
                      finished_at=T0 + 4.95)
    skipped = tick_row(T0 + 4, state="skipped", state_reason="overlap: overlap forbidden: 1 running, 0 buffered",
                       run_at=T0 + 4.1, fired_at=T0 + 4.3, started_at=None, finished_at=None)
    assert result(replace_rows(h, manual, skipped), "ticks_exactly_once").ok


def test_a_run_cancelled_before_it_started_stopped_waiting_when_cancelled() -> None:
    # Seed 4242: g11 (buffer_all) tick 11:36 was fired at 11:38.019 and cancelled by a
    # CancelExecution at 11:39.429 before it started; the check counted it as waiting until the end
    # of the run with nothing ahead (checker wrong).
    h = policies(clean(), overlap_policy="buffer_all")
    h = dataclasses.replace(h, runs=tuple(r for r in h.runs if r.execution_id != "e-5"))
    cancelled = tick_row(T0 + 5, state="cancelled", state_reason="cancelled by dev: chaos", started_at=None,
                         finished_at=T0 + 6.4)
    assert check_buffered_runs_released(replace_rows(h, cancelled)).ok


def test_a_tick_held_behind_its_predecessor_is_judged_by_overlap_not_as_missed() -> None:
    # Seed 9001: g7 (forbid, every 5 s, jitter 12 s) tick 13:30 (run_at 13:31.879) waited for tick
    # 13:25 (run_at 13:36.050), was fired with it at 13:36.065 and skipped for overlap, that run being
    # unfinished: the overlap policy, rightly; the check called it a missed tick (overlap_on_missed).
    ticks = tuple((T0 + i, T0 + i + (4.0 if i == 3 else 0.0)) for i in range(12))
    h = dataclasses.replace(policies(clean(), overlap_policy="forbid"), previews=(PreviewRec(SID, ticks),))
    ahead = tick_row(T0 + 3, run_at=T0 + 7, fired_at=T0 + 7.0, started_at=T0 + 7.005, finished_at=T0 + 7.02)
    held = tick_row(T0 + 4, fired_at=T0 + 7.01, state="skipped",
                    state_reason="overlap: overlap forbidden: 1 running, 0 buffered", started_at=None, finished_at=None)
    rows = [tick_row(T0 + i, run_at=T0 + i + 0.5, fired_at=T0 + i + 0.5, started_at=T0 + i + 0.55,
                     finished_at=T0 + i + 0.6) for i in (5, 6)]
    r = result(replace_rows(h, ahead, held, *rows), "ticks_exactly_once")
    assert "violations.overlap_on_missed" not in r.counts, r


def test_a_buffered_run_behind_runs_retention_pruned_waited_behind_them() -> None:
    # Seed 1717: g0 (buffer_all, keep_last 3) tick 13:20:20 was buffered at 20:26.737 behind the runs
    # of ticks 20:05-20:15, which ran until 20:30.101 and whose rows keep_last then pruned; the check
    # saw nothing ahead of it (checker wrong): the workers' records of the pruned runs cover it.
    h = policies(clean(), overlap_policy="buffer_all", keep_last=3)
    h = without(h, "e-2", "e-3", "e-4")  # pruned rows and their runs; e-4 comes back, waiting
    ran = (*run("e-2", 1, T0 + 2.1), *run("e-3", 1, T0 + 2.2))
    ran = tuple(dataclasses.replace(r, schedule_id=SID, t=(T0 + 6.0 if r.event == "end" else r.t)) for r in ran)
    waited = tick_row(T0 + 4, fired_at=T0 + 4.01, started_at=T0 + 6.1, finished_at=T0 + 6.2)
    h = dataclasses.replace(replace_rows(h, waited), runs=h.runs + ran)
    assert check_buffered_runs_released(h).ok


def family(dep_state: str, dep_reason: str | None, up_states: tuple[str, str], start: float | None,
           policy: str = "on_success") -> History:
    """The clean history with a fan-in family: upstreams u1, u2 (finished at T0 + 2 and T0 + 4) and a
    dependent d of both (issue 52), d started at `start` (None: never)."""
    from chaos.history import ExecutionRec, SubmittedJob

    def row(eid: str, state: str, finished: float | None, reason: str | None = None) -> ExecutionRec:
        return ExecutionRec(id=eid, schedule_id=None, partition=0, type="tick", scheduled_for=T0, run_at=T0,
                            state=state, trigger="submit", attempt=1, fencing_token=1, finished_at=finished,
                            state_reason=reason, result_token=1)

    h = replace_rows(clean(), row("u1", up_states[0], T0 + 2), row("u2", up_states[1], T0 + 4),
                     row("d", dep_state, T0 + 6, dep_reason))
    runs = [*run("u1", 1, T0 + 1), *run("u2", 1, T0 + 3)] + (run("d", 1, start) if start is not None else [])
    subs = (SubmittedJob("u1", "tick", T0, "k1", T0), SubmittedJob("u2", "tick", T0, "k2", T0),
            SubmittedJob("d", "tick", T0, "kd", T0, ("u1", "u2"), policy))
    return dataclasses.replace(h, runs=h.runs + tuple(runs), submitted=h.submitted + subs)


def test_a_dependent_that_ran_before_its_last_upstream_finished_is_reported() -> None:
    from chaos.checker_model import check_dependencies

    assert check_dependencies(family("succeeded", None, ("succeeded", "succeeded"), T0 + 4.5)).ok
    r = check_dependencies(family("succeeded", None, ("succeeded", "succeeded"), T0 + 3.5))
    assert not r.ok and r.counts["violations.ran_early"] == 1


def test_a_dependent_of_a_dead_upstream_must_be_cancelled_naming_it_unless_it_runs_anyway() -> None:
    from chaos.checker_model import check_dependencies

    assert check_dependencies(family("cancelled", "upstream u2 ended dead", ("succeeded", "dead"), None)).ok
    r = check_dependencies(family("succeeded", None, ("succeeded", "dead"), T0 + 5))
    assert not r.ok and r.counts["violations.not_cancelled"] == 1
    r = check_dependencies(family("cancelled", "upstream u1 ended dead", ("succeeded", "dead"), None))
    assert not r.ok, "the reason must name the upstream that did not succeed"
    assert check_dependencies(family("succeeded", None, ("succeeded", "dead"), T0 + 5, policy="always")).ok
    r = check_dependencies(family("waiting", None, ("succeeded", "running"), None))
    assert not r.ok and r.counts["violations.upstream_unfinished"] == 1

def test_a_run_queued_ahead_cancelled_before_its_run_at_and_pruned_is_not_lost() -> None:
    # Seed 45318: g14 (allow/skip, keep_last 3) tick 15:54:20 had no row and no start: its run was
    # queued ahead at 54:19.0 and a CancelExecution of it (01a25136-8cee..., the id between those of
    # ticks :19 and :21) was answered at 54:19.402, 0.6 s before its run_at; keep_last then pruned
    # the cancelled row. Reported "lost" before: the check allowed only cancels answered after it.
    h = policies(clean(), keep_last=3)
    gone = without(h, "e-4")
    assert result(with_ops(gone, OpRec("cancel", SID, T0 + 3.32, T0 + 3.40, execution_id="e-4")),
                  "ticks_exactly_once").ok
    # A cancel answered before the run could be queued (queue_ahead_s before run_at) cannot be of it.
    too_early = T0 + 4 - h.meta.queue_ahead_s - 0.2  # type: ignore[operator]
    assert_fails(with_ops(gone, OpRec("cancel", SID, too_early - 0.1, too_early, execution_id="e-4")),
                 "ticks_exactly_once", "lost")


def test_a_tick_due_while_its_owner_held_a_lease_that_then_lapsed_may_have_been_missed() -> None:
    # Seed 45318: g1 (buffer_all/run_once, keep_last 0) tick 15:55:12, run_at 12.289: partition 12 was
    # held by n3 (acquired 15:55:10.69) whose etcd keepalives had timed out, which fired one batch at
    # 12.76 and nothing more until its lease trust window closed (partition_lost, 15:55:15.95). The
    # next owner's load recorded 15:55:12 as missed (misfire_skipped, run_once) and keep_last 0 pruned
    # the skipped row. Reported "lost" before: an outage began only when the lapse was seen.
    h = policies(clean(), keep_last=0)
    lapsed = (dataclasses.replace(h.ownership[0]),
              OwnershipRec(3, 0, 5, "n1", "lost", T0 + 6.5, T0 + 6.5),
              OwnershipRec(4, 0, 9, "n2", "acquired", T0 + 9.5, T0 + 9.5))
    gone = without(h, "e-4")
    assert result(dataclasses.replace(gone, ownership=lapsed), "ticks_exactly_once").ok
    # Held by an owner whose lease did not lapse, the tick had no outage to be missed in.
    assert_fails(gone, "ticks_exactly_once", "lost")


def test_a_backfill_run_of_a_paused_tick_whose_row_was_pruned_is_not_the_tick_run_after_the_pause() -> None:
    # Seed 45318: g15 (forbid/run_once, keep_last 3) was paused 15:54:02.59-:12.65; a BackfillSchedule
    # of that range (sent 15:54:36.44, answered :38.20, created 2) made runs of ticks 15:54:05 and :10
    # (ids 01a25136-d621..., made at :37.985), which started at :38.25 and whose rows keep_last pruned.
    # Reported "not_taken_back" before: a started run of the tick was taken for its cron run.
    h = policies(clean(), keep_last=3)
    h = with_ops(h, OpRec("pause", SID, T0 + 1.1, T0 + 1.2),
                 OpRec("backfill", SID, T0 + 14.0, T0 + 14.8, range_start=T0 + 1.2, range_end=T0 + 9.0, created=1))
    h = without(h, *(f"e-{i}" for i in range(2, 11)))
    tick = datetime.fromtimestamp(T0 + 4, UTC).isoformat()

    def run_made_at(made: float) -> History:
        eid = str(uuid7(int(made * 1000), bytes(10)))
        return dataclasses.replace(h, runs=(*h.runs, *run(eid, 1, T0 + 15.0, sched=tick)))

    assert check_ticks_exactly_once(run_made_at(T0 + 14.5)).ok
    # The same start with an id made when the tick was queued ahead is the cron run the pause took back.
    assert_fails(run_made_at(T0 + 3.2), "ticks_exactly_once", "not_taken_back")


def test_a_tick_fired_late_from_the_wheel_is_live_and_overlap_applies_to_it() -> None:
    # Seed 79873: g11 (buffer_one/catch_up) on partition 0, epoch 72 acquired by n3 at 15:51:02.63;
    # its load wrote the catch_up replays of ticks :58-:61 at 03.809. Tick 15:51:04 came due later,
    # from the wheel, which the starved n3 (its lease trust window closed at 09.2) fired at 06.73,
    # 2.73 s late: buffer_one was full (1 running, 1 buffered), so skipped for overlap. A tick in
    # the wheel is fired however late it is, as a live tick (docs/semantics.md, Misfires); only a
    # load after run time + grace makes it missed. Reported "overlap_on_missed" before.
    h = policies(clean("catch_up"), overlap_policy="forbid")
    loaded = tick_row(T0, created_at=T0 - 0.9)
    running = tick_row(T0 + 2, created_at=T0 + 1.9, finished_at=T0 + 12)
    late = tick_row(T0 + 5, state="skipped", state_reason="overlap: overlap forbidden: 1 running, 0 buffered",
                    created_at=T0 + 7.7, fired_at=T0 + 7.73, started_at=None, finished_at=None)
    wheel = replace_rows(h, loaded, running, late)
    assert "violations.overlap_on_missed" not in result(wheel, "ticks_exactly_once").counts
    # Fired by a load that ran once the tick was overdue: the epoch's first write, or a reload on an edit.
    by_load = check_ticks_exactly_once(replace_rows(h, running, dataclasses.replace(late, fired_epoch=9)))
    assert by_load.counts.get("violations.overlap_on_missed") == 1, by_load
    assert_fails(with_ops(wheel, OpRec("update", SID, T0 + 7.2, T0 + 7.3, version=0)), "ticks_exactly_once",
                 "overlap_on_missed")
