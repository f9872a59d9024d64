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


async def waiting_on_a_lock(dsn: str) -> bool:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        cur = await c.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'advisory'")
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
