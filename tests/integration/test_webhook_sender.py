"""The webhook sender's decisions on a real PostgreSQL, with the time a FakeClock's and the HTTP
answers a recorded transport's: when it retries, when it gives up, what it writes."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.webhooks import payload
from cronwheel.cluster.webhooks.config import WebhookConfig
from cronwheel.cluster.webhooks.sender import WebhookSender
from cronwheel.egress import Answer
from cronwheel.storage import PgStore
from cronwheel.storage.api import Event
from cronwheel.storage.webhooks import DeliveryFilter, NewWebhook
from tests.e2e.helpers import wait_until_async

pytestmark = pytest.mark.integration


class Answers:
    """A transport that answers from a list (then 200) and records what it was sent."""

    def __init__(self, *answers: int | None) -> None:
        self.answers = list(answers)
        self.sent: list[payload.Request] = []

    async def __call__(self, req: payload.Request, timeout_s: float) -> Answer:
        self.sent.append(req)
        status = self.answers.pop(0) if self.answers else 200
        if status is None:
            return Answer(None, "ConnectionRefusedError: refused")
        return Answer(status, None if status < 300 else f"HTTP {status} Internal Detail")


async def setup(store: PgStore, clock: FakeClock, **cfg: Any) -> tuple[WebhookConfig, uuid.UUID]:
    config = WebhookConfig(**{"backoff_initial_s": 10.0, "backoff_max_s": 100.0, **cfg})
    now = clock.now()
    await store.webhooks.create(NewWebhook(id=uuid.uuid4(), tenant=None, url="http://127.0.0.1:9/", secret="s" * 20,
                                           kinds=("dead_letter",), schedule_id=None, description="", actor="t",
                                           now=now, cap=100))
    await store.events.insert(Event("dead_letter", tenant="acme", alert=True, data={"error": "x"}, at=now))
    await store.webhooks.fan_out(10)
    (d,) = await store.webhooks.deliveries(DeliveryFilter(None, None, None, None, None, 10))
    return config, d["id"]


async def state(store: PgStore, ident: uuid.UUID) -> dict[str, Any]:
    (d,) = [r for r in await store.webhooks.deliveries(DeliveryFilter(None, None, None, None, None, 10))
            if r["id"] == ident]
    return d


async def test_a_failed_attempt_is_retried_after_the_retry_policys_backoff_on_the_injected_clock(
        store: PgStore) -> None:
    clock = FakeClock(start_ts=datetime(2026, 12, 1, tzinfo=UTC).timestamp())
    config, ident = await setup(store, clock)
    rng = random.Random(3)
    expected_delay = 10.0 * random.Random(3).random()  # full jitter of attempt 1: uniform in [0, 10]
    sender = WebhookSender(store.webhooks, "n1", clock, config, transport=Answers(503), rng=rng)
    assert await sender.round() == 1
    d = await state(store, ident)
    assert (d["state"], d["attempts"], d["last_status"], d["last_error"]) == ("pending", 1, 503, "delivery failed")
    assert d["next_attempt_at"] == clock.now() + timedelta(seconds=expected_delay)
    assert await sender.round() == 0  # not due yet
    clock.advance(expected_delay)
    assert await sender.round() == 1
    d = await state(store, ident)
    assert (d["state"], d["attempts"], d["last_status"], d["last_error"]) == ("delivered", 2, 200, None)
    assert d["finished_at"] == clock.now()


async def test_after_max_attempts_the_delivery_is_given_up_as_failed_with_its_last_error(store: PgStore) -> None:
    clock = FakeClock(start_ts=datetime(2026, 12, 1, tzinfo=UTC).timestamp())
    config, ident = await setup(store, clock, max_attempts=3)
    answers = Answers(500, None, 404)
    sender = WebhookSender(store.webhooks, "n1", clock, config, transport=answers)
    for _ in range(3):
        assert await sender.round() == 1
        clock.advance(100.0)  # past any backoff of this policy
    assert await sender.round() == 0
    d = await state(store, ident)
    assert (d["state"], d["attempts"], d["last_status"], d["last_error"]) == ("failed", 3, 404, "delivery failed")
    assert len(answers.sent) == 3 and len({r.headers["Cronwheel-Delivery"] for r in answers.sent}) == 1


async def test_a_delivery_whose_event_was_pruned_fails_without_a_request(store: PgStore) -> None:
    clock = FakeClock(start_ts=datetime(2026, 12, 1, tzinfo=UTC).timestamp())
    config, ident = await setup(store, clock)
    async with store.transaction() as conn:
        await conn.execute("DELETE FROM events")
    answers = Answers()
    sender = WebhookSender(store.webhooks, "n1", clock, config, transport=answers)
    assert await sender.round() == 1
    d = await state(store, ident)
    assert d["state"] == "failed" and "no longer in the log" in d["last_error"] and answers.sent == []


async def test_a_tenant_whose_receivers_hang_holds_its_own_slots_only_and_the_rest_is_sent(store: PgStore) -> None:
    clock = FakeClock(start_ts=datetime(2026, 12, 1, tzinfo=UTC).timestamp())
    now = clock.now()
    for i in range(5):
        await store.webhooks.create(NewWebhook(id=uuid.uuid4(), tenant="a", url=f"http://a.example/{i}",
                                               secret="s" * 20, kinds=("dead_letter",), schedule_id=None,
                                               description="", actor="t", now=now, cap=100))
    await store.webhooks.create(NewWebhook(id=uuid.uuid4(), tenant="b", url="http://b.example/", secret="s" * 20,
                                           kinds=("dead_letter",), schedule_id=None, description="", actor="t",
                                           now=now, cap=100))
    await store.events.insert(Event("dead_letter", tenant="a", alert=True, data={"error": "x"}, at=now))
    await store.events.insert(Event("dead_letter", tenant="b", alert=True, data={"error": "x"}, at=now))
    release = asyncio.Event()
    seen: list[str] = []

    async def transport(req: payload.Request, total_s: float) -> Answer:
        seen.append(req.url)
        if req.url.startswith("http://a.example/"):
            await release.wait()  # tenant a's receivers hang (until the test lets them answer)
        return Answer(200)

    sender = WebhookSender(store.webhooks, "n1", clock, WebhookConfig(per_tenant=4), transport=transport)
    task = asyncio.create_task(sender.run())
    try:
        async def delivered(tenant: str | None = None) -> int:
            return len([d for d in await store.webhooks.deliveries(DeliveryFilter(tenant, None, None, "delivered",
                                                                                  None, 10))])

        await wait_until_async(lambda: delivered("b"), 20, "tenant b's delivery while tenant a's hang")
        assert sorted(u.split("/")[2] for u in seen) == ["a.example"] * 4 + ["b.example"], "a holds 4 slots, no more"
        release.set()  # a's slots free one by one; its fifth delivery is claimed then, without a poll
        await wait_until_async(lambda: _ge(delivered(), 6), 20, "every delivery")
        assert len(seen) == 6
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _ge(n: Awaitable[int], at_least: int) -> bool:
    return await n >= at_least
