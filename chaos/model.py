"""A pure reference model of docs/semantics.md: what each tick of a schedule must have become.

It imports nothing from the product. It does not compute cron: the tick instants and their run
times (with `H` and jitter) are inputs, recorded from PreviewSchedule answers. It decides from the
docs alone:

    decide_missed   the misfire policy over the ticks one load found overdue (skip, run_once,
                    catch_up with max_catch_up): each becomes `replayed`, `skipped:misfire:<policy>`
                    or `refused` (no row, an alerted misfire_refused event)
    decide_live     the overlap policy of a tick that came due in time, from the runs unfinished
                    and buffered then: `ran` (start now), `buffered` (wait), `skipped:overlap`,
                    `replaced` (cancel the unfinished ones, then run)
    is_missed       a tick is missed when its RUN TIME (tick + jitter) is overdue by more than the
                    misfire grace at the load that finds it (a jittered tick is not late by its tick)
    control_at      what the pause / resume / update / delete operations say of one tick, each
                    known only between the instant it was sent and the instant it was answered:
                    a change answered before the tick's run_at takes the tick back exactly; one
                    sent after it does not touch it; one whose interval spans it allows both
                    (the tick is ambiguous); a tick that may have been fired late (an outage)
                    is decided at its late fire, so a change sent before that may have applied

Replayed and recorded ticks (the misfire policy's catch_up replays, run_once's latest, skip's
records) bypass the overlap policy; the live ticks after them go through it, counting the replayed
runs still unfinished. A buffered run never waits with nothing unfinished ahead of it.

Worked example (catch_up, max_catch_up 3, forbid, grace 2 s): a partition is unowned from 10 to 17;
the owner that takes it at 17 finds ticks 11..14 overdue (14 + 2 < 17) and 15, 16 in grace:
decide_missed(catch_up, [11, 12, 13, 14], 3) refuses all four (4 > 3, an alert); 15 is live with
nothing unfinished, `ran`; 16 is live with 15 unfinished, `skipped:overlap`. With max_catch_up 10
the four are `replayed` (overlap does not apply to them), and 15 then meets them unfinished:
`skipped:overlap`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MISFIRE_POLICIES = ("skip", "run_once", "catch_up")
OVERLAP_POLICIES = ("allow", "forbid", "replace", "buffer_one", "buffer_all")

# Outcomes of a tick, as the model names them.
RAN = "ran"  # an execution of the tick started at its time (trigger cron)
BUFFERED = "buffered"  # an execution of the tick waited behind an unfinished run, then ran
REPLACED = "replaced"  # ran after cancelling the unfinished runs (replace)
REPLAYED = "replayed"  # run by the misfire policy (trigger catch_up): catch_up, run_once's latest
SKIPPED_OVERLAP = "skipped:overlap"
SKIPPED_QUOTA = "skipped:quota"
REFUSED = "refused"  # catch_up beyond max_catch_up: no row, an alerted misfire_refused event
ABSENT = "absent"  # no run of it started: paused, deleted, taken back by an edit
PRUNED = "pruned"  # its row was deleted by retention


def skipped_misfire(policy: str) -> str:
    return f"skipped:misfire:{policy}"


@dataclass(frozen=True, slots=True)
class Tick:
    """One tick as PreviewSchedule answered it (Unix seconds)."""

    scheduled_for: float
    run_at: float


@dataclass(frozen=True, slots=True)
class Op:
    """An API operation on a schedule, known from outside only as [sent, answered]."""

    kind: str  # pause | resume | update | delete | trigger | backfill | cancel | submit
    sent: float
    answered: float
    ok: bool = True
    version: int = 0  # update: the payload version it wrote


def _check_policy(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: unknown policy {value!r}, expected one of {', '.join(allowed)}")


def is_missed(tick: Tick, loaded_at: float, grace_s: float) -> bool:
    """Overdue by more than the grace when a load finds it: judged by its run time."""
    return loaded_at - tick.run_at > grace_s


def missed_at_load(ticks: Iterable[Tick], last_scheduled_for: float, loaded_at: float,
                   grace_s: float) -> list[Tick]:
    """The ticks a load at `loaded_at` gives to the misfire policy: after the schedule's cursor,
    overdue by more than the grace. Increasing in scheduled_for."""
    return sorted((t for t in ticks if t.scheduled_for > last_scheduled_for and is_missed(t, loaded_at, grace_s)),
                  key=lambda t: t.scheduled_for)


def decide_missed(policy: str, missed: Sequence[float], max_catch_up: int) -> dict[float, str]:
    """What the misfire policy makes of the ticks one load found missed (any order in; the latest
    is the greatest instant, whatever local time it had)."""
    _check_policy("misfire_policy", policy, MISFIRE_POLICIES)
    ticks = sorted(set(missed))
    if not ticks:
        return {}
    if policy == "skip":
        return {t: skipped_misfire("skip") for t in ticks}
    if policy == "run_once":
        return {t: (REPLAYED if t == ticks[-1] else skipped_misfire("run_once")) for t in ticks}
    if max_catch_up < 1:
        raise ValueError(f"max_catch_up: must be >= 1, got {max_catch_up}")
    outcome = REPLAYED if len(ticks) <= max_catch_up else REFUSED
    return dict.fromkeys(ticks, outcome)


def decide_live(policy: str, unfinished: int, buffered: int) -> str:
    """The overlap policy of a live tick (docs/semantics.md, Overlap policies). `unfinished`:
    runs of the schedule queued, running or retry_scheduled (replayed ones included); `buffered`:
    runs waiting in its buffer."""
    _check_policy("overlap_policy", policy, OVERLAP_POLICIES)
    if unfinished < 0 or buffered < 0:
        raise ValueError(f"counts must be >= 0, got unfinished={unfinished} buffered={buffered}")
    if policy == "allow" or unfinished == 0:
        # Nothing unfinished: the tick starts under every policy, buffered runs or not (nothing
        # else would release them; they are released when this run ends).
        return RAN
    if policy in ("buffer_one", "buffer_all"):
        if policy == "buffer_one" and buffered >= 1:
            return SKIPPED_OVERLAP
        return BUFFERED
    return SKIPPED_OVERLAP if policy == "forbid" else REPLACED


def replay_bypasses_overlap(policy: str, unfinished: int, buffered: int) -> str:
    """A replayed tick (catch_up, run_once's latest) starts whatever is unfinished: overlap does not
    apply to the misfire policy's replays."""
    _check_policy("overlap_policy", policy, OVERLAP_POLICIES)
    return REPLAYED


@dataclass(frozen=True, slots=True)
class Control:
    """What the schedule's operations say of one tick."""

    active: bool  # False: surely taken back (paused or deleted before its run_at)
    ambiguous: bool  # it depends on where in an operation's [sent, answered] it committed
    min_version: int  # the payload version the run must carry at least
    max_version: int  # ... and at most
    why: str = ""


def control_at(tick: Tick, ops: Sequence[Op], slack_s: float = 0.05, late_until: float | None = None) -> Control:
    """Pause, delete and update decide at the tick's run_at: a change answered before it takes the
    tick back (the edited tick fires again, as edited), one sent after it does not touch it. A
    resume continues at the first tick after the instant it committed: a tick paused before its
    run_at stays taken back unless the resume committed before the tick itself. So a tick fires
    iff, for every pause P (resume R, or none), run_at < P or tick > R; each instant is known only
    within [sent, answered] (an op never answered: from its sending on), and a tick whose outcome
    depends on where in its interval an op committed is ambiguous. Ops in the order sent.

    A tick whose owner may have been out at its run time (`late_until`: until when it may have been
    fired late) is decided at its late fire: a pause, delete or edit sent after its run_at but before
    `late_until` may have committed before that fire and taken it back (or edited it), so the tick
    is ambiguous (docs/semantics.md: a change committed before the late fire applies to it)."""
    decide_by = tick.run_at if late_until is None else max(tick.run_at, late_until)
    ordered = sorted(ops, key=lambda o: o.sent)
    sure_off = maybe_off = False
    why = []
    lo_v = hi_v = 0
    for i, op in enumerate(ordered):
        answered = op.answered if op.ok else float("inf")
        if op.kind == "update":
            if answered + slack_s < tick.run_at:
                lo_v = hi_v = max(hi_v, op.version)
            elif op.sent - slack_s <= decide_by:
                hi_v = max(hi_v, op.version)
                why.append(f"update [{op.sent:.3f}, {answered:.3f}] spans run_at {tick.run_at:.3f}")
            continue
        if op.kind not in ("pause", "delete"):
            continue
        resume = next((r for r in ordered[i + 1:] if r.kind == "resume"), None) if op.kind == "pause" else None
        r_lo = resume.sent - slack_s if resume else float("inf")
        r_hi = (resume.answered if resume.ok else float("inf")) + slack_s if resume else float("inf")
        if answered + slack_s < tick.run_at and r_lo > tick.scheduled_for:
            sure_off = True
        elif op.sent - slack_s <= decide_by and r_hi >= tick.scheduled_for:
            maybe_off = True
            why.append(f"{op.kind} [{op.sent:.3f}, {answered:.3f}]"
                       + (f" / resume [{r_lo:.3f}, {r_hi:.3f}]" if resume else "")
                       + f" spans {tick.scheduled_for:.3f}..{tick.run_at:.3f}")
    ambiguous = (maybe_off and not sure_off) or lo_v != hi_v
    return Control(active=not sure_off, ambiguous=ambiguous, min_version=lo_v, max_version=hi_v,
                   why="; ".join(why))


def unfinished_at(instant: float, runs: Iterable[tuple[float, float | None]], slack_s: float) -> tuple[int, int]:
    """(certainly, possibly) unfinished runs at `instant`, from (created, finished) pairs of the
    schedule's earlier runs: one created or finished within slack of the instant may go either way."""
    sure = maybe = 0
    for created, finished in runs:
        end = float("inf") if finished is None else finished
        if created + slack_s <= instant < end - slack_s:
            sure += 1
            maybe += 1
        elif created - slack_s <= instant < end + slack_s:
            maybe += 1
    return sure, maybe


def live_outcomes(policy: str, unfinished: tuple[int, int], buffered: tuple[int, int]) -> frozenset[str]:
    """Every outcome decide_live allows over the possible counts (certain .. possible)."""
    return frozenset(decide_live(policy, u, b) for u in {unfinished[0], unfinished[1]}
                     for b in {buffered[0], buffered[1]})


def may_have_missed(tick: Tick, outages: Iterable[tuple[float, float]], grace_s: float, slack_s: float) -> bool:
    """Could a load have found the tick overdue? Only if its partition was out (no owner firing it)
    from before its run time until more than the grace after it."""
    return any(lo - slack_s <= tick.run_at and tick.run_at + grace_s <= hi + slack_s for lo, hi in outages)


def quota_allows(created_before: int, quota: int | None) -> bool:
    """max_executions_per_day counts the executions CREATED that day (skipped records included),
    not those left after retention: a tick fires while fewer than the quota were created."""
    return quota is None or created_before < quota


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the model says a tick became after an outage, with its run's start and end (None when
    no run of it started)."""

    outcome: str
    start: float | None = None
    end: float | None = None
    waited_behind: int = 0  # buffered: runs unfinished ahead of it when it was buffered


def after_outage(overlap: str, misfire: str, max_catch_up: int, ticks: Sequence[Tick], cursor: float,
                 loaded_at: float, grace_s: float, run_s: float) -> dict[float, Outcome]:
    """Every tick after `cursor` once an owner loads the partition at `loaded_at`: the missed ones by
    the misfire policy (their replays start at the load, bypassing overlap), then the others in
    order at their run time (or at the load if that is later) through the overlap policy, counting
    the runs unfinished then, replays included. Each run lasts `run_s`; a buffered run starts when
    a run ahead of it ends (oldest first); replace cancels the unfinished runs at once."""
    missed = missed_at_load(ticks, cursor, loaded_at, grace_s)
    missed_set = {t.scheduled_for for t in missed}
    out: dict[float, Outcome] = {}
    running: list[list[float]] = []  # [start, end] of runs started (mutable: replace ends them)
    waiting: list[tuple[float, int]] = []  # buffered ticks in order, with the count ahead of them
    for sf, what in decide_missed(misfire, [t.scheduled_for for t in missed], max_catch_up).items():
        if what == REPLAYED:
            running.append([loaded_at, loaded_at + run_s])
            out[sf] = Outcome(what, loaded_at, loaded_at + run_s)
        else:
            out[sf] = Outcome(what)
    ends_used: set[int] = set()

    def release(until: float) -> None:
        # Each end of a run releases the oldest waiting run, which starts then; an end with
        # nothing waiting releases nothing later.
        while True:
            ends = sorted((r[1], i) for i, r in enumerate(running) if i not in ends_used and r[1] <= until)
            if not ends:
                return
            if not waiting:
                ends_used.update(i for _e, i in ends)
                return
            end, i = ends[0]
            ends_used.add(i)
            sf, ahead = waiting.pop(0)
            running.append([end, end + run_s])
            out[sf] = Outcome(BUFFERED, end, end + run_s, ahead)

    for t in sorted((t for t in ticks if t.scheduled_for > cursor and t.scheduled_for not in missed_set),
                    key=lambda t: t.scheduled_for):
        at = max(t.run_at, loaded_at)
        release(at)
        unfinished = sum(1 for s, e in running if s <= at < e)
        decision = decide_live(overlap, unfinished, len(waiting))
        if decision == BUFFERED:
            waiting.append((t.scheduled_for, unfinished))
            out[t.scheduled_for] = Outcome(BUFFERED, None, None, unfinished)
            continue
        if decision == REPLACED:
            for r in running:
                if r[0] <= at < r[1]:
                    r[1] = at
        if decision in (RAN, REPLACED):
            running.append([at, at + run_s])
            out[t.scheduled_for] = Outcome(decision, at, at + run_s)
        else:
            out[t.scheduled_for] = Outcome(decision)
    release(float("inf"))
    return out


# ---------------------------------------------------------------------------------- dependencies

FINISHED = frozenset({"succeeded", "failed", "dead", "cancelled", "skipped"})
WAITS = "waits"  # an upstream has not finished: the dependent must still wait
DEP_CANCELLED = "cancelled"  # an upstream did not succeed under on_success: cancelled, never run
DEP_RUNS = "runs"  # every upstream finished (all succeeded, or policy always): it runs after them


def decide_dependent(policy: str, upstream_states: Sequence[str]) -> str:
    """What docs/semantics.md "Dependencies" says of a job with these upstreams' final states:
    waits while one is unfinished; under on_success, cancelled when one ended otherwise than
    succeeded (naming it); else it runs, after the last of them finished."""
    _check_policy("dependency_policy", policy, ("on_success", "always"))
    if any(s not in FINISHED for s in upstream_states):
        return WAITS
    if policy == "on_success" and any(s != "succeeded" for s in upstream_states):
        return DEP_CANCELLED
    return DEP_RUNS
