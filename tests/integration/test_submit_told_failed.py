"""Issue 47 item 7, against real PostgreSQL: a submit told "failed" stored nothing of that call.

Three ways stored jobs were reported failed, each injected here: a read-back failure after the
fast path committed, a quota changed between the fast path's quota read and its guard (two
statements, two snapshots), and a call cancelled while its implicit pipeline was open (the Sync
that ends the pipeline committed what had been sent).
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from cronwheel.cluster.commands import runs
from cronwheel.errors import CronwheelError, Unavailable
from cronwheel.storage import PgStore

from .test_submit_bulk import NOW, count, job, prep

pytestmark = pytest.mark.integration


async def ids_stored(store: PgStore, tenant: str = "acme") -> set[Any]:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT id FROM executions WHERE tenant = %s", (tenant,))
        return {r[0] for r in await cur.fetchall()}


async def test_a_read_back_failure_after_the_commit_fails_only_the_jobs_the_call_did_not_store(
        store: PgStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group whose fast path committed, with one job whose key was taken: the read-back of the
    taken key's execution fails (every attempt). The new job was stored: it is answered; the
    other is told Unavailable, and nothing of it was stored. Before: every job of the group (each
    SubmitJob caller) was told failed. SubmitJobs, all or nothing, names the ids it stored."""
    [(taken, _)] = await runs.submit_jobs(store, prep([job(0, key="taken")]), NOW)

    async def unreadable(*_: Any) -> Any:
        raise Unavailable("postgres", "injected: the read-back failed")

    monkeypatch.setattr(store.executions, "by_idempotency_keys", unreadable)
    got = await runs.write_jobs(store, prep([job(1, key="new-1"), job(2, key="taken")]), NOW, all_or_nothing=False)
    assert isinstance(got[0], tuple) and not got[0][1], got[0]
    assert isinstance(got[1], Unavailable) and "submit again with the same key" in str(got[1])
    assert await ids_stored(store) == {taken["id"], got[0][0]["id"]}

    with pytest.raises(runs.StoredThenFailed) as err:
        await runs.submit_jobs(store, prep([job(3, key="new-3"), job(4, key="taken")]), NOW)
    stored = await ids_stored(store) - {taken["id"], got[0][0]["id"]}
    assert len(stored) == 1 and err.value.stored == list(stored) and str(next(iter(stored))) in str(err.value)

    monkeypatch.undo()  # read-back works again: the same call answers every job, storing nothing more
    again = await runs.submit_jobs(store, prep([job(3, key="new-3"), job(4, key="taken")]), NOW)
    assert [(r["id"], d) for r, d in again] == [(next(iter(stored)), True), (taken["id"], True)]


async def test_a_submit_cancelled_inside_its_pipeline_stores_nothing(store: PgStore,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path sends its insert and its notifications in one implicit pipeline; a call
    cancelled between the two (a cancelled RPC) used to be committed by the Sync that ended the
    pipeline: stored, without its notifications, while its caller was told it failed."""
    reached = asyncio.Event()

    async def stalled(*_: Any) -> None:
        reached.set()
        await asyncio.Event().wait()  # until cancelled

    monkeypatch.setattr(store.executions, "notify_submitted", stalled)
    task = asyncio.create_task(runs.write_jobs(store, prep([job(1, key="cancelled")]), NOW, all_or_nothing=False))
    await asyncio.wait_for(reached.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await count(store) == 0
    monkeypatch.undo()  # the pool still serves: the next call is stored
    [(row, dedup)] = await runs.submit_jobs(store, prep([job(1, key="cancelled")]), NOW)
    assert not dedup and await ids_stored(store) == {row["id"]}


async def _waiting_on_a_lock(dsn: str, timeout_s: float = 10) -> None:
    """Until another session waits for a lock (the test holds the executions table)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        for _ in range(int(timeout_s / 0.01)):
            cur = await c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            if (await cur.fetchone())[0]:  # type: ignore[index]
                return
            await asyncio.sleep(0.01)  # polling a condition, with a deadline
    raise TimeoutError("no session waited for the lock")


@pytest.mark.parametrize("quota_before,quota_after", [(5, None), (None, 5)])
async def test_a_quota_changed_during_a_fast_path_submit_is_read_in_the_guards_snapshot(
        store: PgStore, dsn: str, quota_before: int | None, quota_after: int | None) -> None:
    """The fast path read the tenants' quotas in one statement and guarded its insert in another,
    each in its own snapshot. The insert is held on a lock while the quota changes: a quota cleared
    meanwhile made the node insert everything and then take the counted path too (the same ids
    again: told failed, though stored); a quota set meanwhile made it answer "taken" for jobs the
    guard had refused. Now the guard and the finding are one statement: one snapshot."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        if quota_before is not None:
            await admin.execute("INSERT INTO tenants (id, max_executions_per_day) VALUES ('acme', %s)", (quota_before,))
        async with admin.transaction():
            await admin.execute("LOCK TABLE executions IN SHARE MODE")  # inserts wait; reads do not
            task = asyncio.create_task(runs.write_jobs(store, prep([job(1), job(2, key="k2")]), NOW,
                                                       all_or_nothing=False))
            await _waiting_on_a_lock(dsn)
            await admin.execute("INSERT INTO tenants (id, max_executions_per_day) VALUES ('acme', %s) ON CONFLICT "
                                "(id) DO UPDATE SET max_executions_per_day = excluded.max_executions_per_day",
                                (quota_after,))
        got = await asyncio.wait_for(task, 30)
    bad = [r for r in got if isinstance(r, CronwheelError)]
    assert not bad, bad
    assert {r[0]["id"] for r in got if isinstance(r, tuple)} == await ids_stored(store)
    assert await count(store) == 2
