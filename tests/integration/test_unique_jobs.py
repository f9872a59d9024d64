"""Unique jobs (SubmitJob's `unique`) against a real PostgreSQL: what is compared, the states that
keep a second job out, period buckets, races between nodes, group commit and bulk submits."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.clock import SystemClock
from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands.submit_batcher import SubmitBatcher
from cronwheel.cluster.commands.unique import UniqueSpec
from cronwheel.cluster.commands.values import QuotaExceeded
from cronwheel.errors import AlreadyExists, InvalidArgument
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.storage.executions import UNIQUE_STATE_BITS

from .conftest import TEST_PARTITIONS

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
BY_ARGS = UniqueSpec(by_args=True)


def job(payload: object, unique: UniqueSpec | None = BY_ARGS, tenant: str = "acme", type: str = "refresh",
        key: str | None = None, **kw: object) -> runs.JobSpec:
    return runs.JobSpec(tenant=tenant, type=type, payload=payload, idempotency_key=key, unique=unique,
                        **kw)  # type: ignore[arg-type]


def prep(specs: list[runs.JobSpec], now: datetime = NOW) -> list:
    return [runs.prepare_job(s, now, TEST_PARTITIONS) for s in specs]


async def submit(store: PgStore, spec: runs.JobSpec, now: datetime = NOW) -> tuple[dict, bool]:
    return await runs.submit_job(store, spec, now, TEST_PARTITIONS)


async def count(store: PgStore, tenant: str = "acme") -> int:
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM executions WHERE tenant = %s", (tenant,))
        got = await cur.fetchone()
    return int(got[0])


async def set_state(store: PgStore, execution_id: object, state: str) -> None:
    async with store.connection() as conn:
        await conn.execute("UPDATE executions SET state = %s WHERE id = %s", (state, execution_id))


async def test_the_state_bits_of_sql_and_python_agree(store: PgStore) -> None:
    async with store.connection() as conn:
        for state, bit in UNIQUE_STATE_BITS.items():
            cur = await conn.execute("SELECT cronwheel_unique_holds(%s::smallint, %s), "
                                     "cronwheel_unique_holds(%s::smallint, %s)", (bit, state, 511 & ~bit, state))
            assert await cur.fetchone() == (True, False), state


async def test_a_second_submit_with_the_same_args_returns_the_existing_execution(store: PgStore) -> None:
    first, dedup = await submit(store, job({"customer": 42}))
    assert not dedup
    again, dedup = await submit(store, job({"customer": 42}))
    assert (again["id"], dedup) == (first["id"], True)
    assert runs.deduplicated_by(prep([job({"customer": 42})])[0], again, dedup) == "unique"
    other, dedup = await submit(store, job({"customer": 43}))
    assert not dedup and other["id"] != first["id"]
    assert await count(store) == 2


async def test_args_compare_as_json_values_not_as_text(store: PgStore) -> None:
    first, _ = await submit(store, job({"a": 1, "b": [1.0, "x"]}))
    again, dedup = await submit(store, job(runs.JsonText('{ "b": [1, "x"], "a": 1.00 }')))
    assert (again["id"], dedup) == (first["id"], True)


async def test_args_keys_compare_only_the_chosen_keys(store: PgStore) -> None:
    keys = UniqueSpec(args_keys=("customer",))
    first, _ = await submit(store, job({"customer": 42, "reason": "signup"}, keys))
    again, dedup = await submit(store, job({"customer": 42, "reason": "manual"}, keys))
    assert (again["id"], dedup) == (first["id"], True)
    missing, dedup = await submit(store, job({"reason": "x"}, keys))
    null, dedup2 = await submit(store, job({"customer": None}, keys))
    assert not dedup and not dedup2 and missing["id"] != null["id"]  # a missing key is not null


async def test_type_and_tenant_are_always_part_of_the_key(store: PgStore) -> None:
    by_type = UniqueSpec()  # unique by type alone
    a, _ = await submit(store, job({"x": 1}, by_type))
    b, dedup = await submit(store, job({"x": 2}, by_type))
    assert (b["id"], dedup) == (a["id"], True)
    c, dedup = await submit(store, job({"x": 1}, by_type, type="other"))
    d, dedup2 = await submit(store, job({"x": 1}, by_type, tenant="globex"))
    assert not dedup and not dedup2 and len({a["id"], c["id"], d["id"]}) == 3


async def test_jobs_without_unique_are_never_compared(store: PgStore) -> None:
    a, _ = await submit(store, job({"customer": 42}))
    b, dedup = await submit(store, job({"customer": 42}, unique=None))
    assert not dedup and b["id"] != a["id"]
    assert b["unique_key"] is None and b["unique_states"] is None


async def test_once_the_execution_leaves_its_states_a_new_submit_creates_a_new_one(store: PgStore) -> None:
    first, _ = await submit(store, job({"customer": 42}))
    for state in ("running", "retry_scheduled", "scheduled"):
        await set_state(store, first["id"], state)
        again, dedup = await submit(store, job({"customer": 42}))
        assert (again["id"], dedup) == (first["id"], True), state
    await set_state(store, first["id"], "succeeded")
    second, dedup = await submit(store, job({"customer": 42}))
    assert not dedup and second["id"] != first["id"]


async def test_a_succeeded_execution_in_the_states_keeps_a_second_out_for_its_period(store: PgStore) -> None:
    hourly = UniqueSpec(by_args=True, period_s=3600, states=("scheduled", "queued", "running", "retry_scheduled",
                                                               "succeeded"))
    first, _ = await submit(store, job({"c": 1}, hourly), NOW)
    await set_state(store, first["id"], "succeeded")
    again, dedup = await submit(store, job({"c": 1}, hourly), NOW + timedelta(minutes=59, seconds=59))
    assert (again["id"], dedup) == (first["id"], True)
    await set_state(store, first["id"], "failed")  # not one of the states: the key is free
    other, dedup = await submit(store, job({"c": 1}, hourly), NOW + timedelta(minutes=30))
    assert not dedup and other["id"] != first["id"]


async def test_period_buckets_are_whole_periods_of_the_unix_epoch_by_run_at(store: PgStore) -> None:
    hourly = UniqueSpec(by_args=True, period_s=3600)
    last_second = datetime(2026, 12, 1, 10, 59, 59, 999999, tzinfo=UTC)
    a, _ = await submit(store, job({"c": 1}, hourly), datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    b, dedup = await submit(store, job({"c": 1}, hourly), last_second)
    assert (b["id"], dedup) == (a["id"], True)
    c, dedup = await submit(store, job({"c": 1}, hourly), datetime(2026, 12, 1, 11, 0, tzinfo=UTC))
    assert not dedup and c["id"] != a["id"]
    # a delayed job falls in the bucket of its run_at, not of the submit
    d, dedup = await submit(store, job({"c": 1}, hourly, run_at=datetime(2026, 12, 1, 11, 30, tzinfo=UTC)), NOW)
    assert (d["id"], dedup) == (c["id"], True)
    forever = UniqueSpec(by_args=True)
    e, _ = await submit(store, job({"c": 1}, forever), NOW)
    assert e["id"] not in (a["id"], c["id"])  # another period is another key


async def test_the_idempotency_key_is_checked_before_the_unique_key(store: PgStore) -> None:
    keyed, _ = await submit(store, job({"c": 1}, unique=None, key="k1"))
    holder, _ = await submit(store, job({"c": 2}))
    got, dedup = await submit(store, job({"c": 2}, key="k1"))
    assert (got["id"], dedup) == (keyed["id"], True)
    assert runs.deduplicated_by(prep([job({"c": 2}, key="k1")])[0], got, dedup) == "idempotency_key"
    got, dedup = await submit(store, job({"c": 2}, key="k2"))
    assert (got["id"], dedup) == (holder["id"], True)
    assert runs.deduplicated_by(prep([job({"c": 2}, key="k2")])[0], got, dedup) == "unique"


async def test_submits_racing_on_several_nodes_make_one_execution(dsn: str) -> None:
    nodes = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=4)) for _ in range(3)]
    for s in nodes:
        await s.open()
    batchers = [SubmitBatcher(s, SystemClock(), window_s=0.002, max_batch=4) for s in nodes]
    try:
        now = datetime.now(UTC)
        for round_ in range(5):
            spec = job({"customer": round_}, key=None)
            got = await asyncio.gather(*(batchers[i % 3].submit(runs.prepare_job(spec, now, TEST_PARTITIONS))
                                         for i in range(30)))
            assert len({r["id"] for r, _ in got}) == 1, round_
            assert sorted(d for _, d in got) == [False] + [True] * 29
        assert await count(nodes[0]) == 5
    finally:
        for b in batchers:
            await b.close()
        for s in nodes:
            await s.close()


async def test_a_duplicate_in_one_group_is_answered_without_failing_the_others(store: PgStore) -> None:
    await runs.submit_jobs(store, prep([job({"i": "taken"}, unique=None, key="taken")]), NOW)
    batcher = SubmitBatcher(store, SystemClock(), window_s=0.05, max_batch=512)
    now = datetime.now(UTC)
    specs = ([job({"customer": 7}) for _ in range(10)] + [job({"i": i}, unique=None, key=f"k{i}") for i in range(20)]
             + [job({"i": "taken"}, unique=None, key="taken")])
    try:
        got = await asyncio.gather(*(batcher.submit(j) for j in prep(specs, now)))
    finally:
        await batcher.close()
    assert batcher.groups_written < len(specs)  # they shared transactions
    uniq = got[:10]
    assert len({r["id"] for r, _ in uniq}) == 1 and sorted(d for _, d in uniq) == [False] + [True] * 9
    assert [(r["idempotency_key"], d) for r, d in got[10:30]] == [(f"k{i}", False) for i in range(20)]
    assert got[30][1] is True and got[30][0]["idempotency_key"] == "taken"
    assert await count(store) == 1 + 1 + 20


async def test_bulk_duplicates_return_the_first_item_and_count_once_against_the_quota(store: PgStore) -> None:
    async with store.connection() as conn:
        await conn.execute("INSERT INTO tenants (id, max_executions_per_day) VALUES ('acme', 3)")
    got = await runs.submit_jobs(store, prep([job({"c": 1}), job({"c": 1}), job({"c": 2}), job({"c": 1})]), NOW,
                                 brief=True)
    assert [d for _, d in got] == [False, True, False, True]
    assert got[1][0]["id"] == got[0][0]["id"] == got[3][0]["id"]
    again = await runs.submit_jobs(store, prep([job({"c": 2}), job({"c": 3})]), NOW)  # the held key does not count
    assert [d for _, d in again] == [True, False] and again[0][0]["id"] == got[2][0]["id"]
    with pytest.raises(QuotaExceeded):
        await runs.submit_jobs(store, prep([job({"c": 4})]), NOW)
    assert await count(store) == 3


async def test_bulk_without_quota_takes_the_one_round_trip_path_and_dedupes_too(store: PgStore) -> None:
    first = await runs.submit_jobs(store, prep([job({"c": 1}), job({"c": 2})]), NOW, brief=True)
    got = await runs.submit_jobs(store, prep([job({"c": 2}), job({"c": 3}), job({"c": 3}), job({"c": 9}, unique=None)]),
                                 NOW, brief=True)
    assert [d for _, d in got] == [True, False, True, False]
    assert got[0][0]["id"] == first[1][0]["id"] and got[2][0]["id"] == got[1][0]["id"]
    assert await count(store) == 4


@pytest.mark.parametrize(("spec", "field"), [
    (UniqueSpec(states=("queued", "running", "scheduled", "retry_scheduled", "done")), "unique.states[4]"),
    (UniqueSpec(states=("queued", "running")), "unique.states"),
    (UniqueSpec(states=("queued", "running", "scheduled", "retry_scheduled", "cancelled")), "unique.states"),
    (UniqueSpec(period_s=-1), "unique.period"),
    (UniqueSpec(period_s=1.5), "unique.period"),
    (UniqueSpec(args_keys=("customer", 42)), "unique.args_keys[1]"),
    (UniqueSpec(args_keys=("",)), "unique.args_keys[0]"),
])
async def test_bad_unique_options_are_invalid_argument_naming_the_field(store: PgStore, spec: UniqueSpec,
                                                                         field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        prep([job({"customer": 1}, spec)])
    assert err.value.field == field
    assert await count(store) == 0


async def test_args_keys_of_a_payload_that_is_not_an_object_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument) as err:
        prep([job([1, 2], UniqueSpec(args_keys=("a",)))])
    assert err.value.field == "unique.args_keys"


async def test_retrying_an_execution_whose_key_another_holds_is_already_exists(store: PgStore) -> None:
    first, _ = await submit(store, job({"c": 1}))
    await set_state(store, first["id"], "dead")
    second, dedup = await submit(store, job({"c": 1}))
    assert not dedup
    with pytest.raises(AlreadyExists) as err:
        await runs.retry_execution(store, first["id"], NOW, None)
    assert str(second["id"]) in str(err.value)
    await set_state(store, second["id"], "succeeded")
    back = await runs.retry_execution(store, first["id"], NOW, None)
    assert back["state"] == "queued"


async def test_the_holder_is_found_through_the_partial_unique_index(store: PgStore) -> None:
    from cronwheel.storage.queries import q

    async with store.connection() as conn:
        await conn.execute("SET enable_seqscan = off")
        cur = await conn.execute("EXPLAIN " + q("api_by_unique_keys"), {"unique_keys": [b"x" * 32]})
        plan = " ".join(r[0] for r in await cur.fetchall())
    assert "executions_unique" in plan


async def test_a_holder_that_finishes_before_the_read_back_makes_the_submit_create_a_new_one(
        store: PgStore, monkeypatch: pytest.MonkeyPatch) -> None:
    holder, _ = await submit(store, job({"c": 1}))
    real = store.executions.by_unique_keys
    calls = 0

    async def finish_first(conn: object, keys: object) -> object:  # the interleaving, on the real database
        nonlocal calls
        calls += 1
        if calls == 1:
            await set_state(store, holder["id"], "succeeded")
        return await real(conn, keys)  # type: ignore[arg-type]

    monkeypatch.setattr(store.executions, "by_unique_keys", finish_first)
    got, dedup = await submit(store, job({"c": 1}))
    assert not dedup and got["id"] != holder["id"]
    assert calls == 1  # written again once, without a read-back: it was created
    assert await count(store) == 2


async def test_concurrent_bulk_calls_holding_the_same_keys_in_any_order_never_deadlock(dsn: str) -> None:
    nodes = [PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=4)) for _ in range(4)]
    for s in nodes:
        await s.open()
    try:
        now = datetime.now(UTC)
        n = 300
        for round_ in range(5):
            keys = [{"round": round_, "k": k} for k in range(n)]
            calls = [runs.submit_jobs(nodes[i % 4], prep([job(p) for p in (keys if i % 2 else keys[::-1])], now), now)
                     for i in range(4)]
            got = await asyncio.gather(*calls)  # a deadlock would fail a call (and every caller of its group)
            for k in range(n):
                ids = {call[k if i % 2 else n - 1 - k][0]["id"] for i, call in enumerate(got)}
                assert len(ids) == 1
        assert await count(nodes[0]) == 5 * n
    finally:
        for s in nodes:
            await s.close()
