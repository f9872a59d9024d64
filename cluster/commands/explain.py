""""Why did or didn't it fire?": one line per tick of a schedule in a window.

The ticks come from the cron module (the schedule's expression, zone and DST policy as they were
at each moment: `schedule_updated` events carry old and new values), not from what happened.
Each tick is then matched against the durable records, in this order:

    before creation / deleted before     NOT_YET_CREATED / DELETED
      its run time
    an execution for (schedule, tick)    FIRED (DST_SHIFTED if its local time was in a gap),
                                         SKIPPED_OVERLAP, SKIPPED_MISFIRE, SKIPPED_QUOTA (state
                                         skipped)
    a misfire event covering the tick    REFUSED_CATCH_UP, COALESCED_MISFIRE, SKIPPED_MISFIRE
    paused before its run time           PAUSED (from when, by whom)
    a tick whose execution was pruned    PRUNED_BY_RETENTION (retention recorded the tick it removed;
                                         ticks pruned before that record existed, migration 0020:
                                         any tick up to `untracked_through`)
    in the future / just due             PENDING
    paused / deleted after its run time  PAUSED / DELETED: the change took back a tick still due to
      but before a late fire             fire late (its owner stopped): nothing of the schedule
                                         fired between its run time and the change
    nothing                              MISSED, with the partition's ownership gap if any

A tick's run time is the tick plus its jitter offset (the definition's `jitter_s`). A pause or
delete committed before the run time takes the tick back (docs/semantics.md, "Queued ahead"), as
does one committed after it while the tick was still to be fired late: the fire statement sees
the change and inserts nothing, and a resume continues at the first tick after it. A resume
ends the pause for the ticks after it only.

Occurrences the DST policy dropped (a gap time under gap=skip, the other pass of a repeated
hour) are listed too (DST_SKIPPED / DST_REPEATED), found by comparing with the same expression
under the most permissive policy (gap shift, repeated both).

`explain()` is pure: the facts and `now` are arguments. `load_facts()` reads them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronwheel.cron import (
    CronSchedule,
    DstPolicy,
    GapPolicy,
    RepeatedPolicy,
    jitter_offset_s,
    parse_dst_policy,
    parse_schedule,
)
from cronwheel.errors import InvalidArgument, NotFound
from cronwheel.storage import PgStore
from cronwheel.storage.retention import PrunedMark
from cronwheel.times import MICROSECOND

MAX_TICKS = 100_000
# A release followed this quickly by the next acquisition cannot lose a tick: the new owner
# fires what came due meanwhile (late, within the misfire grace). Not a reason for a miss.
HANDOVER_TOO_SHORT = timedelta(seconds=1)
PENDING_GRACE = timedelta(seconds=2)
# A pause or delete this long after a tick's run time, with nothing of the schedule fired in
# between, is read as having taken back a late tick (its owner stopped); later, the tick is MISSED.
LATE_FIRE_BOUND = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Explained:
    tick: datetime
    outcome: str  # FIRED, SKIPPED_OVERLAP, ... (TickOutcome names without the prefix)
    reason: str
    execution_id: uuid.UUID | None = None
    execution_state: str | None = None
    fire_lag_s: float | None = None


@dataclass
class Facts:
    schedule: dict[str, Any]
    executions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    ownership: list[dict[str, Any]] = field(default_factory=list)  # partition_history rows
    pruned: PrunedMark | None = None  # what retention removed of the schedule's runs
    pruned_ticks: frozenset[datetime] = frozenset()  # the window's ticks whose execution retention removed


def _definition_segments(f: Facts) -> list[tuple[datetime, dict[str, Any]]]:
    """[(from, {cron, timezone, dst_gap, dst_repeated, jitter_s})] oldest first, from update events."""
    cur = {k: f.schedule.get(k) for k in ("cron", "timezone", "dst_gap", "dst_repeated", "jitter_s")}
    keys = {"cron": "cron", "timezone": "timezone", "dst_policy.gap": "dst_gap",
            "dst_policy.repeated_hour": "dst_repeated", "jitter": "jitter_s"}
    segs: list[tuple[datetime, dict[str, Any]]] = []
    for ev in sorted((e for e in f.events if e["kind"] == "schedule_updated"), key=lambda e: e["at"], reverse=True):
        changes = (ev["data"] or {}).get("changes", {})
        timing = {keys[k]: v for k, v in changes.items() if k in keys}
        if not timing:
            continue
        segs.append((ev["at"], dict(cur)))
        for k, (old, _new) in timing.items():
            cur[k] = old
    segs.append((f.schedule["created_at"], cur))
    return list(reversed(segs))


def _windows(f: Facts, start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime, dict[str, Any]]]:
    """[lo, hi) pieces of [start, end), each with the definition in force over it."""
    segs = _definition_segments(f)
    for i, (seg_from, defn) in enumerate(segs):
        seg_to = segs[i + 1][0] if i + 1 < len(segs) else None
        lo = max(start, seg_from if i else start)
        hi = min(end, seg_to) if seg_to else end
        if lo < hi:
            yield lo, hi, defn


def _cron(defn: dict[str, Any], sid: str, permissive: bool = False) -> CronSchedule:
    if permissive:
        pol = DstPolicy(gap=GapPolicy.SHIFT, repeated=RepeatedPolicy.BOTH)
    else:
        pol = parse_dst_policy({"gap": defn["dst_gap"], "repeated": defn["dst_repeated"]})
    return parse_schedule(defn["cron"], defn["timezone"], dst_policy=pol, schedule_id=sid)


def _intervals(events: list[dict[str, Any]], start_kind: str, end_kind: str) -> list[tuple[datetime, datetime | None,
                                                                                           dict[str, Any]]]:
    out: list[tuple[datetime, datetime | None, dict[str, Any]]] = []
    open_: dict[str, Any] | None = None
    for ev in sorted(events, key=lambda e: e["at"]):
        if ev["kind"] == start_kind and open_ is None:
            open_ = ev
        elif ev["kind"] == end_kind and open_ is not None:
            out.append((open_["at"], ev["at"], open_))
            open_ = None
    if open_ is not None:
        out.append((open_["at"], None, open_))
    return out


def _unowned(ownership: list[dict[str, Any]], t: datetime,
             active_until: dict[int, datetime] | None = None) -> str | None:
    """Why nobody could fire at t, from the partition's ownership history; None if someone
    owned it. An owner that stopped without releasing (killed, paused past its lease) has no
    end record: its interval ends at the next acquisition, which is reported as a takeover,
    unless the owner provably fired later than t (`active_until`: epoch -> last fired_at)."""
    active_until = active_until or {}
    rows = sorted(ownership, key=lambda r: r["at"])
    acquired = [r for r in rows if r["kind"] == "acquired"]
    ends = {r["epoch"]: r for r in rows if r["kind"] in ("released", "lost")}
    prev_end: datetime | None = None
    for i, a in enumerate(acquired):
        nxt = acquired[i + 1] if i + 1 < len(acquired) else None
        if t < a["at"]:
            if prev_end is not None and a["at"] - prev_end < HANDOVER_TOO_SHORT:
                return None  # a cooperative hand-over: the next owner fires such a tick, late
            since = prev_end.isoformat() if prev_end else "the start of its history"
            return f"the partition was unowned from {since} until {a['owner']} acquired it at {a['at'].isoformat()}"
        end = ends.get(a["epoch"])
        if end is not None and end["at"] < (nxt["at"] if nxt else end["at"]) and t >= end["at"]:
            prev_end = end["at"]
            continue
        if nxt is not None and t < nxt["at"] and end is None:
            alive = active_until.get(a["epoch"])
            if (nxt["at"] - t) <= timedelta(minutes=5) and not (alive is not None and alive >= t):
                return (f"the partition's owner {a['owner']} (epoch {a['epoch']}) stopped without releasing it; "
                        f"{nxt['owner']} took it over at {nxt['at'].isoformat()} (epoch {nxt['epoch']})")
            return None
        if end is None and nxt is None:
            return None
        if end is not None and t < end["at"]:
            return None
        prev_end = end["at"] if end is not None else nxt["at"] if nxt is not None else prev_end
    since = prev_end.isoformat() if prev_end else "the start of its history"
    return f"the partition has been unowned since {since}" if acquired else "the partition has no ownership history"


def explain(f: Facts, start: datetime, end: datetime, now: datetime) -> list[Explained]:
    s = f.schedule
    sid = str(s["id"])
    by_tick = {e["scheduled_for"]: e for e in f.executions}
    active: dict[int, datetime] = {}
    for e in f.executions:
        ep, at = e.get("fired_epoch"), e.get("fired_at")
        if ep is not None and at is not None and (ep not in active or at > active[ep]):
            active[ep] = at
    pauses = _intervals(f.events, "schedule_paused", "schedule_resumed")
    fired = sorted(e["fired_at"] for e in f.executions if e.get("fired_at") is not None)
    misfires = [e for e in f.events if e["kind"] in ("misfire_refused", "misfire_skipped")]
    out: list[Explained] = []
    for lo, hi, defn in _windows(f, start, end):
        cron, loose = _cron(defn, sid), _cron(defn, sid, permissive=True)
        # The window is [start, end): ticks_between(a, b) yields a < t <= b.
        real = list(cron.ticks_between(lo - MICROSECOND, hi - MICROSECOND))
        if len(out) + len(real) > MAX_TICKS:
            raise InvalidArgument("range", f"the window holds more than {MAX_TICKS} ticks; narrow it")
        real_set = set(real)
        for t in loose.ticks_between(lo - MICROSECOND, hi - MICROSECOND):
            if t not in real_set:
                out.append(_dst_dropped(t, defn))
        for t in real:
            out.append(_one(t, s, by_tick, pauses, misfires, f.ownership, now, defn, active, f.pruned,
                            f.pruned_ticks, fired))
    out.sort(key=lambda e: e.tick)
    return out


def _dst_dropped(t: datetime, defn: dict[str, Any]) -> Explained:
    from zoneinfo import ZoneInfo

    local = t.astimezone(ZoneInfo(defn["timezone"]))
    if local.fold == 1 or _is_first_of_repeated(t, defn["timezone"]):
        return Explained(t, "DST_REPEATED", f"{local:%H:%M} local occurs twice at fall-back; this pass is not run "
                                            f"under the repeated-hour rule ({defn['dst_repeated'] or 'default'})")
    return Explained(t, "DST_SKIPPED", f"local time fell in the DST gap; not run under gap policy "
                                       f"{defn['dst_gap'] or 'default'}")


def _is_first_of_repeated(t: datetime, tz: str) -> bool:
    from zoneinfo import ZoneInfo

    z = ZoneInfo(tz)
    local = t.astimezone(z).replace(tzinfo=None)
    return local.replace(tzinfo=z, fold=0).utcoffset() != local.replace(tzinfo=z, fold=1).utcoffset()


def _gap_shifted(t: datetime, defn: dict[str, Any], sid: str) -> bool:
    """A tick at a gap's end that the strict expression (gap skip) would not produce."""
    strict = parse_schedule(defn["cron"], defn["timezone"],
                            dst_policy=DstPolicy(gap=GapPolicy.SKIP, repeated=RepeatedPolicy.BOTH), schedule_id=sid)
    return strict.next_after(t - timedelta(seconds=1)) != t


def _one(t: datetime, s: dict[str, Any], by_tick: dict[datetime, dict[str, Any]],
         pauses: list[tuple[datetime, datetime | None, dict[str, Any]]], misfires: list[dict[str, Any]],
         ownership: list[dict[str, Any]], now: datetime, defn: dict[str, Any],
         active: dict[int, datetime], pruned: PrunedMark | None = None,
         pruned_ticks: frozenset[datetime] = frozenset(), fired: list[datetime] | None = None) -> Explained:
    ex = by_tick.get(t)  # first: a backfilled tick from before creation still has its execution
    if ex is None and t < s["created_at"]:
        return Explained(t, "NOT_YET_CREATED", f"the schedule was created at {s['created_at'].isoformat()}")
    run_at = t + timedelta(seconds=jitter_offset_s(str(s["id"]), t, float(defn.get("jitter_s") or 0.0)))
    deleted = s.get("deleted_at")
    if ex is None and deleted and t > deleted:
        return Explained(t, "DELETED", f"the schedule was deleted at {deleted.isoformat()}")
    if ex is None and deleted and deleted <= run_at:
        return Explained(t, "DELETED", f"the schedule was deleted at {deleted.isoformat()}, before the tick's run "
                                       f"time {run_at.isoformat()} (jitter): the delete took it back")
    if ex is not None:
        lag = (ex["fired_at"] - ex["run_at"]).total_seconds() if ex.get("fired_at") else None
        common = {"execution_id": ex["id"], "execution_state": ex["state"], "fire_lag_s": lag}
        reason = ex.get("state_reason") or ""
        if ex["state"] == "skipped" and reason.startswith("overlap"):
            return Explained(t, "SKIPPED_OVERLAP", reason, **common)
        if ex["state"] == "skipped" and reason.startswith("quota"):  # the fire path's daily-quota skip
            return Explained(t, "SKIPPED_QUOTA", reason, **common)
        if ex["state"] == "skipped" and reason.startswith("misfire"):
            if reason == "misfire:run_once":
                return _coalesced(t, by_tick, misfires, ownership, reason)
            return Explained(t, "SKIPPED_MISFIRE", _misfire_reason(reason, t, ownership), **common)
        how = {"catch_up": "caught up after a misfire", "backfill": "backfilled", "manual": "triggered by hand"}.get(
            ex["trigger"], "fired")
        lag_txt = ("" if lag is None else f" {lag * 1000:.0f} ms after run_at" if lag >= 0
                   else f", queued {-lag * 1000:.0f} ms ahead of run_at (the node queues a tick just before it "
                        f"is due; workers claim it from run_at)")
        attempts = f"; {ex['state']} after {ex['attempt']} attempt(s)" + _target_wait(ex)
        if ex["trigger"] == "catch_up":
            how += _misfire_reason("", t, ownership)
        if _gap_shifted(t, defn, str(s["id"])):
            return Explained(t, "DST_SHIFTED", f"local time fell in the DST gap; ran at the gap's end: "
                                               f"{how}{lag_txt}{attempts}", **common)
        return Explained(t, "FIRED", f"{how}{lag_txt}{attempts}", **common)
    for ev in misfires:
        d = ev["data"] or {}
        first, latest = d.get("first_missed"), d.get("latest_missed")
        if first and latest and datetime.fromisoformat(first) <= t <= datetime.fromisoformat(latest):
            if ev["kind"] == "misfire_refused":
                return Explained(t, "REFUSED_CATCH_UP", f"{d.get('refused')} ticks missed, more than max_catch_up "
                                                        f"{d.get('max_catch_up')}: not replayed (alert raised at "
                                                        f"{ev['at'].isoformat()}; BackfillSchedule can run it)")
            policy = d.get("policy")
            if policy == "run_once":
                return _coalesced(t, by_tick, misfires, ownership, "missed; misfire policy run_once")
            return Explained(t, "SKIPPED_MISFIRE",
                             f"missed; misfire policy {policy}" + _misfire_reason("", t, ownership))
    for since, until, ev in pauses:
        if since <= run_at and (until is None or t < until):
            return _paused(t, since, ev, "" if since <= t else f", before the tick's run time {run_at.isoformat()} "
                                                                f"(jitter): the pause took it back")
    if pruned is not None and (t in pruned_ticks or (pruned.untracked_through is not None
                                                     and t <= pruned.untracked_through)):
        return Explained(t, "PRUNED_BY_RETENTION",
                         f"pruned by retention: the tick had an execution, no longer kept (this schedule's "
                         f"runs up to {pruned.through.isoformat()} were pruned, {pruned.pruned} so far)")
    if run_at > now - PENDING_GRACE:
        return Explained(t, "PENDING", "not due yet" if run_at > now else "due just now; being fired")
    late = _taken_back_late(t, run_at, pauses, deleted, fired or [])
    if late is not None:
        return late
    gap = _unowned(ownership, run_at, active)
    if gap is not None:
        return Explained(t, "MISSED", f"no execution: partition {s['partition']}: {gap}")
    return Explained(t, "MISSED", "no execution and no record explains it (worth a BackfillSchedule and a bug report)")


def _paused(t: datetime, since: datetime, ev: dict[str, Any], how: str) -> Explained:
    reason = (ev["data"] or {}).get("reason")
    return Explained(t, "PAUSED", f"paused since {since.isoformat()} by {ev.get('actor') or 'unknown'}"
                                  + (f" ({reason})" if reason else "") + how)


def _taken_back_late(t: datetime, run_at: datetime, pauses: list[tuple[datetime, datetime | None, dict[str, Any]]],
                     deleted: datetime | None, fired: list[datetime]) -> Explained | None:
    """A tick with no execution whose run time passed with its owner stopped, and that a pause or
    delete committed before anything of the schedule fired again (`fired`: fired_at of its
    executions): the late fire found the change and inserted nothing. Within LATE_FIRE_BOUND."""
    def first_change_after(at: datetime) -> bool:
        return at - run_at <= LATE_FIRE_BOUND and not any(run_at < x < at for x in fired)

    how = " (after the tick's run time {}, before its late fire: the {} took it back)"
    for since, _until, ev in pauses:
        if since > run_at and first_change_after(since):
            return _paused(t, since, ev, how.format(run_at.isoformat(), "pause"))
    if deleted is not None and deleted > run_at and first_change_after(deleted):
        return Explained(t, "DELETED", f"the schedule was deleted at {deleted.isoformat()}"
                                            + how.format(run_at.isoformat(), "delete"))
    return None


def _covering(t: datetime, misfires: list[dict[str, Any]], policy: str) -> datetime | None:
    """The latest missed tick of the `policy` misfire event whose missed range holds t."""
    for ev in misfires:
        d = ev["data"] or {}
        first, latest = d.get("first_missed"), d.get("latest_missed")
        if d.get("policy") == policy and first and latest:
            lo, hi = datetime.fromisoformat(first), datetime.fromisoformat(latest)
            if lo <= t <= hi:
                return hi
    return None


def coalesced_targets(f: Facts, start: datetime, end: datetime) -> list[datetime]:
    """The ticks whose executions ran in place of run_once-coalesced ticks in [start, end]
    (the latest missed tick of each run_once misfire event overlapping the window): `explain`
    needs those rows even when they lie past the page."""
    out = []
    for ev in f.events:
        d = ev["data"] or {}
        if ev["kind"] == "misfire_skipped" and d.get("policy") == "run_once" and d.get("first_missed") \
                and d.get("latest_missed"):
            lo, hi = datetime.fromisoformat(d["first_missed"]), datetime.fromisoformat(d["latest_missed"])
            if lo <= end and hi >= start:
                out.append(hi)
    return out


def _coalesced(t: datetime, by_tick: dict[datetime, dict[str, Any]], misfires: list[dict[str, Any]],
               ownership: list[dict[str, Any]], reason: str) -> Explained:
    """A tick that run_once folded into the latest missed tick (scheduler.proto: execution_id
    names the execution that ran in its place). The replacement is found from the misfire
    event's latest missed tick, else as the first catch-up execution after t."""
    latest = _covering(t, misfires, "run_once")
    ran = by_tick.get(latest) if latest is not None else None
    if ran is None:
        ran = min((e for e in by_tick.values() if e["trigger"] == "catch_up" and e["scheduled_for"] > t),
                  key=lambda e: e["scheduled_for"], default=None)
    why = reason + _misfire_reason("", t, ownership)
    if ran is None:
        return Explained(t, "COALESCED_MISFIRE", why)
    return Explained(t, "COALESCED_MISFIRE", f"{why}; ran once as the tick of {ran['scheduled_for'].isoformat()}",
                     execution_id=ran["id"], execution_state=ran["state"])


def _target_wait(ex: Mapping[str, Any]) -> str:
    """An HTTP target's run under its target's limits (issue 50): how long after run_at its last
    attempt started (a run over a limit waits QUEUED), and the limits (key 'target:<origin>')."""
    key = ex.get("concurrency_key") or ""
    if not key.startswith("target:") or ex.get("started_at") is None:
        return ""
    limits = []
    if ex.get("concurrency_limit") is not None and ex["concurrency_limit"] < 2**31 - 1:
        limits.append(f"{ex['concurrency_limit']} at once")
    if ex.get("key_rate_per_s") is not None:
        limits.append(f"{ex['key_rate_per_s']:g}/s, burst {ex.get('key_burst') or ex['key_rate_per_s']:g}")
    wait_ms = max(0.0, (ex["started_at"] - ex["run_at"]).total_seconds() * 1000)
    return (f"; started {wait_ms:.0f} ms after run_at under its target's limits "
            f"({key.removeprefix('target:')}: {', '.join(limits)})")


def _misfire_reason(reason: str, t: datetime, ownership: list[dict[str, Any]]) -> str:
    gap = _unowned(ownership, t)
    if gap is None:
        return reason
    return f"{reason} ({gap})" if reason else f" ({gap})"


async def load_facts(store: PgStore, schedule_id: uuid.UUID, tenant: str | None, start: datetime,
                     end: datetime, with_executions: bool = True) -> Facts:
    sched = await store.explain.schedule(schedule_id, tenant)
    if sched is None:
        raise NotFound("schedule", schedule_id)
    events = await store.explain.events(schedule_id, start, end)  # those the window needs, not all
    own = await store.explain.ownership(sched["partition"], end)
    mark = await store.retention.pruned_through(schedule_id)
    pruned = await store.retention.pruned_ticks(schedule_id, start, end) if mark is not None else frozenset()
    f = Facts(sched, [], events, own, pruned=mark, pruned_ticks=pruned)
    if with_executions:
        await load_executions(store, f, start, end)
    return f


async def load_executions(store: PgStore, f: Facts, start: datetime, end: datetime) -> None:
    """The executions of [start, end], and those that ran in place of its coalesced ticks."""
    f.executions = await store.explain.executions(f.schedule["id"], start, end,
                                                  also_at=coalesced_targets(f, start, end))


def page_end(f: Facts, start: datetime, end: datetime, limit: int) -> datetime:
    """The end of a page starting at `start` that holds about `limit` ticks (exclusive bound)."""
    sid = str(f.schedule["id"])
    n = 0
    for lo, hi, defn in _windows(f, start, end):
        for t in _cron(defn, sid).ticks_between(lo - MICROSECOND, hi - MICROSECOND):
            n += 1
            if n > limit:
                return t
    return end


def alerts(f: Facts, start: datetime, end: datetime) -> list[str]:
    """Dead man's switch lines: `no_success_alert` events raised in the window."""
    out = []
    for ev in f.events:
        if ev["kind"] == "no_success_alert" and start <= ev["at"] < end:
            d = ev["data"] or {}
            out.append(f"dead man's switch raised at {ev['at'].isoformat()}: no success within "
                       f"{d.get('within_s')} s (last success {d.get('last_success_at') or 'never'})")
    if f.schedule.get("success_alert_at"):
        out.append(f"dead man's switch is raised now (since {f.schedule['success_alert_at'].isoformat()})")
    return out
