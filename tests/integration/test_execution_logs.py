"""Execution logs against a real PostgreSQL: an append is fenced like a heartbeat (token, lease
owner, running, tenant) and idempotent per (attempt, seq); lines page in order by (attempt, seq);
retention deletes an execution's lines with it, and only its."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.storage import PgStore
from cronwheel.storage.logs import LogAppend, LogPageParams

from .execution_rows import insert_execution
from .test_retention import DAY, DAY_S, T0, P, clock_at, finished_run, ids_left, owned, pruner

pytestmark = pytest.mark.integration
__all__ = ["owned"]  # the fixture, imported for the tests below
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


async def running(store: PgStore, token: int = 4, attempt: int = 2, tenant: str = "t") -> uuid.UUID:
    return await insert_execution(store, partition=P, scheduled_for=NOW, run_at=NOW, state="running",
                                  attempt=attempt, fencing_token=token, lease_owner="w1", tenant=tenant,
                                  lease_expires=NOW + timedelta(minutes=1), started_at=NOW)


def lines(*messages: str, first: int = 1) -> list[tuple[int, datetime, str, str, str]]:
    return [(first + i, NOW + timedelta(milliseconds=i), "INFO", "job", m) for i, m in enumerate(messages)]


async def page(store: PgStore, ident: uuid.UUID, attempt: int | None = None,
               after: tuple[int, int] = (0, 0)) -> list[tuple[int, int, str]]:
    got = await store.logs.page(LogPageParams(ident, attempt, after[0], after[1], 100))
    return [(ln.attempt, ln.seq, ln.message) for ln in got]


async def test_an_append_is_fenced_by_the_attempts_token_owner_and_tenant(store: PgStore) -> None:
    ok, stale, other_tenant = await running(store), await running(store), await running(store, tenant="u")
    accepted = await store.logs.append("w1", [LogAppend(ok, 4, lines("a", "b")), LogAppend(stale, 3, lines("x")),
                                             LogAppend(other_tenant, 4, lines("y"))], tenant="t")
    assert accepted == {ok}
    assert await store.logs.append("w2", [LogAppend(ok, 4, lines("z", first=3))], tenant=None) == set()  # not owner
    assert await page(store, ok) == [(2, 1, "a"), (2, 2, "b")]  # the row's attempt, not the worker's word
    assert await page(store, stale) == [] and await page(store, other_tenant) == []


async def test_a_repeated_append_stores_each_line_once_and_pages_follow_the_cursor(store: PgStore) -> None:
    ident = await running(store)
    for _ in range(2):  # a retried call
        assert await store.logs.append("w1", [LogAppend(ident, 4, lines("a", "b", "c"))], None) == {ident}
    assert await page(store, ident) == [(2, 1, "a"), (2, 2, "b"), (2, 3, "c")]
    assert await page(store, ident, after=(2, 1)) == [(2, 2, "b"), (2, 3, "c")]
    assert await page(store, ident, attempt=1) == []


async def test_retention_prunes_an_executions_log_lines_with_it(store: PgStore, owned: None) -> None:
    old, young = await running(store), await running(store)
    for ident in (old, young):
        assert await store.logs.append("w1", [LogAppend(ident, 4, lines("one", "two"))], None) == {ident}
    async with store.connection() as conn:  # both finish: old ten days ago, young now
        for ident, at in ((old, T0), (young, T0 + 10 * DAY)):
            await conn.execute("UPDATE executions SET state = 'succeeded', finished_at = %s, lease_owner = NULL"
                               " WHERE id = %s", (at, ident))
    silent = await finished_run(store, None, T0)  # pruned too: a run that never logged
    assert silent in await ids_left(store)
    await pruner(store, clock_at(T0 + 10 * DAY), succeeded_s=7 * DAY_S).drain()
    assert await ids_left(store) == {young}
    assert await page(store, old) == []
    assert await page(store, young) == [(2, 1, "one"), (2, 2, "two")]
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM execution_logs")
        assert await cur.fetchone() == (2,)


async def test_a_page_is_cut_at_3_mib_of_text_and_says_more_lines_are_stored(store: PgStore) -> None:
    from cronwheel.cluster.commands.logs import read_logs
    from cronwheel.limits import ANSWER_ROWS_BYTES, MAX_LOG_LINE_BYTES

    ident = await running(store)
    big = "x" * MAX_LOG_LINE_BYTES
    n = ANSWER_ROWS_BYTES // MAX_LOG_LINE_BYTES + 10
    assert await store.logs.append("w1", [LogAppend(ident, 4, lines(*[big] * n))], None) == {ident}
    first = await read_logs(store, ident, None, attempt=0, after_attempt=0, after_seq=0, page_size=0)
    assert len(first.lines) == ANSWER_ROWS_BYTES // MAX_LOG_LINE_BYTES and first.more and not first.final
    last = first.lines[-1]
    rest = await read_logs(store, ident, None, attempt=0, after_attempt=last.attempt, after_seq=last.seq,
                           page_size=0)
    assert [ln.seq for ln in rest.lines] == list(range(last.seq + 1, n + 1)) and not rest.more
    three = await read_logs(store, ident, None, attempt=0, after_attempt=0, after_seq=0, page_size=3)
    assert len(three.lines) == 3 and three.more
