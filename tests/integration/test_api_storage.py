"""The API's storage port against a real PostgreSQL: errors leave typed (never as psycopg
exceptions), unique keys name what clashed, the API's writes carry the caller's `now`, and a
manual trigger decides overlap with the firing path's fenced statements."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands import schedules as sch
from cronwheel.errors import AlreadyExists, Internal
from cronwheel.storage import PgStore

from .conftest import TEST_PARTITIONS as P

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 10, 12, 0, 30, 123456, tzinfo=UTC)


def spec(**kw: Any) -> sch.ScheduleSpec:
    base: dict[str, Any] = dict(tenant="acme", name="nightly", cron="0 3 * * *", timezone="UTC",
                                job_type="report", misfire_policy="skip")
    return sch.ScheduleSpec(**{**base, **kw})


async def test_a_taken_live_name_is_already_exists_naming_the_schedule_name(store: PgStore) -> None:
    await sch.create_schedule(store, spec(), NOW, P)
    with pytest.raises(AlreadyExists) as err:
        await sch.create_schedule(store, spec(), NOW, P)
    assert err.value.kind == "schedule"
    assert "schedule name" in err.value.message and "nightly" in err.value.message


async def test_a_taken_schedule_id_is_already_exists_naming_the_id(store: PgStore) -> None:
    sid = uuid.uuid4()
    await sch.create_schedule(store, spec(id=sid), NOW, P)
    with pytest.raises(AlreadyExists) as err:
        await sch.create_schedule(store, spec(id=sid, name="other"), NOW, P)
    assert err.value.kind == "schedule" and "schedule id" in err.value.message and str(sid) in err.value.message


async def test_renaming_onto_a_live_name_is_already_exists(store: PgStore) -> None:
    await sch.create_schedule(store, spec(), NOW, P)
    other = await sch.create_schedule(store, spec(name="other"), NOW, P)
    with pytest.raises(AlreadyExists) as err:
        await sch.update_schedule(store, other["id"], {"name": "nightly"}, NOW, "acme")
    assert err.value.kind == "schedule" and "schedule name" in err.value.message


async def test_an_unexpected_database_error_is_internal_never_a_psycopg_error(store: PgStore) -> None:
    with pytest.raises(Internal) as err:
        async with store.connection() as conn:
            await conn.execute("SELECT 1 / 0")
    assert not isinstance(err.value, psycopg.Error)
    assert "22012" in err.value.message  # the SQLSTATE, for the log


async def test_the_api_writes_stamp_the_callers_now(store: PgStore) -> None:
    created = await sch.create_schedule(store, spec(), NOW, P)
    assert created["created_at"] == NOW and created["updated_at"] == NOW
    later = NOW + timedelta(hours=1)
    paused = await sch.set_paused(store, created["id"], True, later, "acme")
    assert paused["updated_at"] == later
    gone = NOW + timedelta(hours=2)
    deleted, _ = await sch.delete_schedule(store, created["id"], gone, "acme")
    assert deleted["deleted_at"] == gone
    async with store.connection() as conn:
        cur = await conn.execute("SELECT kind, at FROM events WHERE schedule_id = %s ORDER BY id", (created["id"],))
        assert await cur.fetchall() == [("schedule_created", NOW), ("schedule_paused", later),
                                        ("schedule_deleted", gone)]


async def test_a_manual_trigger_decides_overlap_under_the_partitions_current_epoch(store: PgStore) -> None:
    row = await sch.create_schedule(store, spec(overlap_policy="forbid"), NOW, P)
    await store.partitions.record_epoch(row["partition"], 7, "n1")
    first, _ = await runs.trigger_schedule(store, row["id"], NOW, "acme")
    second, _ = await runs.trigger_schedule(store, row["id"], NOW + timedelta(seconds=1), "acme")
    assert first["state"] == "queued"
    assert second["state"] == "skipped" and second["state_reason"].startswith("overlap")
    replaced, _ = await runs.trigger_schedule(store, row["id"], NOW + timedelta(seconds=2), "acme",
                                              overlap_policy="replace")
    assert replaced["state"] == "queued"
    assert (await runs.get_execution(store, first["id"], "acme"))["state"] == "cancelled"


async def test_the_firing_paths_overlap_statements_refuse_a_stale_epoch(store: PgStore) -> None:
    """What makes sharing them safe: under an epoch the partition no longer has they see
    nothing and change nothing, so the trigger must (and does) read the current one."""
    row = await sch.create_schedule(store, spec(overlap_policy="replace"), NOW, P)
    await store.partitions.record_epoch(row["partition"], 7, "n1")
    first, _ = await runs.trigger_schedule(store, row["id"], NOW, "acme")
    async with store.transaction() as conn:
        assert await store.executions.active_counts(conn, row["partition"], 6, row["id"]) == (0, 0)
        assert await store.executions.replace_active(conn, row["partition"], 6, row["id"], NOW) == []
        epoch = await store.at_current_epoch(conn, row["partition"])
        assert epoch == 7
        assert await store.executions.active_counts(conn, row["partition"], epoch, row["id"]) == (1, 0)
    assert (await runs.get_execution(store, first["id"], "acme"))["state"] == "queued"
