"""Explain and the operations, against the model (chaos.model) and the rows.

    explain_agrees       every ExplainSchedule answer read after the drain agrees with the rows:
                         never `missed` (a tick a pause or delete took back is reported apart,
                         as missed_taken_back), fired / skipped / pruned as the rows say
    operations_answered  each cancel, trigger and backfill did what it answered: a cancelled run
                         never started after the answer nor stayed unfinished, a trigger's run
                         exists, a backfill created what it counted
"""

from __future__ import annotations

from collections import defaultdict

from chaos import model
from chaos.checker import InvariantResult, _Collector, iso
from chaos.checker_model import _Ctx, _observed
from chaos.history import ExecutionRec, History, OpRec

EXPLAINED = {
    "fired": {model.RAN, model.REPLAYED},
    "skipped_overlap": {model.SKIPPED_OVERLAP},
    "skipped_misfire": {model.skipped_misfire("skip")},
    "coalesced_misfire": {model.skipped_misfire("run_once")},
    "skipped_quota": {model.SKIPPED_QUOTA},
}


def check_explain_agrees(h: History) -> InvariantResult:
    c = _Collector("explain_agrees")
    ctx = _Ctx(h)
    names = {s.id: s for s in h.schedules}
    by_tick: dict[tuple[str, float], list[ExecutionRec]] = defaultdict(list)
    for e in h.executions:
        if e.schedule_id is not None:
            by_tick[(e.schedule_id, e.scheduled_for)].append(e)
    previews = {p.schedule_id: {float(a): float(b) for a, b in p.ticks} for p in h.previews}
    for ex in h.explains:
        s = names.get(ex.schedule_id)
        if s is None:
            continue
        if ex.error:
            c.counts["errors"] += 1
            if s.deleted_at is None:
                c.bad("error", f"schedule {s.name}: explain failed: {ex.error}")
            continue
        for sf, outcome, _eid, reason in ex.ticks:
            sf = float(sf)
            c.counts[f"outcome.{outcome}"] += 1
            if (s.id, sf) in ctx.ambiguous_ticks:
                continue
            rows = by_tick.get((s.id, sf), [])
            where = f"schedule {s.name} tick {iso(sf)}"
            retains = s.keep_last is not None or s.keep_succeeded_for_s is not None
            run_at = previews.get(s.id, {}).get(sf, sf)
            if outcome == "missed":
                if not ctx.control(s, model.Tick(sf, run_at)).active:
                    c.bad("missed_taken_back", f"{where}: explain says missed, but a pause/delete answered "
                                               f"before its run_at {iso(run_at)} took it back ({reason})")
                else:
                    c.bad("missed", f"{where}: explain says missed ({reason})")
            elif not rows and retains:
                c.counts["of_pruned_rows"] += 1  # explain may know it from the events
            elif outcome in EXPLAINED:
                got = {_observed(r) for r in rows} | ({model.RAN} if any(
                    r.trigger in ("backfill", "manual") and r.state != "skipped" for r in rows) else set())
                if not got & EXPLAINED[outcome]:
                    c.bad("disagrees", f"{where}: explain says {outcome}, the rows say {sorted(got) or 'nothing'}")
            elif outcome == "pruned_by_retention" and rows:
                c.bad("disagrees", f"{where}: explain says pruned, yet its row {rows[0].id} is there")
            elif outcome in ("refused_catch_up", "paused", "deleted") and any(r.state != "skipped" for r in rows):
                c.bad("disagrees", f"{where}: explain says {outcome}, yet {rows[0].id} fired it")
    return c.result()


def check_operations_answered(h: History) -> InvariantResult:
    c = _Collector("operations_answered")
    by_id = {e.id: e for e in h.executions}
    starts: dict[str, list[float]] = defaultdict(list)
    for run in h.runs:
        if run.event == "start":
            starts[run.execution_id].append(run.t)
    sched = {s.id: s for s in h.schedules}
    for o in h.ops:
        c.counts[f"{o.kind}.{'ok' if o.ok else 'unanswered'}"] += 1
        if not o.ok:
            continue
        if o.kind == "cancel" and o.execution_id:
            _judge_cancel(c, o, by_id.get(o.execution_id), starts.get(o.execution_id, []))
        elif o.kind == "trigger" and o.execution_id:
            s = sched.get(o.schedule_id or "")
            if o.execution_id not in by_id and not starts.get(o.execution_id) and not (
                    s and (s.keep_last is not None or s.keep_succeeded_for_s is not None)):
                c.bad("trigger_lost", f"trigger of {o.schedule_id} answered {o.execution_id}, which has no row")
        elif o.kind == "backfill" and o.range_start is not None and o.range_end is not None:
            got = [e for e in h.executions if e.schedule_id == o.schedule_id and e.trigger == "backfill"
                   and o.range_start <= e.scheduled_for < o.range_end]
            s = sched.get(o.schedule_id or "")
            if o.created is not None and len(got) > o.created:
                c.bad("backfill", f"backfill of {o.schedule_id} answered {o.created} created, {len(got)} rows")
            elif o.created and not got and not (s and s.keep_last is not None):
                c.bad("backfill", f"backfill of {o.schedule_id} answered {o.created} created, no row is there")
    return c.result()


def _judge_cancel(c: _Collector, o: OpRec, e: ExecutionRec | None, starts: list[float]) -> None:
    if e is None:
        return  # pruned after it ended
    late = [t for t in starts if t > o.answered + 1.0]
    if late:
        c.bad("started_after_cancel", f"execution {e.id} started at {iso(late[0])}, cancelled at {iso(o.answered)}")
    if e.state in ("queued", "scheduled", "retry_scheduled"):
        c.bad("cancel_ignored", f"execution {e.id} is {e.state} after a cancel answered at {iso(o.answered)}")
