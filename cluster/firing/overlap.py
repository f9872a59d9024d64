"""The overlap policy applied to a fire batch, inside its transaction: the counts of unfinished
and buffered runs read under the fence -> the batch to write.

Every decision is `cronwheel.cron.decide_overlap_step` (pure); this executes it on the batch's
ticks, in order, folding the counts so that two ticks of one schedule in one batch see each
other. Misfire records (a `catch_up` replay, a `skipped` record) are written as they are.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from cronwheel.cron import OverlapAction, decide_overlap_step
from cronwheel.storage import FireBatchParams, Tick


def apply_overlap(params: FireBatchParams, counts: dict[uuid.UUID, tuple[int, int]],
                  overlap_of: Callable[[uuid.UUID], str | None]) -> tuple[FireBatchParams, int]:
    """Each policed tick (overlap_of its schedule neither None nor `allow`) starts, is recorded as
    skipped, replaces the unfinished runs, or is buffered; `counts` (schedule -> (unfinished,
    buffered)) is updated in place. Returns the batch to write and how many ticks were skipped
    for overlap."""
    ticks: list[Tick] = []
    replace: list[uuid.UUID] = []
    skipped = 0
    for t in params.ticks:
        pol = overlap_of(t.schedule_id)
        if pol in (None, "allow"):
            ticks.append(t)
            continue
        step = decide_overlap_step(pol, *counts.get(t.schedule_id, (0, 0)), trigger=t.trigger, state=t.state)
        counts[t.schedule_id], d = (step.running, step.buffered), step.decision
        if d is None or d.action is OverlapAction.START:
            ticks.append(t)
        elif d.action is OverlapAction.SKIP:
            skipped += 1
            ticks.append(dataclasses.replace(t, state="skipped", state_reason=f"overlap: {d.reason}"))
        elif d.action is OverlapAction.CANCEL_RUNNING_THEN_START:
            replace.append(t.schedule_id)
            ticks.append(t)
        else:
            ticks.append(dataclasses.replace(t, state="scheduled", state_reason="buffered"))
    return dataclasses.replace(params, ticks=ticks, replace_schedule_ids=replace), skipped
