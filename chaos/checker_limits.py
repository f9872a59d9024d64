"""Tenancy invariants of a chaos run: pure functions of a `History` (see `chaos.checker`).

    concurrency_keys   no more runs of one (tenant, concurrency key) at once than its limit, from
                       what the workers really ran: each attempt from its `start` line to its `end`
                       line, while the cluster provably held its lease. An attempt whose lease was
                       taken back (the execution has a later attempt) counts only while its lease
                       certainly still ran: until its claim + the worker lease, or, when a fault
                       stopped its worker, until the fault's start + the lease - one heartbeat
                       interval (its last heartbeat extended it that far), and never past the next
                       attempt's claim. A worker that goes on running a run whose lease lapsed
                       (paused, partitioned) is the at-least-once case the fencing token settles;
                       the reaper may requeue it any time after that point (the time is not in the
                       history), so counting it longer would blame the limit for a zombie. An
                       attempt with no `end` (its worker was killed) is bounded the same way, or
                       by its execution's finish when it was the last.
    rate_limits        the claims of each rate-limited tenant conform to its token bucket
                       (rate_per_s, burst; a bucket starts full): replaying the attempts' claim
                       times (`leased_at`, the node's clock), a claim never finds less than one
                       token, within CLOCK_SLACK_S of refill (the claim runs on several nodes and
                       the times are read with millisecond rounding).

Both are checked under every fault of the scenario: nothing here excuses a violation by a fault.
"""

from __future__ import annotations

from collections import defaultdict

from chaos.checker import CLOCK_SLACK_S, InvariantResult, _Collector, iso
from chaos.history import ExecutionRec, History, RunRec

HEARTBEATS_PER_LEASE = 4  # chaos.workload_jobs: a heartbeat every lease / 4


def attempt_spans(h: History) -> dict[tuple[str, int], tuple[float, float]]:
    """(execution id, token) -> (start, end) of what the worker ran while the cluster provably
    held the attempt's lease (see concurrency_keys above)."""
    starts: dict[tuple[str, int], RunRec] = {}
    ends: dict[tuple[str, int], float] = {}
    for r in h.runs:
        k = (r.execution_id, r.token)
        if r.event == "start":
            if k not in starts or r.t < starts[k].t:
                starts[k] = r
        elif r.event == "end":
            ends[k] = max(r.t, ends.get(k, r.t))
    by_exec: dict[str, list[tuple[int, RunRec]]] = defaultdict(list)
    for (eid, tok), r in starts.items():
        by_exec[eid].append((tok, r))
    finished = {e.id: e.finished_at for e in h.executions}
    lease = h.meta.worker_lease_s
    beat = lease / HEARTBEATS_PER_LEASE
    out = {}
    for eid, attempts in by_exec.items():
        attempts.sort(key=lambda a: a[0])
        for i, (tok, r) in enumerate(attempts):
            t = r.t
            end = ends.get((eid, tok))
            if i + 1 < len(attempts):  # superseded: its lease was taken back at some point
                nxt = attempts[i + 1][1]
                next_claim = nxt.leased_at if nxt.leased_at is not None else nxt.t
                held = (r.leased_at if r.leased_at is not None else t) + lease
                for inj in h.injections:  # a fault that stopped its worker: heartbeats ran until then
                    if inj.target == r.worker and t <= inj.start <= next_claim:
                        held = max(held, inj.start + lease - beat)
                bound = min(held, next_claim)
                end = bound if end is None else min(end, bound)
            elif end is None:
                end = finished.get(eid) or h.meta.collected_at
            out[(eid, tok)] = (t, max(t, end))
    return out


def check_concurrency_keys(h: History) -> InvariantResult:
    c = _Collector("concurrency_keys")
    keyed: dict[str, ExecutionRec] = {e.id: e for e in h.executions if e.concurrency_key is not None}
    groups: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
    limits: dict[tuple[str, str], int] = {}
    for (eid, tok), (t0, t1) in attempt_spans(h).items():
        e = keyed.get(eid)
        if e is None or t1 <= t0:  # no instant at which it ran while its lease provably held
            continue
        g = (e.tenant, e.concurrency_key or "")
        limits[g] = e.concurrency_limit or 1
        groups[g].append((t0, t1, f"{eid}#{tok}"))
    c.counts["keys"] = len(groups)
    for g, spans in sorted(groups.items()):
        c.counts["attempts"] += len(spans)
        events = sorted([(t0, 1, eid) for t0, _t1, eid in spans] + [(t1, -1, eid) for _t0, t1, eid in spans],
                        key=lambda x: (x[0], x[1]))  # an end at the same instant as a start goes first
        running: set[str] = set()  # attempts (execution#token)
        peak = 0
        for t, d, eid in events:
            if d < 0:
                running.discard(eid)
                continue
            running.add(eid)
            peak = max(peak, len(running))
            if len(running) > limits[g]:
                c.bad("over_limit", f"tenant {g[0]} key {g[1]!r}: {len(running)} runs at {iso(t)} (limit "
                                    f"{limits[g]}): {sorted(running)}")
        c.extra[f"peak:{g[0]}/{g[1]}"] = peak
    return c.result()


def check_rate_limits(h: History) -> InvariantResult:
    c = _Collector("rate_limits")
    limited = {t.tenant: t for t in h.tenant_limits if t.rate_per_s is not None}
    tenant_of = {e.id: e.tenant for e in h.executions}
    claims: dict[str, list[float]] = defaultdict(list)
    for r in h.runs:
        if r.event == "start" and r.leased_at is not None and tenant_of.get(r.execution_id) in limited:
            claims[tenant_of[r.execution_id]].append(r.leased_at)
    seen: set[tuple[str, int]] = set()
    for tenant, lim in sorted(limited.items()):
        rate = float(lim.rate_per_s or 0.0)
        size = max(float(lim.burst if lim.burst is not None else rate), 1.0)
        ts = sorted(claims.get(tenant, ()))
        c.counts[f"claims:{tenant}"] = len(ts)
        tokens, last = size, None
        worst = size
        for t in ts:
            if last is not None:
                tokens = min(size, tokens + rate * max(0.0, t - last))
            last = t
            worst = min(worst, tokens)
            if tokens < 1.0 - rate * CLOCK_SLACK_S and (tenant, int(t)) not in seen:
                seen.add((tenant, int(t)))
                c.bad("over_rate", f"tenant {tenant}: a claim at {iso(t)} found {tokens:.2f} tokens "
                                   f"(rate {rate}/s, burst {size:g})")
            tokens -= 1.0
        if ts:
            span = ts[-1] - ts[0]
            c.extra[f"rate:{tenant}"] = round((len(ts) - 1) / span, 2) if span > 0 else None
            c.extra[f"lowest_tokens:{tenant}"] = round(worst, 2)
    return c.result()

