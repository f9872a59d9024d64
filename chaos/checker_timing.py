"""Timing invariants of a chaos run: pure functions of a `History` (see `chaos.checker`).

    no_stuck_running       nothing stays `running` past its lease + grace (at the end, and in
                           every health sample taken during the run)
    not_fired_early        no delayed job and no cron tick of an overlap-`allow` schedule fired
                           more than FiringConfig.queue_ahead_s before its run_at (they are
                           queued that early by design), no other tick before its run_at, beyond
                           the clock skew of the node that fired it; and no run started (was
                           claimed) before its run_at, beyond the skew of the node that claimed it
                           (a job due within QUEUED_AT_SUBMIT_WITHIN of its submission is queued
                           by the submit, not fired: no fired_at, only its start is checked);
                           and no handler began (the worker's own `start` line, on the true clock:
                           started_at is the claiming node's clock) earlier than its run_at minus
                           the nodes' --max-clock-skew, whatever skew the run gave them (the
                           clock-skew guard, cluster/coordination/clock_skew.py)
    fire_lag_bounded       every tick and delayed job fired (or got its misfire record) within
                           LAG_BOUND_S of its run_at, unless the partition changed hands right then
                           (then within LAG_BOUND_S of the new owner's acquisition) or a fault that
                           can delay it was in progress: one on the node holding the partition
                           (allowance TTL + 2 s after it ends), on PostgreSQL or the etcd leader
                           (RECOVERY_S). Worker faults excuse nothing. Anything later is a stall:
                           the misfire policy is for outages, not for a node that holds the
                           partition and should be firing.

The run_at a row was fired for is the tick plus its jitter (cronwheel.jitter, the hash cron applies), or
the one-off job's requested time: a row's own run_at moves on when a failed run is retried.
"""

from __future__ import annotations

from chaos.checker import CLOCK_SLACK_S, InvariantResult, _Collector, _dt, iso, owners_by_epoch, skew_of
from chaos.history import History
from cronwheel import jitter

LAG_BOUND_S = 2.0


def first_run_at(h: History) -> dict[str, float]:
    """execution id -> the run_at it was fired for."""
    scheds = {s.id: s for s in h.schedules}
    out = {j.execution_id: j.run_at for j in h.submitted}
    for e in h.executions:
        s = scheds.get(e.schedule_id or "")
        if s is not None and e.trigger in ("cron", "catch_up"):
            jit = jitter.offset_s(s.id, _dt(e.scheduled_for), s.jitter_s)
            out[e.id] = e.scheduled_for + jit
    return out


def due_in_order(h: History) -> dict[str, float]:
    """first_run_at, except that a tick is due no earlier than the run times of its schedule's
    earlier ticks: a schedule's ticks fire in order (one due cursor), so with a jitter longer than
    the period a tick whose run time comes before an earlier tick's fires just after that one
    (docs/semantics.md, "Jitter"). For the lag, not for "never early"."""
    due = first_run_at(h)
    latest: dict[str, float] = {}
    for e in sorted(h.executions, key=lambda e: e.scheduled_for):
        if e.schedule_id is not None and e.trigger in ("cron", "catch_up") and e.id in due:
            latest[e.schedule_id] = max(latest.get(e.schedule_id, 0.0), due[e.id])
            due[e.id] = latest[e.schedule_id]
    return due


def check_no_stuck_running(h: History) -> InvariantResult:
    c = _Collector("no_stuck_running")
    grace = h.meta.lease_ttl_s + 3.0
    c.extra["grace_s"] = grace
    for e in h.executions:
        if e.state == "running":
            c.counts["running_at_end"] += 1
            if e.lease_expires is not None and e.lease_expires < h.meta.collected_at - grace:
                c.bad("final", f"execution {e.id} running, lease expired {iso(e.lease_expires)}, "
                               f"checked {iso(h.meta.collected_at)}")
    for s in h.health:
        c.counts["samples"] += 1
        if s.overdue_running:
            c.bad("sample", f"{s.overdue_running} execution(s) running past lease + {grace}s at {iso(s.at)} "
                            f"({s.phase})")
    return c.result()


def check_not_fired_early(h: History) -> InvariantResult:
    c = _Collector("not_fired_early")
    epochs = owners_by_epoch(h)
    due = first_run_at(h)
    allow = {s.id for s in h.schedules if s.overlap_policy == "allow"}
    queued_ahead = {j.execution_id for j in h.submitted} | {  # delayed jobs and allow ticks
        e.id for e in h.executions if e.trigger == "cron" and e.schedule_id in allow}
    ahead, bound = h.meta.queue_ahead_s, h.meta.max_clock_skew_s  # what the nodes said they run with
    if ahead is None or bound is None:
        c.bad("unrecorded", "the history does not record the nodes' queue_ahead_s and max_clock_skew_s "
                            "(their node_started log lines): nothing to judge an early fire by")
        return c.result()
    max_skew = max((abs(v) for v in h.meta.skews.values()), default=0.0)
    worst = 0.0
    for e in h.executions:
        if e.id not in due:
            continue
        if e.started_at is not None:
            c.counts["starts_checked"] += 1
            if due[e.id] - e.started_at > max_skew + CLOCK_SLACK_S:
                c.bad("started_early", f"execution {e.id} started {due[e.id] - e.started_at:.3f}s before its run_at "
                                       f"{iso(due[e.id])} (largest node skew {max_skew}s)")
        if e.fired_at is None:
            continue
        c.counts["checked"] += 1
        early = due[e.id] - e.fired_at - (ahead if e.id in queued_ahead else 0.0)
        if early <= CLOCK_SLACK_S:
            continue
        skew = skew_of(h, epochs, e)
        if early <= skew + CLOCK_SLACK_S:
            c.counts["early_within_node_skew"] += 1
            worst = max(worst, early)
        else:
            c.bad("early", f"execution {e.id} fired {early:.3f}s before its run_at {iso(due[e.id])}"
                           f"{f' less {ahead:g}s queued ahead' if e.id in queued_ahead else ''} "
                           f"(firing node skew {skew}s)")
    c.extra["max_early_within_skew_s"] = round(worst, 3)
    for r in h.runs:
        if r.event != "start" or r.execution_id not in due:
            continue
        c.counts["handler_starts_checked"] += 1
        if due[r.execution_id] - r.t > bound + CLOCK_SLACK_S:
            c.bad("started_before_skew_bound", f"execution {r.execution_id}: worker {r.worker} began it "
                                               f"{due[r.execution_id] - r.t:.3f}s before its run_at "
                                               f"{iso(due[r.execution_id])} (--max-clock-skew {bound:g}s)")
    return c.result()


MOVES_PARTITIONS = frozenset({"kill-node", "pause-node", "partition-node", "partition-node-long", "deploy-node",
                              "scale-in", "scale-out", "skew-node-clock", "kill-mid-upstream-completion"})
GLOBAL_FAULTS = frozenset({"kill-etcd-leader"})  # and any fault on "postgres"
RECOVERY_S = 3.0

Window = tuple[float, float, str]


def fault_windows(h: History) -> dict[str, list[Window]]:
    """Windows [start - 1 s, end + allowance] of the faults that can delay firing, by the node whose
    partitions they delay ("*": every node's). Worker faults delay no firing."""
    out: dict[str, list[Window]] = {}
    for f in h.injections:
        allowance = h.meta.lease_ttl_s + 2.0 if f.name in MOVES_PARTITIONS else RECOVERY_S
        if f.target == "postgres" or f.name in GLOBAL_FAULTS:
            key = "*"
        elif f.name in MOVES_PARTITIONS:
            key = f.target
        else:
            continue
        out.setdefault(key, []).append((f.start - 1.0, f.end + allowance, f"{f.name} {f.target}"))
    return {k: _merge(v) for k, v in out.items()}


def _merge(ws: list[Window]) -> list[Window]:
    merged: list[Window] = []
    for lo, hi, name in sorted(ws):
        if merged and lo <= merged[-1][1]:
            plo, phi, pname = merged[-1]
            merged[-1] = (plo, max(phi, hi), pname if pname.endswith("faults") else f"{pname} and later faults")
        else:
            merged.append((lo, hi, name))
    return merged


def deadline(h: History, t: float, owner: str, handover_at: float | None, fired_by: str | None,
             windows: dict[str, list[Window]]) -> tuple[float, str]:
    """When a tick due at `t`, on a partition `owner` held at `t`, must have fired by, and why.
    A handover (release or takeover) within LAG_BOUND_S of `t` moves it to LAG_BOUND_S after the
    new owner's acquisition; a fault around `t` on PostgreSQL, etcd, the owner, or (after a
    handover) the node that fired it, to LAG_BOUND_S after the fault's allowance; a skewed owner
    clock adds its skew."""
    d, why = t + LAG_BOUND_S, "with no fault in progress"
    if handover_at is not None and handover_at <= t + LAG_BOUND_S:
        d, why = max(d, handover_at + LAG_BOUND_S), "after a handover"
    for key in {"*", owner, fired_by or owner}:
        for lo, hi, name in windows.get(key, ()):
            if lo <= t <= hi and hi + LAG_BOUND_S > d - LAG_BOUND_S:
                d, why = max(d, hi + LAG_BOUND_S), f"after the recovery allowance of {name}"
    return d + abs(h.meta.skews.get(owner, 0.0)), why


def check_fire_lag_bounded(h: History) -> InvariantResult:
    from chaos.checker_fencing import covering, intervals

    c = _Collector("fire_lag_bounded")
    c.extra["bound_s"] = LAG_BOUND_S
    due = due_in_order(h)
    windows = fault_windows(h)
    ivs = intervals(h)
    names = {s.id: s.name for s in h.schedules}
    worst = 0.0
    for e in h.executions:
        t = due.get(e.id)
        if t is None or e.fired_at is None or t > h.meta.window_end:
            continue
        if e.state == "skipped" and not (e.state_reason or "").startswith("misfire:"):
            continue  # an overlap skip is recorded on time
        c.counts["checked"] += 1
        rows = ivs.get(e.partition, [])
        held = covering(rows, t)
        owner = held.owner if held else "nobody"
        nxt = min((iv.start for iv in rows if iv.start > t), default=None)
        fired_by = next((iv.owner for iv in rows if iv.epoch == e.fired_epoch), None)
        handed_over = held is None or e.fired_epoch != held.epoch
        d, why = deadline(h, t, owner, nxt, fired_by if handed_over else None, windows)
        lag = e.fired_at - t
        worst = max(worst, lag)
        if lag > LAG_BOUND_S:
            c.counts["late_but_excused"] += e.fired_at <= d
        if e.fired_at <= d:
            continue
        what = f"schedule {names.get(e.schedule_id or '', '?')} tick" if e.schedule_id else "job"
        c.bad("stall", f"{what} due {iso(t)} on partition {e.partition}, held by {owner} since "
                       f"{iso(held.start if held else None)}, "
                       f"{'recorded as ' + str(e.state_reason) if e.state == 'skipped' else 'fired'} "
                       f"{lag:.2f}s late ({e.fired_at - d:.2f}s past its deadline, {why})")
    c.extra["max_lag_s"] = round(worst, 3)
    return c.result()


