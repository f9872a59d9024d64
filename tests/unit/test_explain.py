"""explain() is pure: synthetic facts in, one line per tick out."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cronwheel.cluster.commands.explain import Facts, _unowned, explain
from cronwheel.cron import jitter_offset_s

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
SID = uuid.uuid4()


def m(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sched(**kw: Any) -> dict[str, Any]:
    base = {"id": SID, "cron": "* * * * *", "timezone": "UTC", "dst_gap": None, "dst_repeated": None,
            "created_at": m(0), "deleted_at": None, "partition": 3, "success_alert_at": None}
    return {**base, **kw}


def ex(minute: float, state: str = "succeeded", reason: str | None = None, trigger: str = "cron") -> dict[str, Any]:
    t = m(minute)
    return {"id": uuid.uuid4(), "scheduled_for": t, "run_at": t, "state": state, "state_reason": reason,
            "trigger": trigger, "attempt": 1, "fired_at": t + timedelta(milliseconds=4)}


def own(kind: str, epoch: int, owner: str, minute: float) -> dict[str, Any]:
    return {"kind": kind, "epoch": epoch, "owner": owner, "at": m(minute)}


def ev(kind: str, minute: float, **data: Any) -> dict[str, Any]:
    return {"kind": kind, "at": m(minute), "actor": "alice", "data": data, "id": 1, "alert": False}


def outcomes(f: Facts, start: float, end: float, now: float) -> dict[int, tuple[str, str]]:
    return {int((e.tick - T0).total_seconds() // 60): (e.outcome, e.reason)
            for e in explain(f, m(start), m(end), m(now))}


def test_every_tick_in_the_window_gets_exactly_one_line() -> None:
    f = Facts(sched(created_at=m(2), deleted_at=m(20)), [ex(3), ex(4, "skipped", "overlap: forbid: 1 running")],
              [ev("schedule_paused", 5.5), ev("schedule_resumed", 7.5)], [own("acquired", 10, "n1", 0)])
    got = outcomes(f, 0, 25, 30)
    assert sorted(got) == list(range(25))
    assert got[0][0] == got[1][0] == "NOT_YET_CREATED"
    assert got[3][0] == "FIRED" and "ms after run_at" in got[3][1]
    assert got[4][0] == "SKIPPED_OVERLAP"
    assert got[6][0] == got[7][0] == "PAUSED" and "alice" in got[6][1]
    assert got[21][0] == "DELETED"
    assert got[8][0] == "MISSED" and "no record explains it" in got[8][1]


def test_pending_in_the_future() -> None:
    got = outcomes(Facts(sched(), [], [], [own("acquired", 1, "n1", 0)]), 0, 10, 5)
    assert got[9][0] == "PENDING" and got[1][0] == "MISSED"


def test_refused_catch_up_and_coalesced_misfire_come_from_events() -> None:
    f = Facts(sched(), [ex(9, trigger="catch_up")], [
        ev("misfire_refused", 9, policy="catch_up", first_missed=m(1).isoformat(), latest_missed=m(3).isoformat(),
           refused=3, max_catch_up=2),
        ev("misfire_skipped", 9, policy="run_once", first_missed=m(5).isoformat(), latest_missed=m(8).isoformat()),
    ], [own("acquired", 1, "n1", 0)])
    got = outcomes(f, 1, 10, 20)
    assert [got[k][0] for k in (1, 2, 3)] == ["REFUSED_CATCH_UP"] * 3
    assert got[5][0] == "COALESCED_MISFIRE"
    assert got[9][0] == "FIRED" and "caught up" in got[9][1]


def test_dst_gap_shift_and_skip_and_repeated_hour_are_named() -> None:
    ny = sched(cron="30 2 * * *", timezone="America/New_York", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    shifted_at = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 02:30 does not exist; 03:00 EDT
    f = Facts(ny, [{**ex(0), "scheduled_for": shifted_at, "run_at": shifted_at,
                    "fired_at": shifted_at + timedelta(milliseconds=9)}], [], [])
    [line] = explain(f, datetime(2026, 3, 8, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC),
                     datetime(2026, 4, 1, tzinfo=UTC))
    assert line.outcome == "DST_SHIFTED" and line.tick == shifted_at
    skip = Facts({**ny, "dst_gap": "skip"}, [], [], [])
    [line] = explain(skip, datetime(2026, 3, 8, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC),
                     datetime(2026, 4, 1, tzinfo=UTC))
    assert line.outcome == "DST_SKIPPED"
    fall = Facts(sched(cron="30 1 * * *", timezone="America/New_York", created_at=datetime(2026, 1, 1, tzinfo=UTC)),
                 [], [], [])
    lines = explain(fall, datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC),
                    datetime(2026, 12, 1, tzinfo=UTC))
    assert [(ln.tick.hour, ln.outcome) for ln in lines] == [(5, "MISSED"), (6, "DST_REPEATED")]


def test_definition_changes_are_followed_through_update_events() -> None:
    f = Facts(sched(cron="*/2 * * * *"), [], [
        ev("schedule_updated", 10, changes={"cron": ["* * * * *", "*/2 * * * *"]})], [own("acquired", 1, "n1", 0)])
    got = outcomes(f, 0, 20, 30)
    assert 9 in got and 11 not in got and 12 in got


def test_unowned_and_takeover_are_explained_from_ownership_history() -> None:
    hist = [own("acquired", 1, "a", 0), own("released", 1, "a", 5), own("acquired", 2, "b", 6),
            own("acquired", 3, "c", 20), own("lost", 3, "c", 22), own("acquired", 4, "d", 24)]
    assert _unowned(hist, m(3)) is None
    assert "unowned from" in (_unowned(hist, m(5.5)) or "") and "b acquired it" in (_unowned(hist, m(5.5)) or "")
    assert "stopped without releasing" in (_unowned(hist, m(18)) or "") and "c took it over" in (_unowned(hist, m(18))
                                                                                                  or "")
    assert _unowned(hist, m(8)) is None, "long before the takeover: it was owned"
    assert "unowned from" in (_unowned(hist, m(23)) or "")
    assert _unowned(hist, m(30)) is None
    quick = [own("acquired", 1, "a", 0), own("released", 1, "a", 5),
             {"kind": "acquired", "epoch": 2, "owner": "b", "at": m(5) + timedelta(milliseconds=40)}]
    assert _unowned(quick, m(5) + timedelta(milliseconds=20)) is None, "a 40 ms hand-over loses nothing"
    assert "unowned from the start" in (_unowned(hist, m(-1)) or "")


def test_a_tick_queued_ahead_says_so_in_the_users_words() -> None:
    """Issue 49: the reason named an internal class (FiringConfig.queue_ahead_s); it says what the
    node does instead (there is no node flag for it)."""
    row = {**ex(3), "fired_at": m(3) - timedelta(milliseconds=990)}
    got = outcomes(Facts(sched(), [row], [], [own("acquired", 1, "n1", 0)]), 3, 4, 10)
    outcome, reason = got[3]
    assert outcome == "FIRED" and "queued 990 ms ahead of run_at" in reason, reason
    assert "FiringConfig" not in reason and "queue_ahead_s" not in reason
    assert "just before it is due" in reason


def _run_at(minute: float, jitter_s: float) -> datetime:
    return m(minute) + timedelta(seconds=jitter_offset_s(str(SID), m(minute), jitter_s))


def test_a_pause_or_delete_between_a_jittered_tick_and_its_run_time_took_it_back() -> None:
    """Issue 47 (chaos seeds 1, 2, 4, 5 of h47chaos, missed_taken_back): docs/semantics.md says a
    change committed before the tick's run time takes it back; explain judged the pause by the tick
    and said MISSED ("worth a bug report")."""
    run_at = _run_at(5, 50.0)
    assert run_at - m(5) > timedelta(seconds=1)
    between = m(5) + (run_at - m(5)) / 2
    pause = {**ev("schedule_paused", 0, reason="chaos"), "at": between}
    f = Facts(sched(jitter_s=50.0), [ex(4)], [pause, ev("schedule_resumed", 5.9)], [own("acquired", 1, "n1", 0)])
    outcome, reason = outcomes(f, 4, 7, 30)[5]
    assert outcome == "PAUSED" and "before the tick's run time" in reason and "took it back" in reason, reason
    f = Facts(sched(jitter_s=50.0, deleted_at=between), [ex(4)], [], [own("acquired", 1, "n1", 0)])
    outcome, reason = outcomes(f, 4, 6, 30)[5]
    assert outcome == "DELETED" and "before the tick's run time" in reason, reason


def test_a_pause_after_the_run_time_but_before_the_late_fire_took_the_tick_back() -> None:
    """The owner was stopped at the tick's run time; the pause committed 2 s after it, before the
    late fire, which then inserted nothing (docs/semantics.md: taken back). A tick lost while the
    schedule went on firing is still MISSED."""
    pause = {**ev("schedule_paused", 0), "at": m(5) + timedelta(seconds=2)}
    f = Facts(sched(), [ex(4)], [pause, ev("schedule_resumed", 8.5)], [own("acquired", 1, "n1", 0)])
    got = outcomes(f, 4, 10, 30)
    assert got[5][0] == "PAUSED" and "before its late fire" in got[5][1], got[5]
    assert [got[k][0] for k in (6, 7, 8)] == ["PAUSED"] * 3 and got[9][0] == "MISSED"
    fired_first = {**ex(6), "fired_at": m(5) + timedelta(seconds=1)}
    f = Facts(sched(), [ex(4), fired_first], [pause, ev("schedule_resumed", 8.5)], [own("acquired", 1, "n1", 0)])
    assert outcomes(f, 4, 7, 30)[5][0] == "MISSED"
    f = Facts(sched(deleted_at=m(5) + timedelta(seconds=3)), [ex(4)], [], [own("acquired", 1, "n1", 0)])
    got = outcomes(f, 4, 7, 30)
    assert got[5][0] == "DELETED" and "before its late fire" in got[5][1], got[5]
    assert got[6][0] == "DELETED"
