"""A buffered tick fired while the run ahead of it completes is never left waiting with nothing
ahead (issue 47, found by the generative chaos run on merged main: seeds 1 and 3).

The fire of a buffer_* tick counts the schedule's unfinished runs (`active_counts`) and the end
of a run releases the oldest buffered one (`release_buffered`), each in its own transaction under
READ COMMITTED. Unserialised, a fire that counted the run ahead as unfinished could commit its
buffered row just after the completion looked for one: nothing released it until some later run
of the schedule ended (under buffer_one, every later tick was then skipped: "buffer of one is
full: 0 running, 1 buffered"). The test drives both transactions on real connections in that
order.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from cronwheel.cluster.firing.overlap import apply_overlap
from cronwheel.storage import FireBatchParams, PgStore, ScheduleAdvance, Tick
from cronwheel.storage.api import release_buffered
from tests.integration.execution_rows import execution_row, insert_execution
from tests.integration.test_fire_cursor import MINUTE, T0, make_schedule

pytestmark = pytest.mark.integration

DEADLINE_S = 10.0


async def waiting_on_a_lock(dsn: str, locktype: str = "advisory") -> bool:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        cur = await c.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s", (locktype,))
        row = await cur.fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("policy", ["buffer_all", "buffer_one"])
async def test_a_tick_fired_while_the_run_ahead_completes_is_not_left_buffered(store: PgStore, dsn: str,
                                                                            policy: str) -> None:
    sid = await make_schedule(store, 1, overlap=policy)
    assert await store.partitions.record_epoch(1, 10, "a")
    ahead = await insert_execution(store, partition=1, schedule_id=sid, scheduled_for=T0 - MINUTE,
                                   run_at=T0 - MINUTE, state="running", trigger="cron", type="noop")
    now = datetime.now(UTC)
    async with await psycopg.AsyncConnection.connect(dsn) as completion:
        # The run ahead ends and its transaction looks for a buffered run: there is none yet.
        await completion.execute("UPDATE executions SET state = 'succeeded', finished_at = %s WHERE id = %s",
                                 (now, ahead))
        assert await release_buffered(completion, sid, now) is None
        # The tick's fire, meanwhile, in its own transaction.
        fire = asyncio.create_task(store.firing.fire(
            FireBatchParams(1, 10, ticks=[Tick(sid, T0, T0, cursor=T0)],
                            advances=[ScheduleAdvance(sid, T0 + MINUTE, T0, cursor=T0)]),
            [sid], lambda p, counts: apply_overlap(p, counts, lambda _s: policy)[0], lock=[sid]))
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not fire.done() and not await waiting_on_a_lock(dsn):
            assert asyncio.get_running_loop().time() < deadline, "the fire neither ended nor waited"
            await asyncio.sleep(0.01)
        await completion.commit()
    res = await asyncio.wait_for(fire, DEADLINE_S)
    [tick] = res.fired
    row = await execution_row(store, tick.id)
    assert (row["state"], row["state_reason"]) != ("scheduled", "buffered"), \
        "buffered behind a run that had ended, and nothing left to release it"
    assert row["state"] == "queued"


@pytest.mark.parametrize("many", [True, False], ids=["completion batch", "one release"])
async def test_a_release_passes_over_a_buffered_run_a_cancel_is_changing(store: PgStore, dsn: str,
                                                                        many: bool) -> None:
    """Both release paths (a completion batch's, and the one of a single completion, cancel or
    reap) queue a schedule's oldest buffered run by one statement (issue 49: they had drifted, and
    only the single one skipped a locked run). A cancel in flight holds the oldest buffered run:
    the release neither waits for it nor, once the cancel commits, queues the cancelled run; it
    releases the next one."""
    sid = uuid.uuid4()
    first = await insert_execution(store, partition=1, schedule_id=sid, scheduled_for=T0, run_at=T0,
                                   state="scheduled", state_reason="buffered", trigger="cron")
    second = await insert_execution(store, partition=1, schedule_id=sid, scheduled_for=T0 + MINUTE,
                                    run_at=T0 + MINUTE, state="scheduled", state_reason="buffered", trigger="cron")
    now = datetime.now(UTC)

    async def release() -> list[str]:
        async with store.transaction() as conn:
            if many:
                return await (await store.dispatch.release_buffered_many(conn, [sid], now)).result()
            one = await release_buffered(conn, sid, now)
            return [] if one is None else [one]

    async with await psycopg.AsyncConnection.connect(dsn) as cancel:
        await cancel.execute("UPDATE executions SET state = 'cancelled', state_reason = 'cancelled by test',"
                             " finished_at = %s WHERE id = %s", (now, first))
        released = asyncio.create_task(release())
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not released.done() and not await waiting_on_a_lock(dsn, "transactionid"):
            assert asyncio.get_running_loop().time() < deadline, "the release neither ended nor waited"
            await asyncio.sleep(0.01)
        await cancel.commit()
    assert await asyncio.wait_for(released, DEADLINE_S) == ["job"]
    assert (await execution_row(store, first))["state"] == "cancelled", "the release queued a cancelled run"
    assert (await execution_row(store, second))["state"] == "queued"
