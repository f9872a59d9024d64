"""A schedule edited, paused or deleted before its queued-ahead tick is due takes that tick back.

A cron tick of an overlap-allow schedule is queued FiringConfig.queue_ahead_s before its run_at
(stop 42). An edit, pause or delete made in that last second must apply to the tick as it did
when ticks were queued at their time: the queued row goes (it cannot have been claimed: a claim
takes a run only from its run_at), and an edit moves the cursor back so the owner fires the tick
again, as edited. Fails without the change (the tick queued with the old payload stays queued).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from cronwheel.cluster.commands.schedules import delete_schedule, set_paused, update_schedule
from cronwheel.storage import PgStore
from tests.integration.test_fire_cursor import MINUTE, T0, make_schedule

SOON = T0 - timedelta(seconds=0.4)  # within the second before T0


async def _queued_ahead(store: PgStore, sid: uuid.UUID, state: str = "queued") -> uuid.UUID:
    """What the owner's fire leaves a second before T0: the tick queued, the cursor on the next."""
    ident = uuid.uuid4()
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at, state,"
            " trigger, fired_epoch, fired_at, queued_at) VALUES (%s, %s, 't1', 'noop', '{\"v\": 1}', 3, %s, %s, %s,"
            " 'cron', 1, %s, %s)", (ident, sid, T0, T0, state, T0 - timedelta(seconds=1), T0 - timedelta(seconds=1)))
        await conn.execute("UPDATE schedule_due SET next_run_at = %s, last_scheduled_for = %s WHERE schedule_id = %s",
                           (T0 + MINUTE, T0, sid))
    return ident


async def _state(store: PgStore, sid: uuid.UUID) -> tuple[list[tuple[datetime, str]], datetime | None]:
    async with store.connection() as conn:
        ex = await (await conn.execute("SELECT scheduled_for, state FROM executions WHERE schedule_id = %s"
                                       " ORDER BY scheduled_for", (sid,))).fetchall()
        due = await (await conn.execute("SELECT next_run_at FROM schedule_due WHERE schedule_id = %s",
                                        (sid,))).fetchone()
    assert due is not None
    return [(r[0], r[1]) for r in ex], due[0]


async def test_an_edit_before_the_tick_is_due_fires_it_again_as_edited(store: PgStore) -> None:
    sid = await make_schedule(store, 3)
    await _queued_ahead(store, sid)
    await update_schedule(store, sid, {"payload": '{"v": 2}'}, SOON, None)
    assert await _state(store, sid) == ([], T0)  # taken back; the owner fires T0 again (reload)
    row = await store.firing.schedule_for_fire(sid)
    assert row is not None and row.next_run_at == T0


async def test_a_pause_or_delete_before_the_tick_is_due_means_it_does_not_run(store: PgStore) -> None:
    paused, deleted = await make_schedule(store, 3), await make_schedule(store, 3)
    for sid in (paused, deleted):
        await _queued_ahead(store, sid)
    await set_paused(store, paused, True, SOON, None)
    await delete_schedule(store, deleted, SOON, None)
    assert await _state(store, paused) == ([], None)
    assert await _state(store, deleted) == ([], None)


async def test_a_tick_already_due_or_claimed_is_not_taken_back(store: PgStore) -> None:
    due, claimed = await make_schedule(store, 3), await make_schedule(store, 3)
    await _queued_ahead(store, due)
    await _queued_ahead(store, claimed, state="running")
    await update_schedule(store, due, {"payload": '{"v": 2}'}, T0, None)  # at its run_at: it is due
    await set_paused(store, claimed, True, SOON, None)
    assert await _state(store, due) == ([(T0, "queued")], T0 + MINUTE)
    assert (await _state(store, claimed))[0] == [(T0, "running")]


async def test_a_manual_run_queued_for_later_is_not_taken_back(store: PgStore) -> None:
    """Only the cron trigger's queued rows not due yet go: a manual run of the tick is the user's."""
    sid = await make_schedule(store, 3)
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
            " VALUES (%s, %s, 't1', 'noop', 3, %s, %s, 'queued', 'manual')", (uuid.uuid4(), sid, T0, T0))
    await update_schedule(store, sid, {"payload": '{"v": 2}'}, SOON, None)
    assert (await _state(store, sid))[0] == [(T0, "queued")]


async def test_a_run_requeued_after_a_lease_is_never_taken_back_whatever_the_api_nodes_clock_says(
        store: PgStore) -> None:
    """A retry the owner requeued at its run_at (by the owner's clock) reads `queued` with run_at
    ahead of an API node whose clock runs behind: it was leased before (fencing_token > 0), so it
    is no tick queued ahead and a pause leaves it alone (issue 47, item 6: api_unfire_ahead judged
    "queued ahead" by the API node's clock alone and deleted it). Fails without `fencing_token = 0`."""
    sid = await make_schedule(store, 3)
    ident = await _queued_ahead(store, sid)
    async with store.connection() as conn:  # leased once, failed, its retry requeued at T0
        await conn.execute("UPDATE executions SET attempt = 1, fencing_token = 1 WHERE id = %s", (ident,))
    await set_paused(store, sid, True, SOON, None)  # the API node's clock: 0.4 s behind the owner's
    assert (await _state(store, sid))[0] == [(T0, "queued")]
