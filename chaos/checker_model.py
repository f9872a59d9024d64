"""The tick invariants, judged against the reference model (chaos.model) from the history alone.

    ticks_exactly_once   every tick a PreviewSchedule answer recorded for the window became what
                         the model allows: ran (live, through the overlap policy, or buffered),
                         replayed / skipped / refused by the misfire policy (only when it was
                         loaded overdue by more than the grace, during an outage), skipped for
                         overlap or quota, taken back by a pause / edit / delete answered before
                         its run time, or pruned by retention; never two rows, never a row for an
                         instant that is not a tick; an edit answered before run_at fired the new
                         payload. Ticks an operation's [sent, answered] spans allow both
                         outcomes and are counted as `ambiguous` (their share, `ambiguous_share`).
    buffered_runs_released  a buffered run never waited with nothing unfinished ahead of it
    quota_counts_created    a tenant's runs created in a UTC day stay within max_executions_per_day
                         (counted from the rows AND the workers' starts, so a pruned row counts),
                         and a tick is skipped for quota only once the quota was used

The explain and operation checks (explain_agrees, operations_answered) are in
chaos.checker_explain.

Tick instants come from the recorded previews, never from a cron implementation: this module and
chaos.model import nothing of the product.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime

from chaos import model
from chaos.checker import CLOCK_SLACK_S, InvariantResult, _Collector, iso, owners_by_epoch, skew_of
from chaos.history import ExecutionRec, History, RunRec, ScheduleRec

# How near an earlier run's creation or end may be to a decision for the count to go either way
# (the fire statement's snapshot is taken before its row's clock_timestamp()).
OVERLAP_SLACK_S = 0.5
# A buffered run is released when the run ahead ends; dispatch takes up to this long after that.
RELEASE_SLACK_S = 2.0
# Faults that never take a partition's firing away (they hit workers only).
WORKER_ONLY = frozenset({"kill-worker", "pause-worker", "long-retry-history"})
# Nodes need this long after a fault ends to load their partitions again (TTL + grace + reload).
RECOVERY_EXTRA_S = 3.0
# Faults that delay every start, so a wait proves nothing about a buffer.
START_DELAYING = frozenset({"kill-worker", "pause-worker", "restart-postgres", "refuse-commits",
                            "stall-completion", "pause-node", "kill-node", "partition-node", "deploy-node",
                            "kill-mid-upstream-completion"})


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def id_created_at(execution_id: str) -> float | None:
    """When an execution id was made: ids are UUIDv7 (storage/ids.py), the Unix time in ms in
    their first 48 bits, on the clock of whoever made it (a node, or PostgreSQL's)."""
    try:
        u = uuid.UUID(execution_id)
    except ValueError:
        return None
    return (u.int >> 80) / 1000 if u.version == 7 else None


def backfill_runs(h: History, gone: Iterable[RunRec]) -> set[str]:
    """Of runs whose rows are gone (retention), those a BackfillSchedule made: the tick lies in the
    op's range and the id was made while the op was in flight (up to the largest node skew)."""
    slack = max((abs(v) for v in h.meta.skews.values()), default=0.0) + CLOCK_SLACK_S
    fills = [o for o in h.ops if o.kind == "backfill" and o.ok and o.range_start is not None
             and o.range_end is not None]
    out: set[str] = set()
    for r in gone:
        t, made = _ts(r.scheduled_for), id_created_at(r.execution_id)
        if t is None or made is None:
            continue
        if any(o.schedule_id == r.schedule_id and o.range_start <= t <= o.range_end  # type: ignore[operator]
               and o.sent - slack <= made <= o.answered + slack for o in fills):
            out.add(r.execution_id)
    return out


def outage_windows(h: History) -> dict[int, list[tuple[float, float]]]:
    """partition -> intervals during which no owner may have been firing it: every fault's window
    (on a node: the partitions it owned then; otherwise all) until the partition was acquired again,
    and every gap in the ownership history between losing or releasing it and the next acquisition.
    A lost lease is out from one TTL before the loss was recorded: it lapsed because it was not
    renewed for a TTL, and an owner too starved to renew it (an overloaded host, no fault injected)
    may have fired nothing in that time; the lapse in the history is what makes that visible."""
    ttl = h.meta.lease_ttl_s
    recover = ttl + h.meta.misfire_grace_s + RECOVERY_EXTRA_S
    by_p: dict[int, list[tuple[float, str, str]]] = defaultdict(list)
    for o in h.ownership:
        by_p[o.partition].append((o.committed_at or o.at, o.kind, o.owner))
    for recs in by_p.values():
        recs.sort()
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    parts = range(h.meta.partitions)
    for p in parts:
        recs = by_p.get(p, [])
        gap_from: float | None = None
        for at, kind, _owner in recs:
            if kind in ("lost", "released"):
                start = at - ttl if kind == "lost" else at
                gap_from = start if gap_from is None else gap_from
            elif kind == "acquired" and gap_from is not None:
                out[p].append((gap_from, at + recover - ttl))
                gap_from = None
        if gap_from is not None:
            out[p].append((gap_from, h.meta.collected_at))
    for f in h.injections:
        if f.name in WORKER_ONLY:
            continue
        for p in parts:
            recs = by_p.get(p, [])
            if f.target.startswith("n"):
                owner = next((o for at, k, o in reversed(recs) if k == "acquired" and at <= f.start), None)
                if owner != f.target:
                    continue
            again = next((at for at, k, _o in recs if k == "acquired" and at >= f.start), f.end)
            out[p].append((f.start, max(f.end, again) + recover))
    return out


def _observed(r: ExecutionRec) -> str:
    reason = r.state_reason or ""
    if r.state == "skipped":
        if reason.startswith("misfire:"):
            return model.skipped_misfire(reason.split(":", 1)[1])
        if reason.startswith("overlap"):
            return model.SKIPPED_OVERLAP
        if reason.startswith("quota"):
            return model.SKIPPED_QUOTA
        return f"skipped:{reason}"
    if r.trigger == "catch_up":
        return model.REPLAYED
    if r.trigger == "cron":
        return model.RAN
    return f"trigger:{r.trigger}"


class _Ctx:
    """What the judgement of one schedule needs, built once per history."""

    def __init__(self, h: History) -> None:
        self.h = h
        self.grace = h.meta.misfire_grace_s
        self.epochs = owners_by_epoch(h)
        self.outages = outage_windows(h)
        self.rows: dict[str, dict[float, list[ExecutionRec]]] = defaultdict(lambda: defaultdict(list))
        self.all_rows: dict[str, list[ExecutionRec]] = defaultdict(list)
        for e in h.executions:
            if e.schedule_id is None:
                continue
            self.all_rows[e.schedule_id].append(e)
            if e.trigger in ("cron", "catch_up"):  # a tick's row (its skipped records are trigger cron)
                self.rows[e.schedule_id][e.scheduled_for].append(e)
        # (partition, epoch) -> its owner's first write: its load on gaining the partition had run by then
        self.first_write: dict[tuple[int, int], float] = {}
        for e in h.executions:
            if e.fired_epoch is not None and e.created_at is not None:
                key = (e.partition, e.fired_epoch)
                self.first_write[key] = min(self.first_write.get(key, e.created_at), e.created_at)
        self.reconnects: dict[str, list[float]] = defaultdict(list)  # node -> its LISTEN reconnects (full reloads)
        for le in h.log_events:
            if le.event == "listen_reconnect":
                self.reconnects[le.source].append(le.ts)
        self.ops: dict[str, list[model.Op]] = defaultdict(list)
        for o in h.ops:
            if o.schedule_id:
                self.ops[o.schedule_id].append(model.Op(o.kind, o.sent, o.answered, o.ok, o.version))
        self.started: set[tuple[str, float]] = set()  # ticks a worker started as cron or catch_up runs
        ids_all = {e.id for e in h.executions}
        out_of_band = {e.id for e in h.executions if e.trigger not in ("cron", "catch_up")}
        out_of_band |= {o.execution_id for o in h.ops if o.execution_id}
        # A backfill's row retention pruned is a run of the tick too, but not the tick's cron run.
        out_of_band |= backfill_runs(h, (r for r in h.runs if r.execution_id not in ids_all))
        for run in h.runs:
            t = _ts(run.scheduled_for)
            if run.event == "start" and run.schedule_id and t is not None and run.execution_id not in out_of_band:
                self.started.add((run.schedule_id, round(t, 3)))
        self.refused: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        for ev in h.events:
            if ev.kind == "misfire_refused" and ev.schedule_id:
                lo, hi = _ts(str(ev.data.get("first_missed", ""))), _ts(str(ev.data.get("latest_missed", "")))
                if lo is not None and hi is not None:
                    self.refused[ev.schedule_id].append((lo, hi, int(ev.data.get("refused_count", 0) or 0)))
        self.ambiguous_ticks: set[tuple[str, float]] = set()
        ids = {e.id for e in h.executions}
        # schedule -> when a CancelExecution of one of its runs, whose row is gone, was answered
        self.cancelled_gone: dict[str, float] = {o.schedule_id: o.answered for o in h.ops
                                                 if o.kind == "cancel" and o.ok and o.schedule_id
                                                 and o.execution_id and o.execution_id not in ids}
        self.previews = {p.schedule_id: p for p in h.previews}
        # A schedule's ticks fire in order: a tick is not fired before the run times of the ticks
        # before it (docs/semantics.md, Jitter), so its fire may come after its own run time.
        self.due_in_order: dict[tuple[str, float], float] = {}
        for sid, p in self.previews.items():
            latest = float("-inf")
            for a, b in sorted(p.ticks):
                latest = max(latest, float(b))
                self.due_in_order[(sid, float(a))] = latest
        for s in h.schedules:  # the ticks an operation makes ambiguous, for every check
            p = self.previews.get(s.id)
            for a, b in (p.ticks if p else ()):
                late = not self.rows.get(s.id, {}).get(float(a))
                if self.control(s, model.Tick(float(a), float(b)), late).ambiguous:
                    self.ambiguous_ticks.add((s.id, float(a)))

    def control(self, s: ScheduleRec, t: model.Tick, late: bool = True) -> model.Control:
        """model.control_at, with (`late`: for a tick that left no row; a row says when it fired)
        the end of the outage the tick's run time fell in, if any: until then it may have been
        fired late, and a change committed before that late fire applies."""
        ends = [hi for lo, hi in self.outages.get(s.partition, ()) if lo - 1.0 <= t.run_at <= hi] if late else []
        behind = self.due_in_order.get((s.id, t.scheduled_for), t.run_at) if late else t.run_at
        if behind > t.run_at:  # held behind an earlier tick of later run time: fired (late) then
            ends.append(behind)
        return model.control_at(t, self.ops.get(s.id, ()), late_until=max(ends) if ends else None)


def _late_slack(ctx: _Ctx, r: ExecutionRec) -> float:
    return skew_of(ctx.h, ctx.epochs, r) + CLOCK_SLACK_S


def _runs_of(ctx: _Ctx, s: ScheduleRec, before: float, committed: bool = False) -> list[tuple[float, float | None]]:
    """(created, finished) of the schedule's runs of earlier ticks (replays, triggers and
    backfills included), for the overlap counts; `committed`: finished when its end committed."""
    out = []
    for e in ctx.all_rows.get(s.id, ()):
        if e.state == "skipped" or (e.scheduled_for >= before and e.trigger in ("cron", "catch_up")):
            continue  # a manual trigger's scheduled_for is its instant, maybe after the tick: counts by creation
        created = e.fired_at if e.fired_at is not None else e.created_at
        if created is None:
            continue
        finished = e.finished_at
        if finished is None and e.state in ("succeeded", "failed", "dead", "cancelled"):
            finished = created  # ended without a finish time (cancelled before it started)
        if committed and finished is not None and e.committed_at is not None:
            finished = max(finished, e.committed_at)
        out.append((created, finished))
    return out


def check_ticks_exactly_once(h: History) -> InvariantResult:
    c = _Collector("ticks_exactly_once")
    ctx = _Ctx(h)
    previews = {p.schedule_id: p for p in h.previews}
    for s in h.schedules:
        c.counts["schedules"] += 1
        p = previews.get(s.id)
        if p is None:
            c.bad("no_preview", f"schedule {s.name}: no PreviewSchedule answer was recorded")
            continue
        lo, hi = s.created_at, h.meta.window_end
        ticks = [model.Tick(float(a), float(b)) for a, b in p.ticks if lo < float(a) <= hi]
        if p.ticks and float(p.ticks[-1][0]) <= hi and s.cron.strip() not in ("@yearly", "@annually"):
            c.bad("short_preview", f"schedule {s.name}: its preview ends at {iso(float(p.ticks[-1][0]))}, "
                                   f"before the window's end")
        expected = {t.scheduled_for for t in ticks}
        for t in ticks:
            c.counts["ticks_expected"] += 1
            _judge(c, ctx, s, t)
        have = ctx.rows.get(s.id, {})
        for at in sorted(x for x in have if lo < x <= hi and x not in expected):
            c.bad("phantom", f"schedule {s.name}: execution for {iso(at)}, which is not a tick of its preview")
    n = c.counts["ticks_expected"]
    c.extra["ambiguous_share"] = round(c.counts["ambiguous"] / n, 4) if n else 0.0
    return c.result()


def _judge(c: _Collector, ctx: _Ctx, s: ScheduleRec, t: model.Tick) -> None:
    where = f"schedule {s.name} ({s.misfire_policy}/{s.overlap_policy}) tick {iso(t.scheduled_for)}"
    got = ctx.rows.get(s.id, {}).get(t.scheduled_for, [])
    ctl = ctx.control(s, t, late=not got)
    if ctl.ambiguous:
        c.counts["ambiguous"] += 1
    if len(got) > 1:
        c.bad("duplicate", f"{where}: {len(got)} executions")
    r = got[0] if got else None
    ran = (s.id, round(t.scheduled_for, 3)) in ctx.started or (r is not None and r.started_at is not None)
    if not ctl.active and not ctl.ambiguous:
        if ran or (r is not None and r.state not in ("cancelled", "skipped")):
            c.bad("not_taken_back", f"{where}: a pause/delete answered before its run_at {iso(t.run_at)}, yet "
                                    f"{'a run of it started' if ran else f'its row is {r.state if r else None}'}")
        elif r is not None:
            c.counts["taken_back_with_a_record"] += 1  # e.g. a quota skip written a second ahead: no run
        else:
            c.counts["taken_back"] += 1
        return
    if r is None:
        _judge_absent(c, ctx, s, t, ctl, ran, where)
        return
    outcome = _observed(r)
    c.counts[f"outcome.{outcome}"] += 1
    hi_v = ctl.max_version
    if r.fired_at is not None and r.fired_at > t.run_at:
        # Fired late (its owner stopped, or behind an earlier tick of later run time): the fire reads
        # the schedule as it is then, so an edit committed before the fire applies (docs/semantics.md).
        hi_v = max(hi_v, model.control_at(model.Tick(t.scheduled_for, r.fired_at), ctx.ops.get(s.id, ())).max_version)
    if r.state != "skipped" and r.payload_v is not None and not ctl.min_version <= r.payload_v <= hi_v:
        c.bad("stale_payload", f"{where}: fired payload version {r.payload_v}, the edits answered before its "
                               f"run_at {iso(t.run_at)} (or its fire) allow {ctl.min_version}..{hi_v}")
    lateness = (r.fired_at if r.fired_at is not None else (r.created_at or t.run_at)) - t.run_at
    slack = _late_slack(ctx, r)
    missed_ok = lateness >= ctx.grace - slack
    if outcome.startswith("skipped:misfire:") or outcome == model.REPLAYED:
        _judge_missed(c, ctx, s, t, r, outcome, lateness, missed_ok, where)
    elif outcome == model.SKIPPED_QUOTA:
        if s.tenant not in ctx.h.meta.quotas:
            c.bad("policy", f"{where}: skipped for quota, its tenant {s.tenant} has none")
    elif outcome in (model.SKIPPED_OVERLAP, model.RAN):
        # Held behind an earlier tick of later run time, a tick is fired from the wheel when that one
        # is, not found missed by a load: late from that run time only.
        held = ctx.due_in_order.get((s.id, t.scheduled_for), t.run_at) - t.run_at
        _judge_live(c, ctx, s, t, r, outcome, lateness - max(0.0, held), slack, where)
    else:
        c.bad("policy", f"{where}: unexpected row ({r.state}, trigger {r.trigger}, reason {r.state_reason!r})")


def _judge_absent(c: _Collector, ctx: _Ctx, s: ScheduleRec, t: model.Tick, ctl: model.Control, ran: bool,
                  where: str) -> None:
    refused = [x for x in ctx.refused.get(s.id, ()) if x[0] <= t.scheduled_for <= x[1]]
    if refused:
        c.counts["refused_with_alert"] += 1
        if s.misfire_policy != "catch_up":
            c.bad("policy", f"{where}: refused under misfire policy {s.misfire_policy}")
        elif refused[0][2] and refused[0][2] <= s.max_catch_up:
            c.bad("policy", f"{where}: refused {refused[0][2]} ticks with max_catch_up {s.max_catch_up}")
        return
    if ctl.ambiguous:
        c.counts["ambiguous_absent"] += 1
        return
    retains = s.keep_last is not None or s.keep_succeeded_for_s is not None
    # Pruned rows that no worker started: skipped records (forbid, buffer_one, quota, misfire) and
    # runs cancelled before they started, by a newer tick (replace) or by a CancelExecution whose
    # run has no row left (cancelled runs are pruned like succeeded ones).
    # The cancelled row existed when the cancel was answered, and a run is queued (its row written)
    # up to queue_ahead_s before its run_at: a cancel answered that early may be of this tick.
    ahead = ctx.h.meta.queue_ahead_s or 0.0
    cancelled = ctx.cancelled_gone.get(s.id, float("-inf")) >= t.run_at - ahead
    if retains and (ran or cancelled or s.overlap_policy in ("forbid", "buffer_one", "replace")
                    or s.tenant in ctx.h.meta.quotas
                    or model.may_have_missed(t, ctx.outages.get(s.partition, ()), ctx.grace, 1.0)):
        c.counts["pruned"] += 1
        return
    if s.deleted_at is not None and s.deleted_at <= t.run_at + OVERLAP_SLACK_S:
        c.counts["taken_back"] += 1  # deleted by a fault-time retry we did not record as an op
        return
    c.bad("lost", f"{where}: no execution and no refusal (run_at {iso(t.run_at)})")


def _judge_missed(c: _Collector, ctx: _Ctx, s: ScheduleRec, t: model.Tick, r: ExecutionRec, outcome: str,
                  lateness: float, missed_ok: bool, where: str) -> None:
    if not missed_ok:
        c.bad("unjustified_skip" if outcome != model.REPLAYED else "policy",
              f"{where}: {outcome} though only {lateness:.2f}s past its run time {iso(t.run_at)} "
              f"(grace {ctx.grace}s)")
        return
    if not model.may_have_missed(t, ctx.outages.get(s.partition, ()), ctx.grace, 1.0):
        c.counts["missed_outside_outage"] += 1
    if outcome == model.REPLAYED:
        if s.misfire_policy == "skip":
            c.bad("policy", f"{where}: replayed as catch_up under policy skip")
        return
    policy = outcome.rsplit(":", 1)[1]
    if policy != s.misfire_policy or policy == "catch_up":
        c.bad("policy", f"{where}: skipped as {r.state_reason!r}")
    elif policy == "run_once" and not _fired_latest_with(r, ctx.all_rows.get(s.id, ())):
        c.bad("policy", f"{where}: run_once skipped it but fired no later missed tick with it")


def _fired_latest_with(skip: ExecutionRec, rows: Iterable[ExecutionRec]) -> bool:
    """run_once records the older missed ticks as skipped and fires the latest in the same batch."""
    at = skip.fired_at if skip.fired_at is not None else skip.created_at
    return at is not None and any(
        e.trigger == "catch_up" and e.scheduled_for > skip.scheduled_for and e.fired_epoch == skip.fired_epoch
        and e.fired_at is not None and abs(e.fired_at - at) <= 1.0 for e in rows)


def _a_load_could_miss(ctx: _Ctx, s: ScheduleRec, t: model.Tick, r: ExecutionRec, slack: float) -> bool:
    """Could a load have found the tick missed, one that ran once its run time was more than the
    grace past? A tick already in the wheel is fired however late it is, as a live tick
    (docs/semantics.md, Misfires). The owner loads a partition on gaining it (done by its first
    write in that epoch: the load writes its misfire records in one transaction), all of it after
    its notification connection reconnected, and one schedule on a change to it."""
    if r.fired_epoch is None:
        return True
    overdue = t.run_at + ctx.grace - slack - OVERLAP_SLACK_S
    first = ctx.first_write.get((r.partition, r.fired_epoch))
    if first is None or first >= overdue:
        return True
    until = r.fired_at if r.fired_at is not None else (r.created_at or t.run_at)
    owner = ctx.epochs.get((r.partition, r.fired_epoch), "")
    if any(overdue <= at <= until for at in ctx.reconnects.get(owner, ())):
        return True
    return any(o.answered >= overdue and o.sent <= until for o in ctx.ops.get(s.id, ()))


def _judge_live(c: _Collector, ctx: _Ctx, s: ScheduleRec, t: model.Tick, r: ExecutionRec, outcome: str,
                lateness: float, slack: float, where: str) -> None:
    if (outcome == model.SKIPPED_OVERLAP and lateness > ctx.grace + slack + OVERLAP_SLACK_S
            and _a_load_could_miss(ctx, s, t, r, slack)):
        c.bad("overlap_on_missed", f"{where}: skipped for overlap {lateness:.2f}s past its run time: a missed "
                                   f"tick goes to the misfire policy, which overlap does not apply to")
        return
    decided = r.fired_at if r.fired_at is not None else t.run_at
    runs = _runs_of(ctx, s, t.scheduled_for)
    # A run's end is visible from its commit, which a retried completion (a PostgreSQL restart)
    # makes later than its finished_at: until then it may still count as unfinished.
    counts = (model.unfinished_at(decided, runs, OVERLAP_SLACK_S)[0],
              model.unfinished_at(decided, _runs_of(ctx, s, t.scheduled_for, committed=True), OVERLAP_SLACK_S)[1])
    allowed = model.live_outcomes(s.overlap_policy, counts, (0, counts[1]))
    ok = (outcome == model.SKIPPED_OVERLAP and model.SKIPPED_OVERLAP in allowed) or (
        outcome == model.RAN and allowed & {model.RAN, model.BUFFERED, model.REPLACED})
    if len(allowed) > 1:
        c.counts["overlap_either"] += 1
    if not ok:
        c.bad("policy", f"{where}: {outcome} with {counts[0]}..{counts[1]} earlier runs unfinished at "
                        f"{iso(decided)}; {s.overlap_policy} allows {sorted(allowed)}")
    elif s.overlap_policy == "replace" and outcome == model.RAN:
        _judge_replaced(c, ctx, s, t, decided, where)


def _judge_replaced(c: _Collector, ctx: _Ctx, s: ScheduleRec, t: model.Tick, decided: float, where: str) -> None:
    """replace cancels the unfinished runs: one still queued when the new tick came due ends
    cancelled and never starts after (a running one is asked to stop and may still succeed)."""
    for e in ctx.all_rows.get(s.id, ()):
        created = e.fired_at if e.fired_at is not None else e.created_at
        if (e.scheduled_for >= t.scheduled_for or e.state == "skipped" or created is None
                or created > decided - OVERLAP_SLACK_S):
            continue
        queued = e.started_at is None or e.started_at > decided + OVERLAP_SLACK_S
        open_then = e.finished_at is None or e.finished_at >= decided - CLOCK_SLACK_S  # the replace may end it
        if queued and open_then:
            c.counts["replaced_queued"] += 1
            if e.state != "cancelled":
                c.bad("not_replaced", f"{where}: replace ran it while {e.id} (tick {iso(e.scheduled_for)}) was "
                                      f"queued, which ended {e.state}, not cancelled")


def check_buffered_runs_released(h: History) -> InvariantResult:
    c = _Collector("buffered_runs_released")
    ctx = _Ctx(h)
    delaying = [(f.start, f.end + h.meta.worker_lease_s + h.meta.lease_ttl_s) for f in h.injections
                if f.name in START_DELAYING or f.target == "postgres"]
    # Runs whose rows retention pruned (keep_last) still ran: the workers' records cover them, from a
    # little before their first start (queued then) to their last end.
    ids = {e.id for e in h.executions}
    spans: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in h.runs:
        if run.schedule_id and run.execution_id not in ids:
            spans[(run.schedule_id, run.execution_id)].append(run.t)
    pruned: dict[str, list[tuple[float, float | None]]] = defaultdict(list)
    for (sid, _eid), ts in spans.items():
        pruned[sid].append((min(ts) - RELEASE_SLACK_S, max(ts)))
    starts: dict[str, list[float]] = defaultdict(list)  # a run retried after its worker stopped
    for run in h.runs:  # started first at its first attempt, not at the row's started_at
        if run.event == "start":
            starts[run.execution_id].append(run.t)
    for s in h.schedules:
        if s.overlap_policy not in ("buffer_one", "buffer_all"):
            continue
        rows = sorted((e for e in ctx.all_rows.get(s.id, ()) if e.state != "skipped"), key=lambda e: e.scheduled_for)
        for r in rows:
            if r.trigger != "cron" or r.run_at > h.meta.window_end:
                continue
            c.counts["runs"] += 1
            wait_from = max(r.run_at, r.fired_at or r.run_at)
            # A run cancelled before it started (CancelExecution, replace) stopped waiting then.
            ended = r.finished_at if r.state == "cancelled" and r.finished_at is not None else h.meta.collected_at
            start = min([t for t in starts.get(r.id, ()) if t >= wait_from - CLOCK_SLACK_S]
                        + [r.started_at if r.started_at is not None else ended])
            if start - wait_from <= RELEASE_SLACK_S:
                continue
            c.counts["waited"] += 1
            # Covered while a run of an earlier tick was unfinished, or a fault delayed every start.
            ahead = _runs_of(ctx, s, r.scheduled_for) + [(a, b) for a, b in delaying] + pruned.get(s.id, [])
            uncovered = _first_gap(wait_from, start - RELEASE_SLACK_S, ahead)
            if uncovered is not None:
                c.bad("nothing_ahead", f"schedule {s.name} ({s.overlap_policy}) tick {iso(r.scheduled_for)}: "
                                       f"waited from {iso(wait_from)} to {iso(r.started_at)} though nothing "
                                       f"was unfinished ahead of it at {iso(uncovered)} (state {r.state})")
    return c.result()


def _first_gap(lo: float, hi: float, runs: list[tuple[float, float | None]]) -> float | None:
    """The first instant of [lo, hi] no run covers (None: covered)."""
    at = lo
    for created, finished in sorted(runs):
        end = float("inf") if finished is None else finished
        if created > at:
            break
        at = max(at, end)
    return None if at >= hi else at


def check_quota_counts_created(h: History) -> InvariantResult:
    c = _Collector("quota_counts_created")
    if not h.meta.quotas:
        return c.result()
    sched_tenant = {s.id: s.tenant for s in h.schedules}
    created: dict[str, dict[str, float]] = defaultdict(dict)  # tenant -> execution id -> created
    for e in h.executions:
        if e.tenant in h.meta.quotas and e.created_at is not None:
            created[e.tenant][e.id] = e.created_at
    for run in h.runs:  # a pruned row still ran: its start line counts it
        tenant = sched_tenant.get(run.schedule_id or "")
        if run.event == "start" and tenant in h.meta.quotas and run.execution_id not in created[tenant]:
            created[tenant][run.execution_id] = run.leased_at or run.t
            c.counts["counted_from_runs"] += 1
    skips = [e for e in h.executions if e.state == "skipped" and (e.state_reason or "").startswith("quota")]
    for tenant, quota in sorted(h.meta.quotas.items()):
        days: Counter[int] = Counter(int(at // 86400) for at in created[tenant].values())
        quota_skipped = {e.id for e in skips if e.tenant == tenant}
        fired = Counter(int(at // 86400) for i, at in created[tenant].items() if i not in quota_skipped)
        c.counts[f"{tenant}.created"] = sum(days.values())
        for day, n in fired.items():
            # Concurrent fire statements of other partitions may each add a batch (docs: "at most the
            # rows those concurrent transactions add"): allow one batch per partition beyond the quota.
            if n > quota + h.meta.partitions:
                c.bad("over_quota", f"tenant {tenant}: {n} runs created on UTC day {day}, quota {quota}")
        for e in skips:
            if e.tenant != tenant or e.created_at is None:
                continue
            before = sum(1 for at in created[tenant].values() if at < e.created_at - CLOCK_SLACK_S)
            if not model.quota_allows(before, quota) or before + h.meta.partitions >= quota:
                continue
            c.bad("early_quota_skip", f"tenant {tenant}: tick {iso(e.scheduled_for)} skipped for quota with "
                                      f"only {before} executions created before it (quota {quota})")
    return c.result()


def check_dependencies(h: History) -> InvariantResult:
    """Issue 52: every dependent of the traffic's dependency families (chaos.workload
    dependency_plan) ended as chaos.model.decide_dependent predicts from its upstreams' final
    states: cancelled naming an upstream that did not succeed, never started; or started only
    after every upstream finished (their finished_at, by PostgreSQL's clock, which the workers'
    start lines share within CLOCK_SLACK_S on this host, plus any skew a node ran with), and only
    once it was released."""
    c = _Collector("dependencies")
    slack = CLOCK_SLACK_S + max((abs(v) for v in h.meta.skews.values()), default=0.0)  # finished_at: a node's clock
    by_id = {e.id: e for e in h.executions}
    first_start: dict[str, float] = {}
    for r in h.runs:
        if r.event == "start":
            first_start[r.execution_id] = min(r.t, first_start.get(r.execution_id, r.t))
    for j in h.submitted:
        if not j.depends_on:
            continue
        c.counts["dependents"] += 1
        e = by_id.get(j.execution_id)
        ups = [by_id.get(u) for u in j.depends_on]
        if e is None or any(u is None for u in ups):
            c.bad("missing", f"dependent {j.execution_id} or one of its upstreams {j.depends_on} has no row")
            continue
        states = [u.state for u in ups if u is not None]
        want = model.decide_dependent(j.dependency_policy or "on_success", states)
        c.counts[f"predicted.{want}"] += 1
        if want == model.WAITS:
            c.bad("upstream_unfinished", f"dependent {e.id}: upstreams still {states} after the drain")
        elif want == model.DEP_CANCELLED:
            failed = [u.id for u in ups if u is not None and u.state != "succeeded"]
            if e.state != "cancelled" or not any(f"upstream {f} ended" in (e.state_reason or "") for f in failed):
                c.bad("not_cancelled", f"dependent {e.id} of {dict(zip(j.depends_on, states, strict=True))} ended "
                                       f"{e.state} ({e.state_reason}), expected cancelled naming one of {failed}")
            elif e.id in first_start:
                c.bad("ran_cancelled", f"dependent {e.id} was cancelled but a worker started it")
        else:
            started = first_start.get(e.id)
            last_up = max((u.finished_at or 0.0) for u in ups if u is not None)
            if started is None:
                c.bad("never_ran", f"dependent {e.id} ({e.state}) never started though its upstreams ended {states}")
            elif started + slack < last_up:
                c.bad("ran_early", f"dependent {e.id} started at {iso(started)}, before its last upstream finished "
                                   f"at {iso(last_up)}")
    return c.result()
