"""Ownership invariants of a chaos run: pure functions of a `History` (see `chaos.checker`).

Ownership intervals come from `partition_history`: epoch e of partition p is in force in the
fence from the commit of its acquisition until the commit of the next, greater acquisition of p.
A fenced write with epoch e is a transaction that found e in the fence (FOR SHARE) and holds that
lock until it commits, and the next acquisition waits for the lock; so the write's `now()` (its
`fired_at`) lies inside e's interval, exactly, when commit timestamps are tracked. Without them
only `partition_history.at` (the acquiring transaction's start, which may have waited on the lock)
is known, and the end of the interval gets `NO_COMMIT_TS_SLACK_S` of slack.

    no_stale_write_landed  every fired row carries an epoch whose interval covers its fired_at;
                           every completed run's result carries the execution's current token
                           (refused attempts are counted from node and worker logs)
    takeover_within_ttl    after a node is killed, paused, partitioned or stopped, each of its
                           partitions is acquired again within TTL + 1 s
    epochs_increase        per partition, acquisitions only ever increase the epoch, and the
                           fence holds the greatest
    cluster_healthy        healthy before and after every injection; every injection completed
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from chaos.checker import TOKEN_IN_ERROR, InvariantResult, _Collector, iso
from chaos.history import History, OwnershipRec

NO_COMMIT_TS_SLACK_S = 2.5
TAKEOVER_FAULTS = frozenset({"kill-node", "pause-node", "partition-node", "partition-node-long", "deploy-node",
                             "scale-in", "kill-mid-upstream-completion"})


@dataclass(frozen=True, slots=True)
class Interval:
    partition: int
    epoch: int
    owner: str
    start: float
    end: float  # the next acquisition's start, or +inf


def acquisition_time(o: OwnershipRec, exact: bool) -> float:
    return o.committed_at if exact and o.committed_at is not None else o.at


def uses_commit_ts(h: History) -> bool:
    acq = [o for o in h.ownership if o.kind == "acquired"]
    return h.meta.commit_timestamps and all(o.committed_at is not None for o in acq)


def intervals(h: History) -> dict[int, list[Interval]]:
    """partition -> its ownership intervals in acquisition order."""
    exact = uses_commit_ts(h)
    by_p: dict[int, list[OwnershipRec]] = defaultdict(list)
    for o in h.ownership:
        if o.kind == "acquired":
            by_p[o.partition].append(o)
    out: dict[int, list[Interval]] = {}
    for p, rows in by_p.items():
        rows.sort(key=lambda o: (acquisition_time(o, exact), o.id))
        starts = [acquisition_time(o, exact) for o in rows]
        out[p] = [Interval(p, o.epoch, o.owner, starts[i], starts[i + 1] if i + 1 < len(rows) else float("inf"))
                  for i, o in enumerate(rows)]
    return out


def covering(ivs: list[Interval], t: float) -> Interval | None:
    i = bisect.bisect_right([iv.start for iv in ivs], t) - 1
    return ivs[i] if i >= 0 else None


# ---------------------------------------------------------------------------------- fencing


def check_no_stale_write(h: History) -> InvariantResult:
    c = _Collector("no_stale_write_landed")
    exact = uses_commit_ts(h)
    slack = 0.0 if exact else NO_COMMIT_TS_SLACK_S
    c.extra["interval_bounds"] = "commit timestamps (exact)" if exact else f"history.at (+{slack}s slack)"
    ivs = intervals(h)
    by_epoch = {(iv.partition, iv.epoch): iv for p in ivs for iv in ivs[p]}
    for e in h.executions:
        if e.fired_epoch is None or e.fired_at is None:
            continue
        c.counts["fenced_rows"] += 1
        iv = by_epoch.get((e.partition, e.fired_epoch))
        if iv is None:
            c.bad("epoch", f"execution {e.id} fired with epoch {e.fired_epoch} of partition {e.partition}, "
                           f"which was never acquired")
        elif not iv.start <= e.fired_at < iv.end + slack:
            c.bad("epoch", f"execution {e.id} (partition {e.partition}) fired at {iso(e.fired_at)} with epoch "
                           f"{e.fired_epoch} of {iv.owner}, in force only {iso(iv.start)} .. {iso(iv.end)}")
    for e in h.executions:
        if e.state == "succeeded" and e.result_token is not None:
            c.counts["completions_checked"] += 1
            if e.result_token != e.fencing_token:
                c.bad("token", f"execution {e.id} completed by token {e.result_token}, current {e.fencing_token}")
        elif e.state in ("failed", "dead") and e.error and (m := TOKEN_IN_ERROR.search(e.error)):
            c.counts["failures_checked"] += 1
            if int(m.group(1)) != e.fencing_token:
                c.bad("token", f"execution {e.id} failed by token {m.group(1)}, current {e.fencing_token}")
    for ev in h.log_events:
        if ev.event == "stale_epoch":
            c.counts["refused.stale_epoch_writes"] += 1
        elif ev.event == "report_refused":
            c.counts["refused.worker_reports"] += 1
    c.counts["refused.worker_checkpoints"] += sum(1 for r in h.runs if r.event == "end" and r.outcome == "stale")
    return c.result()


# ---------------------------------------------------------------------------------- takeover


def takeover_times(h: History) -> list[dict[str, object]]:
    """For each node-loss fault: seconds from the fault to the re-acquisition of every partition the
    node owned at that instant (None for one never taken over)."""
    exact = uses_commit_ts(h)
    ivs = intervals(h)
    out: list[dict[str, object]] = []
    for f in h.injections:
        if f.name not in TAKEOVER_FAULTS or not f.ok:
            continue
        t0 = float(f.details.get("signal_at", f.start))
        per_p: dict[int, float | None] = {}
        for p, rows in ivs.items():
            iv = covering(rows, t0)
            if iv is None or iv.owner != f.target:
                continue
            later = [r.start for r in rows if r.start > t0]
            per_p[p] = (min(later) - t0) if later else None
        done = [v for v in per_p.values() if v is not None]
        out.append({"fault": f.name, "target": f.target, "at": t0, "partitions": len(per_p),
                    "max_s": round(max(done), 3) if done else None,
                    "never": sorted(p for p, v in per_p.items() if v is None), "exact": exact})
    return out


def check_takeover(h: History) -> InvariantResult:
    c = _Collector("takeover_within_ttl")
    bound = h.meta.lease_ttl_s + 1.0
    c.extra["bound_s"] = bound
    times = takeover_times(h)
    worst = 0.0
    for t in times:
        c.counts[f"faults.{t['fault']}"] += 1
        if not t["partitions"]:
            continue
        never = t["never"]
        if never:
            c.bad("never", f"{t['fault']} of {t['target']} at {iso(float(str(t['at'])))}: partitions {never} "
                           f"were never acquired again")
        m = t["max_s"]
        if isinstance(m, float):
            worst = max(worst, m)
            if m > bound:
                c.bad("slow", f"{t['fault']} of {t['target']} at {iso(float(str(t['at'])))}: took {m:.2f}s "
                              f"(bound {bound}s)")
    c.extra["max_s"] = round(worst, 3)
    c.extra["takeovers"] = [{k: v for k, v in t.items() if k != "exact"} for t in times]
    return c.result()


# ---------------------------------------------------------------------------------- epochs, health


def check_epochs_increase(h: History) -> InvariantResult:
    c = _Collector("epochs_increase")
    exact = uses_commit_ts(h)
    by_p: dict[int, list[OwnershipRec]] = defaultdict(list)
    for o in h.ownership:
        if o.kind == "acquired":
            by_p[o.partition].append(o)
    for p, rows in sorted(by_p.items()):
        c.counts["partitions"] += 1
        c.counts["acquisitions"] += len(rows)
        for key, label in ((lambda o: o.id, "insertion"), (lambda o: (acquisition_time(o, exact), o.id), "time")):
            ordered = sorted(rows, key=key)
            for a, b in zip(ordered, ordered[1:], strict=False):
                if b.epoch <= a.epoch:
                    c.bad("order", f"partition {p}: epoch {b.epoch} ({b.owner}) acquired after {a.epoch} "
                                   f"({a.owner}) in {label} order")
        top = max(o.epoch for o in rows)
        now = h.partitions_now.get(p)
        if now is not None and now != top:
            c.bad("fence", f"partition {p}: fence holds epoch {now}, greatest acquired {top}")
    return c.result()


def check_health(h: History) -> InvariantResult:
    c = _Collector("cluster_healthy")
    worst = 0.0
    for s in h.health:
        c.counts["samples"] += 1
        if s.phase.startswith("after:"):
            worst = max(worst, s.waited_s)
        if not s.ok:
            c.bad("unhealthy", f"{s.phase} at {iso(s.at)}: {s.detail}")
    for f in h.injections:
        c.counts["injections"] += 1
        if not f.ok:
            c.bad("injection", f"{f.name} on {f.target} at {iso(f.start)} failed: {f.error}")
    c.extra["max_recovery_s"] = round(worst, 3)
    return c.result()
