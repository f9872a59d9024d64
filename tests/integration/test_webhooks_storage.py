"""The webhooks port against a real PostgreSQL: an event committed is a delivery owed (the event is
its deliveries' outbox, fanned out later, on the API path and on the fire path; a rolled-back one
owes nothing), subscriptions match by kind, tenant and schedule, an owner past its cap of
webhooks is refused, and claims are exclusive, leased, tokened by their attempt number and
shared fairly between owners."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.cluster.commands import schedules as sch
from cronwheel.errors import ResourceExhausted
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
        schedule_id=schedule_id, description="", actor="test", now=NOW, cap=100))
    return row["id"]  # type: ignore[no-any-return]


async def deliveries(store: PgStore, **kw: Any) -> list[dict[str, Any]]:
    """The deliveries, once every pending event is fanned out (what a sender does first)."""
    while (await store.webhooks.fan_out(100))[0]:
        pass
    args: dict[str, Any] = dict(tenant=None, webhook_id=None, event_id=None, state=None, before=None, limit=100)
    return await store.webhooks.deliveries(DeliveryFilter(**{**args, **kw}))


async def test_an_event_whose_transaction_rolls_back_owes_no_delivery_and_a_committed_one_owes_one(
        store: PgStore) -> None:
    wid = await hook(store, ("dead_letter",))
    with pytest.raises(RuntimeError):
        async with store.transaction() as conn:
            await store.events.insert(Event("dead_letter", tenant="acme", alert=True), conn=conn)
            raise RuntimeError("the rest of the transaction failed")
    assert await deliveries(store) == []
    await store.events.insert(Event("dead_letter", tenant="acme", alert=True))
    async with store.connection() as conn:  # nothing enqueued with the event: it is the outbox
        cur = await conn.execute("SELECT count(*) FROM webhook_deliveries")
        assert (await cur.fetchone()) == (0,)
    (d,) = await deliveries(store)
    assert (d["webhook_id"], d["kind"], d["state"], d["attempts"]) == (wid, "dead_letter", "pending", 0)
    assert await store.webhooks.fan_out(100) == (0, 0), "an event is fanned out once"


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
    await deliveries(store)
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


async def test_two_senders_fanning_out_at_once_make_each_delivery_once(store: PgStore) -> None:
    await hook(store, ("dead_letter",))
    await hook(store, ("dead_letter",), tenant="acme")
    for _ in range(40):
        await store.events.insert(Event("dead_letter", tenant="acme", alert=True, at=NOW))
    got = await asyncio.gather(*(store.webhooks.fan_out(7) for _ in range(8)))
    assert sum(e for e, _ in got) <= 40
    rows = await deliveries(store)
    assert len(rows) == 80 and len({(r["webhook_id"], r["event_id"]) for r in rows}) == 80


async def test_an_owner_past_its_webhook_cap_is_refused_and_others_are_not(store: PgStore) -> None:
    made = await asyncio.gather(*(store.webhooks.create(NewWebhook(
        id=uuid.uuid4(), tenant="acme", url="http://h/", secret="s" * 20, kinds=("dead_letter",), schedule_id=None,
        description="", actor="t", now=NOW, cap=3)) for _ in range(3)))
    assert len(made) == 3
    for tenant in ("acme", "acme"):  # concurrent creations are serialized: never a fourth
        with pytest.raises(ResourceExhausted, match="tenant acme already has 3 webhooks"):
            await store.webhooks.create(NewWebhook(id=uuid.uuid4(), tenant=tenant, url="http://h/", secret="s" * 20,
                                                   kinds=("dead_letter",), schedule_id=None, description="",
                                                   actor="t", now=NOW, cap=3))
    other = await store.webhooks.create(NewWebhook(id=uuid.uuid4(), tenant="globex", url="http://h/",
                                                   secret="s" * 20, kinds=("dead_letter",), schedule_id=None,
                                                   description="", actor="t", now=NOW, cap=3))
    assert other["tenant"] == "globex"
    async with store.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM webhooks WHERE tenant = 'acme'")
        assert (await cur.fetchone()) == (3,)


async def test_claims_take_turns_between_tenants_and_cap_what_one_tenant_holds(store: PgStore) -> None:
    await hook(store, ("dead_letter",), tenant="a")
    await hook(store, ("dead_letter",), tenant="b")
    for i in range(10):  # tenant a's ten events are all older than tenant b's one
        await store.events.insert(Event("dead_letter", tenant="a", alert=True, at=NOW + timedelta(seconds=i)))
    await store.events.insert(Event("dead_letter", tenant="b", alert=True, at=NOW + timedelta(seconds=20)))
    await deliveries(store)
    later = NOW + timedelta(seconds=30)
    first = await store.webhooks.claim("n", later, 60, limit=3, per_owner=2)
    assert sorted(c.owner for c in first) == ["a", "a", "b"]  # b's turn comes before a's third
    more = await store.webhooks.claim("n", later, 60, limit=10, per_owner=2, busy={"a": 2, "b": 1})
    assert more == []  # a holds its 2 already; b has nothing else due
    freed = await store.webhooks.claim("n", later, 60, limit=10, per_owner=2, busy={"a": 1})
    assert [c.owner for c in freed] == ["a"]
