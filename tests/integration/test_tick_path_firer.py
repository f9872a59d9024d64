"""The tick path's rules in the Firer shell (issue 47, items 1 and 2), on a FakeClock against a
real PostgreSQL: the shell executes cron.decide_overlap_step and cron.last_overdue_tick. The same
rules from outside, against node processes: tests/e2e/test_tick_path.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.cron import jitter_offset_s
from cronwheel.storage import PgStore
from tests.e2e.helpers import wait_until_async

from .test_fire_cursor import MINUTE, SIGNAL_TIMEOUT_S, T0, Trust, advance_until, firing, make_schedule

pytestmark = pytest.mark.integration
__all__ = ["firing"]  # the fixture, shared with test_fire_cursor

JITTER_S = 40.0


async def rows(store: PgStore, sid: uuid.UUID) -> list[tuple[Any, ...]]:
    async with store.connection() as conn:
        cur = await conn.execute(
            "SELECT scheduled_for, state, trigger, state_reason, run_at FROM executions WHERE schedule_id = %s"
            " ORDER BY scheduled_for", (sid,))
        return list(await cur.fetchall())


async def set_policies(store: PgStore, sid: uuid.UUID, **cols: object) -> None:
    async with store.connection() as conn:
        for col, value in cols.items():
            assert col in ("misfire_policy", "overlap_policy", "jitter_s")
            await conn.execute(f"UPDATE schedules SET {col} = %s WHERE id = %s", (value, sid))  # type: ignore[arg-type]


@pytest.mark.parametrize("then", ["nothing", "reload", "resync"])
async def test_a_jittered_tick_is_missed_by_its_run_time_not_by_its_tick(
        store: PgStore, firing: Callable[..., Any], then: str) -> None:
    """The node gains the partition 15 s after the tick, grace 10 s (and then reloads each
    schedule, as after an UpdateSchedule, or everything, as after a LISTEN reconnect): every tick
    is overdue by its tick, and only those whose run time is before T0 + 5 s are missed; the
    others run at their run time."""
    sids = []
    for _ in range(8):
        sid = await make_schedule(store, 3)
        await set_policies(store, sid, misfire_policy="skip", jitter_s=JITTER_S)
        sids.append(sid)
    firer, clock = await firing(3, Trust(epoch=1), start_ts=(T0 + timedelta(seconds=15)).timestamp())
    cutoff = T0 + timedelta(seconds=15 - firer.config.misfire_grace_s)
    if then == "reload":
        for sid in sids:
            await firer.reload(3, "s", sid)
    elif then == "resync":
        await firer.resync()
    clock.advance(JITTER_S)  # past every run time of T0: some were due at once, the others now

    async def every_tick_written() -> bool:
        return all([await rows(store, sid) for sid in sids])

    await wait_until_async(every_tick_written, SIGNAL_TIMEOUT_S, "every schedule's tick T0 to be written")
    armed = 0
    for sid in sids:
        run_at = T0 + timedelta(seconds=jitter_offset_s(str(sid), T0, JITTER_S))
        got = (await rows(store, sid))[0]
        if run_at < cutoff:
            assert got[:4] == (T0, "skipped", "cron", "misfire:skip"), got
        else:
            armed += 1
            assert got[:4] == (T0, "queued", "cron", None), got
            assert abs(got[4] - run_at) < timedelta(milliseconds=1), (got, run_at)  # float seconds
    assert armed, "every offset fell before the cutoff: the rule was not exercised"


async def test_a_buffer_all_schedule_with_misfire_skip_records_its_missed_ticks_and_runs_the_next(
        store: PgStore, firing: Callable[..., Any]) -> None:
    """Five minutes missed: five `skipped` records, none buffered; the next live tick starts."""
    sid = await make_schedule(store, 4)
    await set_policies(store, sid, misfire_policy="skip", overlap_policy="buffer_all")
    firer, clock = await firing(4, Trust(epoch=1), start_ts=(T0 + 5 * MINUTE).timestamp() - 5)
    assert await rows(store, sid) == [(T0 + i * MINUTE, "skipped", "cron", "misfire:skip", T0 + i * MINUTE)
                                      for i in range(5)]
    await advance_until(clock, firer.signals.written, 5)
    assert (await rows(store, sid))[-1] == (T0 + 5 * MINUTE, "queued", "cron", None, T0 + 5 * MINUTE)
