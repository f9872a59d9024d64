"""The webhooks port against a real PostgreSQL: a delivery exists exactly when its event does
(same transaction, on the API path and on the fire path), subscriptions match by kind, tenant
and schedule, and claims are exclusive, leased, and tokened by their attempt number."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.cluster.commands import schedules as sch
from cronwheel.storage import PgStore
from cronwheel.storage.api import Event
from cronwheel.storage.firing import FireBatchParams, PartitionEvent
from cronwheel.storage.webhooks import DeliveryFilter, NewWebhook, Outcome

from .conftest import TEST_PARTITIONS as P

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)


async def hook(store: PgStore, kinds: tuple[str, ...], tenant: str | None = None,
               schedule_id: uuid.UUID | None = None) -> uuid.UUID:
    row = await store.webhooks.create(NewWebhook(
        id=uuid.uuid4(), tenant=tenant, url="http://127.0.0.1:9/", secret="s" * 20, kinds=kinds,
        schedule_id=schedule_id, description="", actor="test", now=NOW))
    return row["id"]  # type: ignore[no-any-return]


async def deliveries(store: PgStore, **kw: Any) -> list[dict[str, Any]]:
    args: dict[str, Any] = dict(tenant=None, webhook_id=None, event_id=None, state=None, before=None, limit=100)
    return await store.webhooks.deliveries(DeliveryFilter(**{**args, **kw}))


async def test_an_event_whose_transaction_rolls_back_leaves_no_delivery_and_a_committed_one_leaves_one(
        store: PgStore) -> None:
    wid = await hook(store, ("dead_letter",))
    with pytest.raises(RuntimeError):
        async with store.transaction() as conn:
            await store.events.insert(Event("dead_letter", tenant="acme", alert=True), conn=conn)
            raise RuntimeError("the rest of the transaction failed")
    assert await deliveries(store) == []
    await store.events.insert(Event("dead_letter", tenant="acme", alert=True))
    (d,) = await deliveries(store)
    assert (d["webhook_id"], d["kind"], d["state"], d["attempts"]) == (wid, "dead_letter", "pending", 0)


async def test_subscriptions_match_by_kind_tenant_and_schedule(store: PgStore) -> None:
    s = await sch.create_schedule(store, sch.ScheduleSpec(tenant="acme", name="n", cron="0 3 * * *", timezone="UTC",
                                                          job_type="r", misfire_policy="skip"), NOW, P)
    sid = s["id"]
    every = await hook(store, ("schedule_paused", "dead_letter"))
    acme = await hook(store, ("schedule_paused",), tenant="acme")
    globex = await hook(store, ("schedule_paused",), tenant="globex")
    one = await hook(store, ("schedule_paused",), schedule_id=sid)
    other = await hook(store, ("schedule_paused",), schedule_id=uuid.uuid4())
    await store.events.insert(Event("schedule_paused", tenant="acme", schedule_id=sid))
    await store.events.insert(Event("schedule_resumed", tenant="acme", schedule_id=sid))  # nobody's kind
    got = {d["webhook_id"] for d in await deliveries(store)}
    assert got == {every, acme, one}
    assert globex not in got and other not in got
    assert {d["webhook_id"] for d in await deliveries(store, tenant="acme")} == {acme}


async def test_a_fire_batch_misfire_event_enqueues_its_delivery_by_the_schedules_tenant(store: PgStore) -> None:
    s = await sch.create_schedule(store, sch.ScheduleSpec(tenant="acme", name="n", cron="0 3 * * *", timezone="UTC",
                                                          job_type="r", misfire_policy="skip"), NOW, P)
    wid = await hook(store, ("misfire_refused",), tenant="acme")  # the fire path's events carry no tenant
    p = s["partition"]
    assert await store.partitions.record_epoch(p, 7, "node-a")
    async with store.fenced(p, 7) as conn:
        await store.firing.write_fire(conn, FireBatchParams(partition=p, epoch=7, events=[
            PartitionEvent("misfire_refused", s["id"], True, {"refused": 2})]))
    (d,) = await deliveries(store)
    assert (d["webhook_id"], d["kind"]) == (wid, "misfire_refused")


async def test_claims_are_exclusive_leased_and_an_outcome_after_a_reclaim_is_ignored(store: PgStore) -> None:
    await hook(store, ("dead_letter",))
    for _ in range(3):
        await store.events.insert(Event("dead_letter", tenant="acme", alert=True, at=NOW))
    a = await store.webhooks.claim("a", NOW, lease_s=30, limit=2)
    b = await store.webhooks.claim("b", NOW, lease_s=30, limit=10)
    assert len(a) == 2 and len(b) == 1 and not {c.id for c in a} & {c.id for c in b}
    assert await store.webhooks.claim("c", NOW + timedelta(seconds=29), 30, 10) == []  # all leased
    stale = a[0]
    (again,) = [c for c in await store.webhooks.claim("c", NOW + timedelta(seconds=31), 30, 10) if c.id == stale.id]
    assert (again.attempt, stale.attempt) == (2, 1) and again.event is not None
    assert again.event["kind"] == "dead_letter" and again.url == "http://127.0.0.1:9/"
    late = NOW + timedelta(seconds=32)
    assert not await store.webhooks.record(Outcome(stale.id, 1, "delivered", None, 200, None, late))
    assert await store.webhooks.record(Outcome(again.id, 2, "pending", late + timedelta(seconds=5), 500, "HTTP 500",
                                               late))
    (row,) = await deliveries(store, event_id=again.event["event_id"])
    assert (row["state"], row["attempts"], row["last_status"], row["claimed_by"]) == ("pending", 2, 500, "c")
    assert row["next_attempt_at"] == late + timedelta(seconds=5)
