"""Invariants of a chaos run: pure functions of a `History` (no I/O, no clock reads).

Each check returns an `InvariantResult` with counts (what was checked, what was seen) and the
violations found; `check(history)` runs them all. The ownership-based checks (fencing, takeover,
epochs, health) live in `chaos.checker_fencing`; this module holds the tick, job and run checks.

    ticks_exactly_once     (chaos.checker_model, against the reference model chaos.model) every
                           tick a recorded preview gives became what the model allows
    no_duplicate_tick      no (schedule, tick) has two executions (rows, or runs in the JSONL)
    oneoffs_completed      every submitted one-off job started at least once and is terminal
    fired_runs_completed   every execution fired in the window ended terminal
    duplicate_runs_explained  a run started again only after a reported failure (a retry) or a
                           fault on its worker, the worker's node or PostgreSQL; every run used a
                           token the database issued, never the same token twice

    long_retry_history     each job the long-retry-history failpoint made reached the terminal
                           state it expected; no node logged a crash (node_crashed) and the
                           reaper failed on no row (reap_row_failed / reap_failed)

The timing checks (no_stuck_running, not_fired_early, fire_lag_bounded) are in
`chaos.checker_timing`; the tenancy checks (concurrency_keys, rate_limits) in
`chaos.checker_limits`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chaos.history import TERMINAL_STATES, ExecutionRec, History, InjectionRecord, LogEventRec, RunRec

MAX_LISTED = 50
# Slack on the same host clock between PostgreSQL's now() and the node's decision.
CLOCK_SLACK_S = 0.05
# Faults on these targets can make a worker's lease lapse (it cannot heartbeat), so a second run
# of the same execution is the at-least-once contract at work, not a bug.
WORKER_PATH_FAULTS = frozenset({
    "kill-worker", "pause-worker", "kill-node", "pause-node", "deploy-node", "partition-node",
    "partition-node-long", "skew-node-clock", "kill-mid-upstream-completion",
})  # and any fault whose target is "postgres"
# What a worker logs when it could not keep a run's lease (no injected fault needed: a starved
# worker or node, on an overloaded host, misses its heartbeats the same way): a heartbeat of the run
# that failed (not refused as stale: that one follows a requeue), a completion it gave up
# reporting, or a leased run it found older than its lease, unheartbeaten, before it could start it.
LEASE_LAPSE_EVENTS = frozenset({"heartbeat_failed", "report_given_up", "lease_lapsed_before_start"})
# Faults that hold rows every node's writes may need (a node stopped mid-transaction with runs and
# schedules row-locked): any worker's completions can wait on them, as on a database fault.
SHARED_ROW_FAULTS = frozenset({"stall-completion", "kill-mid-upstream-completion"})


@dataclass
class InvariantResult:
    name: str
    ok: bool
    counts: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    total_violations: int = 0


class _Collector:
    def __init__(self, name: str) -> None:
        self.name = name
        self.counts: Counter[str] = Counter()
        self.extra: dict[str, Any] = {}
        self.violations: list[str] = []
        self.total = 0

    def bad(self, kind: str, msg: str) -> None:
        self.counts[f"violations.{kind}"] += 1
        self.total += 1
        if len(self.violations) < MAX_LISTED:
            self.violations.append(f"{kind}: {msg}")

    def result(self) -> InvariantResult:
        return InvariantResult(self.name, self.total == 0, {**dict(sorted(self.counts.items())), **self.extra},
                               self.violations, self.total)


def iso(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def owners_by_epoch(h: History) -> dict[tuple[int, int], str]:
    return {(o.partition, o.epoch): o.owner for o in h.ownership if o.kind == "acquired"}


def skew_of(h: History, epochs: dict[tuple[int, int], str], e: ExecutionRec) -> float:
    """The largest |clock skew| the node that fired `e` ever ran with (0 if none or unknown)."""
    if e.fired_epoch is None:
        return 0.0
    owner = epochs.get((e.partition, e.fired_epoch))
    return abs(h.meta.skews.get(owner, 0.0)) if owner else 0.0


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def check_no_duplicate_tick(h: History) -> InvariantResult:
    c = _Collector("no_duplicate_tick")
    groups: Counter[tuple[str, float]] = Counter()
    for e in h.executions:
        if e.schedule_id is not None:
            groups[(e.schedule_id, e.scheduled_for)] += 1
    names = {s.id: s.name for s in h.schedules}
    c.counts["ticks_with_executions"] = len(groups)
    for (sid, t), n in sorted(groups.items()):
        if n > 1:
            c.bad("rows", f"schedule {names.get(sid, sid)} tick {iso(t)} has {n} execution rows")
    ran: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in h.runs:
        if r.event == "start" and r.schedule_id and r.scheduled_for:
            ran[(r.schedule_id, r.scheduled_for)].add(r.execution_id)
    c.counts["ticks_run_by_workers"] = len(ran)
    for (sid, t_iso), ids in sorted(ran.items()):
        if len(ids) > 1:
            c.bad("runs", f"schedule {names.get(sid, sid)} tick {t_iso} was run as {len(ids)} executions")
    return c.result()


# ---------------------------------------------------------------------------------- jobs


def check_oneoffs_completed(h: History) -> InvariantResult:
    c = _Collector("oneoffs_completed")
    by_id = {e.id: e for e in h.executions}
    starts = Counter(r.execution_id for r in h.runs if r.event == "start")
    resumed = {r.execution_id for r in h.runs if r.event == "start" and (r.from_step or 0) > 0}
    for j in h.submitted:
        c.counts["submitted"] += 1
        c.counts[f"type.{j.type}"] += 1
        e = by_id.get(j.execution_id)
        if e is None:
            c.bad("missing", f"job {j.execution_id} ({j.type}) has no execution row")
            continue
        c.counts[f"state.{e.state}"] += 1
        if starts[j.execution_id]:
            c.counts["started"] += 1
        elif e.state != "cancelled":
            c.bad("never_started", f"job {j.execution_id} ({j.type}, run_at {iso(j.run_at)}) never ran "
                                   f"(state {e.state})")
        if e.state not in TERMINAL_STATES:
            c.bad("not_terminal", f"job {j.execution_id} ({j.type}) ended {e.state} after attempt {e.attempt}")
        if e.attempt > 1:
            c.counts["retried"] += 1
        if j.execution_id in resumed:
            c.counts["resumed_from_checkpoint"] += 1
    return c.result()


# A buffer releases its next run when the one ahead ends; the node and a worker take up to this
# long after that end to start it (a worker lease, plus the release).
DRAIN_STEP_S = 2.0


def draining(h: History) -> set[str]:
    """Schedules whose buffer was still draining when the history was collected: buffer_all or
    buffer_one, with a run that ended within a worker lease (+ DRAIN_STEP_S) of the collection. A
    buffer drains one run at a time, so a schedule whose runs last longer than its period (g8 of
    seed 45318: every second, a 2-25 s job, buffer_all) piles up a backlog no settle can drain;
    its waiting rows are not stuck while the run ahead of them keeps ending."""
    recent = h.meta.collected_at - h.meta.worker_lease_s - DRAIN_STEP_S
    buffered = {s.id for s in h.schedules if s.overlap_policy in ("buffer_all", "buffer_one")}
    ended = {e.schedule_id for e in h.executions if e.finished_at is not None and e.finished_at >= recent}
    ended |= {r.schedule_id for r in h.runs if r.event == "end" and r.t >= recent}
    return buffered & {sid for sid in ended if sid}


def check_fired_runs_completed(h: History) -> InvariantResult:
    c = _Collector("fired_runs_completed")
    moving = draining(h)
    for e in h.executions:
        if e.schedule_id is None or e.state == "skipped" or e.fired_at is None:
            continue
        if e.fired_at > h.meta.window_end:
            continue
        c.counts["fired"] += 1
        if e.state in TERMINAL_STATES:
            c.counts[f"state.{e.state}"] += 1
        elif e.state in ("scheduled", "queued") and e.schedule_id in moving:
            c.counts["waiting_in_a_draining_buffer"] += 1
        else:
            c.bad("not_terminal", f"execution {e.id} (tick {iso(e.scheduled_for)}) is {e.state}")
    return c.result()


# ---------------------------------------------------------------------------------- runs


def explain(a: RunRec, b: RunRec, injections: Sequence[InjectionRecord], worker_nodes: dict[str, str],
            linger_s: float) -> InjectionRecord | None:
    """A fault that can explain why the run `a` was followed by another run `b` of the same
    execution: it hit a's worker, the node that worker leases from, PostgreSQL, or rows every
    node's writes need (SHARED_ROW_FAULTS) while a ran
    (its effects linger for one worker lease after it ends)."""
    targets = {a.worker, worker_nodes.get(a.worker, "")}
    for f in injections:
        on_path = ((f.name in WORKER_PATH_FAULTS and f.target in targets) or f.target == "postgres"
                   or f.name in SHARED_ROW_FAULTS)
        if on_path and f.start <= b.t and f.end + linger_s >= a.t:
            return f
    return None


def lease_lapse_seen(a: RunRec, b: RunRec, h: History) -> LogEventRec | None:
    """The worker of run `a` logged that it could not keep a's lease before `b` started: a failed
    heartbeat or a given-up report of a's execution, or (the worker itself stalled a whole lease:
    it could heartbeat none of its runs) a leased run it found lapsed, between a's start and b's.
    Under overload this is how a lease expires with no fault injected, and it is visible, so it
    explains the rerun; a rerun with none of these is still unexplained."""
    for ev in h.log_events:
        if ev.source != a.worker or ev.event not in LEASE_LAPSE_EVENTS or not a.t <= ev.ts <= b.t:
            continue
        if ev.event == "lease_lapsed_before_start" or ev.execution_id == a.execution_id:
            return ev
    return None


def check_duplicate_runs_explained(h: History) -> InvariantResult:
    c = _Collector("duplicate_runs_explained")
    by_id = {e.id: e for e in h.executions}
    starts: dict[str, list[RunRec]] = defaultdict(list)
    ends: dict[tuple[str, int], str] = {}
    for r in h.runs:
        if r.event == "start":
            starts[r.execution_id].append(r)
        elif r.event == "end":
            ends[(r.execution_id, r.token)] = r.outcome or "?"
    linger = h.meta.worker_lease_s + 1.0
    retained = {s.id for s in h.schedules if s.keep_last is not None or s.keep_succeeded_for_s is not None}
    for eid, runs in sorted(starts.items()):
        c.counts["executions_run"] += 1
        tokens = Counter(r.token for r in runs)
        for tok, n in tokens.items():
            if n > 1:
                c.bad("same_lease_twice", f"execution {eid}: token {tok} started {n} times")
        e = by_id.get(eid)
        if e is None:
            if any(r.schedule_id in retained for r in runs):
                c.counts["pruned_by_retention"] += 1  # its schedule keeps only its last N or a window
            else:
                c.bad("unknown", f"execution {eid} ran but has no row")
            continue
        if max(tokens) > e.fencing_token:
            c.bad("token_not_issued", f"execution {eid} ran with token {max(tokens)} > issued {e.fencing_token}")
        if len(runs) == 1:
            continue
        c.counts["executions_run_more_than_once"] += 1
        ordered = sorted(runs, key=lambda r: (r.token, r.t))
        for a, b in zip(ordered, ordered[1:], strict=False):
            if a.token == b.token:
                continue
            outcome = ends.get((eid, a.token))
            if outcome == "error":
                c.counts["reruns.retry_after_failure"] += 1
                continue
            f = explain(a, b, h.injections, h.meta.worker_nodes, linger)
            if f is None and (lapse := lease_lapse_seen(a, b, h)) is not None:
                c.counts[f"reruns.after_{lapse.event}"] += 1
                c.counts["duplicates_explained"] += 1
                continue
            if f is None:
                c.bad("unexplained", f"execution {eid}: run with token {a.token} on {a.worker} at {iso(a.t)} "
                                     f"(outcome {outcome or 'none'}) ran again with token {b.token} on {b.worker} "
                                     f"at {iso(b.t)}, with no fault on its worker, node or PostgreSQL")
            else:
                c.counts[f"reruns.after_{f.name}"] += 1
                c.counts["duplicates_explained"] += 1
        if e.fencing_token < len(tokens):
            c.bad("not_visible", f"execution {eid}: {len(tokens)} leased runs, database token only {e.fencing_token}")
    return c.result()


# ---------------------------------------------------------------------------------- retries


# Failpoints whose record carries `expected` (execution id -> terminal state), checked here.
EXPECTING = frozenset({"long-retry-history", "kill-mid-upstream-completion"})


def check_long_retry_history(h: History) -> InvariantResult:
    c = _Collector("long_retry_history")
    by_id = {e.id: e for e in h.executions}
    for f in h.injections:
        if f.name not in EXPECTING:
            continue
        c.counts["injections"] += 1
        for eid, want in dict(f.details.get("expected") or {}).items():
            c.counts["jobs"] += 1
            e = by_id.get(eid)
            if e is None:
                c.bad("missing", f"job {eid} (expected {want}) has no execution row")
            elif e.state != want:
                c.bad("state", f"job {eid} ended {e.state} at attempt {e.attempt}, expected {want}")
            else:
                c.counts[f"reached.{want}"] += 1
    for ev in h.log_events:
        if ev.event in ("node_crashed", "reap_row_failed", "reap_failed"):
            c.bad(ev.event, f"{ev.source} at {iso(ev.ts)}: {ev.event} {ev.execution_id or ''} {ev.detail or ''}")
    return c.result()


# ---------------------------------------------------------------------------------- all


def check(h: History) -> list[InvariantResult]:
    from chaos.checker_explain import check_explain_agrees, check_operations_answered
    from chaos.checker_fencing import check_epochs_increase, check_health, check_no_stale_write, check_takeover
    from chaos.checker_limits import check_concurrency_keys, check_rate_limits
    from chaos.checker_model import (
        check_buffered_runs_released,
        check_dependencies,
        check_quota_counts_created,
        check_ticks_exactly_once,
    )
    from chaos.checker_timing import check_fire_lag_bounded, check_no_stuck_running, check_not_fired_early

    return [
        check_ticks_exactly_once(h),
        check_no_duplicate_tick(h),
        check_oneoffs_completed(h),
        check_fired_runs_completed(h),
        check_no_stale_write(h),
        check_duplicate_runs_explained(h),
        check_takeover(h),
        check_no_stuck_running(h),
        check_epochs_increase(h),
        check_health(h),
        check_not_fired_early(h),
        check_fire_lag_bounded(h),
        check_long_retry_history(h),
        check_concurrency_keys(h),
        check_rate_limits(h),
        check_buffered_runs_released(h),
        check_quota_counts_created(h),
        check_dependencies(h),
        check_explain_agrees(h),
        check_operations_answered(h),
    ]


def passed(results: Iterable[InvariantResult]) -> bool:
    return all(r.ok for r in results)


TOKEN_IN_ERROR = re.compile(r"token=(\d+)")
