"""The generative workload (`python -m chaos run --generate`): schedules drawn from the whole policy
space, and API operations at random instants, both from the run's seed.

Schedules: overlap (allow, forbid, replace, buffer_one, buffer_all) x misfire (skip, run_once,
catch_up) x max_catch_up x jitter (none, under a second, a few seconds, longer than the misfire
grace) x zone x DST policy x retention (keep_last, keep_succeeded_for) x quota (a schedule with a
quota belongs to tenant `chaos-quota`, whose max_executions_per_day binds mid-run). Second-level
crons, so a 60 s run sees many ticks of each; overlap schedules run `long` jobs of 1-2 s so their
runs do overlap.

Operations: pause (and a resume a few seconds later, then sometimes a backfill of the paused
range), update (a new payload version: the runs of later ticks must carry it), trigger, cancel
(an unfinished run), delete. About half are aimed at the last second before one of the schedule's
ticks (from its recorded preview), where a change races the tick. Each is retried until it is
answered, and recorded with the instant it was first sent and the instant it was answered
(`OpRec`): from outside, that interval is all we know of when it took effect. Submits are the
one-off traffic of chaos.workload.

`draw_schedules` and `draw_ops` are pure functions of the seed: a failing seed replays the same
draws (the instants, being real time, vary a little).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chaos.history import ExplainRec, OpRec, PreviewRec
from cronwheel.client import ApiError, Client, DstPolicy, NotFound

OVERLAPS = ("allow", "forbid", "replace", "buffer_one", "buffer_all")
MISFIRES = ("skip", "run_once", "catch_up")
CRONS = (("* * * * * *", 1), ("*/2 * * * * *", 2), ("*/3 * * * * *", 3), ("H/4 * * * * *", 4),
         ("*/5 * * * * *", 5))
ZONES = ("UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")
JITTERS = (0.0, 0.0, 0.0, 0.8, 3.0, 12.0)  # 12 s: longer than the misfire grace (chaos: 2 s)
QUOTA_TENANT = "chaos-quota"
GEN_TENANTS = ("chaos-a", "chaos-b")
OP_KINDS = ("pause", "update", "trigger", "cancel", "backfill", "delete")
OP_WEIGHTS = (4, 4, 2, 2, 1, 1)  # a backfill goes over a paused range; a resume follows each pause
PREVIEW_COUNT = 1000  # at most (the API's limit); ticks are at least a second apart
# A herd: schedules whose ticks share one instant, so the fire statement of that instant is
# long and a pause or an edit aimed at its last second races it (issue 47 item 3).
HERD_CRON = "*/10 * * * * *"


@dataclass(frozen=True, slots=True)
class Drawn:
    """One drawn schedule: its tenant and create_schedule's keyword arguments."""

    tenant: str
    spec: dict[str, Any]
    period_s: int

    @property
    def combo(self) -> str:
        s = self.spec
        return f"{s['overlap_policy']}x{s['misfire_policy']}"


def draw_herd(seed: int, n: int) -> list[Drawn]:
    """`n` allow schedules due together every 10 s (the queued-ahead path). Pure."""
    rng = random.Random(f"{seed}:generate:herd")
    return [Drawn(GEN_TENANTS[i % 2], dict(
        name=f"herd{i}", cron=HERD_CRON, timezone=rng.choice(ZONES), job_type="tick",
        misfire_policy=rng.choice(MISFIRES), overlap_policy="allow", max_catch_up=100,
        payload={"schedule": f"herd{i}", "v": 0}), 10) for i in range(n)]


@dataclass(frozen=True, slots=True)
class PlannedOp:
    at_s: float  # from the start of the window
    kind: str
    schedule: int  # index into the drawn schedules
    before_tick: float | None  # aim at this many seconds before a tick's run_at, or None: at at_s
    hold_s: float = 0.0  # pause: resume after this long


def draw_schedules(seed: int, duration_s: float, n: int = 18) -> tuple[list[Drawn], int]:
    """The drawn schedules and the quota tenant's max_executions_per_day. Pure. Every overlap x
    misfire pair is drawn once per 15 schedules before the rest are drawn at random."""
    rng = random.Random(f"{seed}:generate:schedules")
    pairs = [(o, m) for o in OVERLAPS for m in MISFIRES]
    rng.shuffle(pairs)
    pairs += [(rng.choice(OVERLAPS), rng.choice(MISFIRES)) for _ in range(max(0, n - len(pairs)))]
    out: list[Drawn] = []
    quota_rate = 0.0
    for i, (overlap, misfire) in enumerate(pairs[:n]):
        cron, period = rng.choice(CRONS)
        jitter = rng.choice(JITTERS)
        if jitter > 5:
            cron, period = "*/5 * * * * *", 5
        long_job = rng.random() < (0.5 if overlap != "allow" else 0.15)
        payload: dict[str, Any] = {"schedule": f"g{i}", "v": 0}
        if long_job:
            payload.update(steps=rng.randint(4, 8), step_s=0.25)
        spec: dict[str, Any] = dict(
            name=f"g{i}-{overlap}-{misfire}", cron=cron, timezone=rng.choice(ZONES),
            job_type="long" if long_job else "tick", misfire_policy=misfire, overlap_policy=overlap,
            max_catch_up=rng.choice((1, 3, 100)), payload=payload,
            dst_policy=DstPolicy(gap=rng.choice((None, "shift", "skip")),
                                 repeated_hour=rng.choice((None, "first", "last", "both"))),
        )
        if jitter:
            spec["jitter"] = timedelta(seconds=jitter)
        r = rng.random()
        if r < 0.2:
            spec["keep_last"] = rng.choice((0, 3))
        elif r < 0.3:
            spec["keep_succeeded_for"] = timedelta(seconds=60)  # the API's least window
        quota = rng.random() < 0.2
        if quota:
            quota_rate += 1.0 / period
            if "keep_last" not in spec and "keep_succeeded_for" not in spec and rng.random() < 0.5:
                spec["keep_last"] = 0  # its runs pruned as they end: the quota must count them (item 4)
        out.append(Drawn(QUOTA_TENANT if quota else GEN_TENANTS[i % 2], spec, period))
    # Binds about halfway through the run.
    return out, max(5, int(quota_rate * duration_s / 2))


def draw_ops(seed: int, duration_s: float, n_schedules: int, herd: int = 0) -> list[PlannedOp]:
    """The operations of a run, in the order of their instants (schedule indexes: the drawn ones,
    then the herd's). A third of the pauses, edits and deletes go to herd schedules, aimed at the
    last second before the herd's instant, while its fire statement runs. Pure."""
    rng = random.Random(f"{seed}:generate:ops")
    count = max(4, int(duration_s / 2))
    deleted = 0
    out = []
    for _ in range(count):
        kind = rng.choices(OP_KINDS, weights=OP_WEIGHTS)[0]
        if kind == "delete":
            deleted += 1
            if deleted > 2:
                kind = "update"
        at = rng.uniform(1.0, duration_s * (0.9 if kind == "delete" else 0.8))
        before = round(rng.uniform(0.02, 1.0), 3) if kind in ("pause", "update", "delete") and rng.random() < 0.6 \
            else None
        target = rng.randrange(n_schedules)
        if herd and kind in ("pause", "update", "delete") and rng.random() < 1 / 3:
            target, before = n_schedules + rng.randrange(herd), round(rng.uniform(0.5, 1.0), 3)
        out.append(PlannedOp(round(at, 3), kind, target, before,
                             round(rng.uniform(2.0, 8.0), 2) if kind == "pause" else 0.0))
    return sorted(out, key=lambda o: o.at_s)


def describe(drawn: Sequence[Drawn], quota: int, herd: int = 0) -> dict[str, Any]:
    """What a run drew, for its report."""
    return {
        "schedules": len(drawn),
        "herd": herd,
        "combinations": dict(sorted(Counter(d.combo for d in drawn).items())),
        "jitter": dict(Counter(str(d.spec.get("jitter", timedelta()).total_seconds()) for d in drawn)),
        "zones": dict(Counter(d.spec["timezone"] for d in drawn)),
        "max_catch_up": dict(Counter(str(d.spec["max_catch_up"]) for d in drawn)),
        "retention": dict(Counter(
            f"keep_last={d.spec['keep_last']}" if "keep_last" in d.spec else
            "keep_succeeded_for=60s" if "keep_succeeded_for" in d.spec else "default" for d in drawn)),
        "quota_schedules": sum(1 for d in drawn if d.tenant == QUOTA_TENANT),
        "quota_max_executions_per_day": quota,
    }


def create(addresses: Sequence[str], drawn: Sequence[Drawn], quota: int) -> dict[str, str]:
    """Creates the quota tenant and the drawn schedules; name -> schedule id."""
    ids = {}
    with Client(addresses) as cw:
        try:
            cw.create_tenant(QUOTA_TENANT, max_executions_per_day=quota)
        except ApiError:
            cw.update_tenant(QUOTA_TENANT, max_executions_per_day=quota)
        for d in drawn:
            ids[d.spec["name"]] = cw.create_schedule(tenant=d.tenant, **d.spec).id
    return ids


def record_previews(addresses: Sequence[str], horizon_s: float = PREVIEW_COUNT) -> list[PreviewRec]:
    """Every live schedule's ticks from its creation on, for `horizon_s` seconds
    (PreviewSchedule): the ticks the checker expects, with their run times (H and jitter
    included). The checker computes no cron."""
    out = []
    count = max(1, min(PREVIEW_COUNT, int(horizon_s)))
    with Client(addresses) as cw:
        for s in cw.list_schedules(page_size=1000):
            assert s.created_at is not None
            ticks = cw.preview(s.id, count=count, after=s.created_at - timedelta(seconds=1))
            out.append(PreviewRec(s.id, tuple((x.scheduled_for.timestamp(), x.run_at.timestamp()) for x in ticks)))
    return out


def record_explains(addresses: Sequence[str], schedules: Sequence[tuple[str, float]], until: float) -> list[ExplainRec]:
    """ExplainSchedule of every schedule over (created, until], read after the drain."""
    out = []
    with Client(addresses, deadline_s=20.0) as cw:
        for sid, created in schedules:
            try:
                ex = cw.explain(sid, _dt(created), _dt(until))
            except ApiError as exc:
                out.append(ExplainRec(sid, (), f"{type(exc).__name__}: {exc}"))
                continue
            out.append(ExplainRec(sid, tuple((t.scheduled_for.timestamp(), str(t.outcome), t.execution_id,
                                              t.reason) for t in ex.ticks)))
    return out


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class Operator:
    """Runs the planned operations from its own thread through the Client at the live nodes,
    each retried until answered (or the run stops), and records them (`ops`). Pause/resume and
    backfill keep the schedule's state: a resume follows each pause after its hold, and a
    backfill goes over a range the schedule was paused."""

    def __init__(self, addresses: Callable[[], list[str]], plan: Sequence[PlannedOp], ids: Sequence[str],
                 previews: dict[str, list[tuple[float, float]]], seed: int) -> None:
        self.addresses, self.plan, self.ids, self.previews = addresses, list(plan), list(ids), previews
        self.rng = random.Random(f"{seed}:generate:operator")
        self.ops: list[OpRec] = []
        self.versions: Counter[str] = Counter()
        self.paused: dict[str, float] = {}  # schedule id -> answered
        self.gone: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-operator", daemon=True)
        self._t0 = 0.0
        self._pending: list[tuple[float, str, str, dict[str, Any]]] = []  # (at, kind, sid, kw)

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _client(self) -> Client:
        return Client(self.addresses() or ["127.0.0.1:1"], deadline_s=5.0, retries=3)

    def _run(self) -> None:
        cw = self._client()
        try:
            queue = [(self._t0 + p.at_s, p) for p in self.plan]
            while not self._stop.is_set():
                due = [x for x in self._pending if x[0] <= time.time()]
                for item in due:
                    self._pending.remove(item)
                    cw = self._do(cw, item[1], item[2], **item[3])
                if queue and queue[0][0] <= time.time():
                    _, p = queue.pop(0)
                    cw = self._planned(cw, p)
                    continue
                nxt = min([q[0] for q in queue[:1]] + [x[0] for x in self._pending], default=time.time() + 0.5)
                self._stop.wait(max(0.0, min(0.5, nxt - time.time())))
            for _, kind, sid, kw in sorted(self._pending):  # resume what is paused: the drain needs it
                if kind == "resume":
                    cw = self._do(cw, kind, sid, **kw)
        finally:
            cw.close()

    def _aim(self, sid: str, before: float) -> None:
        """Sleep until `before` seconds ahead of the run_at of a tick at least 1.5 s away."""
        now = time.time()
        target = next((ra for _sf, ra in self.previews.get(sid, ()) if ra - before > now + 0.3), None)
        if target is not None and target - before - now < 15:
            self._stop.wait(target - before - now)

    def _planned(self, cw: Client, p: PlannedOp) -> Client:
        sid = self.ids[p.schedule]
        if sid in self.gone:
            return cw
        kind = p.kind
        if kind == "pause" and sid in self.paused:
            kind = "update"
        if kind == "backfill":
            return self._backfill(cw, sid)
        if p.before_tick is not None:
            self._aim(sid, p.before_tick)
        cw = self._do(cw, kind, sid)
        if kind == "pause" and sid in self.paused:
            at = time.time() + p.hold_s
            self._pending.append((at, "resume", sid, {}))
        return cw

    def _backfill(self, cw: Client, sid: str) -> Client:
        spans = [o for o in self.ops if o.schedule_id == sid and o.kind in ("pause", "resume") and o.ok]
        for a, b in zip(spans, spans[1:], strict=False):
            if a.kind == "pause" and b.kind == "resume":
                return self._do(cw, "backfill", sid, start=a.answered, end=b.sent)
        return self._do(cw, "trigger", sid)

    def _call(self, cw: Client, kind: str, sid: str, kw: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        if kind == "pause":
            return {}, cw.pause(sid, reason="chaos")
        if kind == "resume":
            return {}, cw.resume(sid, reason="chaos")
        if kind == "update":
            v = self.versions[sid] + 1
            s = cw.get_schedule(sid)
            payload = dict(s.payload or {})
            payload["v"] = v
            return {"version": v}, cw.update_schedule(sid, payload=payload)
        if kind == "trigger":
            e = cw.trigger(sid, reason="chaos")
            return {"execution_id": e.id}, e
        if kind == "delete":
            return {}, cw.delete(sid, reason="chaos")
        if kind == "backfill":
            b = cw.backfill(sid, _dt(kw["start"]), _dt(kw["end"]), reason="chaos")
            return {"range_start": kw["start"], "range_end": kw["end"], "created": b.created_count}, b
        if kind == "cancel":
            live = list(cw.list_executions(schedule_id=sid, states=("queued", "running", "scheduled"), page_size=20))
            if not live:  # else a delayed one-off job of the traffic
                live = [e for e in cw.list_executions(states=("scheduled",), page_size=20) if e.schedule_id is None]
            if not live:
                raise LookupError("nothing unfinished to cancel")
            e = self.rng.choice(live)
            return {"execution_id": e.id}, cw.cancel(e.id, reason="chaos")
        raise ValueError(f"unknown operation {kind!r}")

    def _do(self, cw: Client, kind: str, sid: str, **kw: Any) -> Client:
        sent = time.time()
        extra: dict[str, Any] = {}
        for _attempt in range(40):
            try:
                extra, _ = self._call(cw, kind, sid, kw)
                break
            except LookupError:
                return cw
            except NotFound as exc:
                if kind == "delete" and _attempt:  # an earlier attempt committed
                    break
                self.ops.append(OpRec(kind, sid, sent, time.time(), True, detail=f"NotFound: {exc}"[:200]))
                return cw
            except ApiError as exc:
                if self._stop.is_set():
                    self.ops.append(OpRec(kind, sid, sent, time.time(), False, detail=str(exc)[:200]))
                    return cw
                time.sleep(0.25)
                cw.close()
                cw = self._client()
        else:
            self.ops.append(OpRec(kind, sid, sent, time.time(), False, detail="gave up after 40 attempts"))
            return cw
        answered = time.time()
        if kind == "update":
            self.versions[sid] = extra["version"]
        elif kind == "pause":
            self.paused[sid] = answered
        elif kind == "resume":
            self.paused.pop(sid, None)
        elif kind == "delete":
            self.gone.add(sid)
        self.ops.append(OpRec(kind, sid, sent, answered, True, **extra))
        return cw
