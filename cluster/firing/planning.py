"""Batch planning: which due wheel entries go into which statement, and what each partition's
share of it writes. Pure: plain values in, plain values out; no asyncio, no port, no clock read
(the caller passes `now`), so a unit test drives it with a FakeClock's time and made-up entries.

    due entries --plan_herd--> statements: each a list of (partition, chunk) of distinct partitions
    a chunk     --plan_batch--> FireBatchParams (plain ticks as columns, policed ticks as records,
                                one-off ids) + the next tick of each schedule (armed after WRITTEN)
    overdue     --plan_misfires--> FireBatchParams of catch-up / skipped ticks, misfire events and
                                   cursor advances + the first tick of each that is not overdue

The shell (`firer.Firer`) takes the entries from the wheel, holds the locks, sends what is planned
here and acts on the outcome. Every tick decision is cronwheel.cron's (next tick, misfire).
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from cronwheel.cluster.firing.schedule_cache import SchedInfo
from cronwheel.cron import decide_misfire, last_overdue_tick
from cronwheel.storage import DueSchedule, FireBatchParams, PartitionEvent, PlainTicks, ScheduleAdvance, Tick

# Wheel items: (partition, kind, id, tick_ts). kind "s" = cron schedule tick, "o" = one-off job.
Item = tuple[int, str, uuid.UUID, float]
# A statement's worth of work: chunks of distinct partitions, each at most batch_size entries.
Group = list[tuple[int, list[Item]]]
# schedule id -> (its SchedInfo as planned, its next tick after the one fired), Unix seconds.
Nexts = dict[uuid.UUID, tuple[SchedInfo, float]]


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def plan_herd(due: Sequence[Item], batch_size: int, herd_ticks_per_statement: int,
              parallel_batches: int) -> list[Group]:
    """Everything due at one instant, across partitions, as statements. Each partition's entries
    are cut into chunks of at most batch_size, dealt round-robin (so concurrent statements hold
    different partitions), and consecutive chunks of distinct partitions share ONE statement (see
    `cap`): a whole second's herd over 64 partitions is one or a few commits, not 64."""
    by_p: dict[int, list[Item]] = defaultdict(list)
    for it in due:
        by_p[it[0]].append(it)
    size = batch_size
    per_p = [[(p, items[i:i + size]) for i in range(0, len(items), size)] for p, items in by_p.items()]
    # Statements of about len(due) / parallel_batches ticks each, between herd_ticks_per_statement
    # and batch_size: every batch slot gets a share, but no statement is cut smaller than that.
    cap = min(size, max(herd_ticks_per_statement, -(-len(due) // parallel_batches)))
    groups: list[Group] = []
    group: Group = []
    in_group: set[int] = set()
    ticks = 0
    for row in itertools.zip_longest(*per_p):
        for c in row:
            if c is None:
                continue
            if group and (ticks + len(c[1]) > cap or c[0] in in_group):
                groups.append(group)
                group, in_group, ticks = [], set(), 0
            group.append(c)
            in_group.add(c[0])
            ticks += len(c[1])
    if group:
        groups.append(group)
    return groups


def plan_batch(p: int, epoch: int, chunk: Sequence[Item], schedule: Callable[[uuid.UUID], SchedInfo | None],
               now: datetime) -> tuple[FireBatchParams, Nexts]:
    """One partition's chunk as what to write (fenced by `epoch`, `now` the node's time for the
    decided times) and each schedule's next tick. `schedule` looks an id up in the cache; an entry
    whose schedule is gone (deleted or paused since it was loaded) is left out."""
    # Hot loop: plain ticks (overlap `allow`) go as parallel columns of floats, and due one-off
    # jobs as ids, to the one-statement fast path; ticks whose overlap policy needs a look at
    # running work take the general path (with the rest of the chunk).
    plain = PlainTicks([], [], [], [], [])
    ticks: list[Tick] = []
    advances: dict[uuid.UUID, ScheduleAdvance] = {}
    oneoffs = plain.oneoffs
    nexts: Nexts = {}
    next_of: dict[tuple[int, float], float] = {}  # (id of a parsed expression, tick) -> next tick
    for _p, kind, ident, tick_ts in chunk:
        if kind == "o":
            oneoffs.append(ident)
            continue
        info = schedule(ident)
        if info is None:
            continue  # deleted or paused since it was loaded
        key = (id(info.cron), tick_ts)  # the infos, so their expressions, live through the batch
        nxt = next_of.get(key)
        if nxt is None:
            nxt = next_of[key] = info.cron.next_after(utc(tick_ts)).timestamp()
        nexts[ident] = (info, nxt)
        if info.overlap == "allow":
            plain.schedule_ids.append(ident)
            plain.ticks.append(tick_ts)
            plain.run_ats.append(info.run_at(tick_ts))
            plain.nexts.append(nxt)
            plain.versions.append(info.version)
        else:
            tick = utc(tick_ts)
            ticks.append(Tick(ident, tick, utc(info.run_at(tick_ts)), version=info.version, cursor=tick))
            advances[ident] = ScheduleAdvance(ident, utc(nxt), tick, info.version, cursor=tick)
    params = FireBatchParams(p, epoch, ticks=ticks, advances=list(advances.values()), plain=plain, now=now)
    return params, nexts


def plan_misfires(p: int, epoch: int, misfired: Sequence[tuple[SchedInfo, DueSchedule]], cutoff: datetime,
                  now: datetime) -> tuple[FireBatchParams, list[tuple[SchedInfo, float]]]:
    """Schedules whose tick's run_at passed while nobody owned them (`SchedInfo.overdue`): each
    gets its misfire policy on its ticks overdue at `cutoff` (now minus the misfire grace,
    `last_overdue_tick`). Returns what to write and, per schedule, the tick to arm once written."""
    ticks: list[Tick] = []
    advances: list[ScheduleAdvance] = []
    events: list[PartitionEvent] = []
    nexts: list[tuple[SchedInfo, float]] = []
    for info, r in misfired:
        first = r.next_run_at
        assert first is not None  # due rows have a tick
        through = last_overdue_tick(info.cron, first, cutoff, str(info.id), info.jitter_s)
        if through is None:  # the wall clock stepped back since the caller's check: not late
            nexts.append((info, first.timestamp()))
            continue
        d = decide_misfire(info.cron, first - timedelta(seconds=1), through, info.misfire, info.max_catch_up)
        # Every record names the cursor the decision started from (`first`): the database
        # writes them only while the schedule is still there, unedited and unpaused.
        for t in d.fire:
            ticks.append(Tick(info.id, t, utc(info.run_at(t.timestamp())), trigger="catch_up",
                              version=info.version, cursor=first))
        for t in d.skipped:
            ticks.append(Tick(info.id, t, t, state="skipped", state_reason=f"misfire:{info.misfire}",
                              version=info.version, cursor=first))
        if d.skipped_count or d.refused_count:
            events.append(PartitionEvent(
                "misfire_refused" if d.refused_count else "misfire_skipped", info.id, d.alert,
                {"policy": str(info.misfire), "first_missed": first.isoformat(),
                 "latest_missed": d.latest_missed.isoformat() if d.latest_missed else None,
                 "fired": len(d.fire), "skipped": d.skipped_count, "refused": d.refused_count,
                 "max_catch_up": info.max_catch_up, "counts_are_lower_bounds": d.counts_are_lower_bounds},
            ))
        nxt = info.cron.next_after(through)  # the first tick not overdue
        advances.append(ScheduleAdvance(info.id, nxt, d.latest_missed, info.version, cursor=first))
        nexts.append((info, nxt.timestamp()))
    params = FireBatchParams(p, epoch, ticks=ticks, advances=advances, events=events, now=now)
    return params, nexts
