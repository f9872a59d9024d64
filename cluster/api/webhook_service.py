"""WebhookService: webhook subscriptions and their deliveries (admin.proto).

Tenancy as in the rest of the API: a tenant caller's webhooks are its tenant's (it names no
other), another tenant's webhook is NOT_FOUND (`commands.values.visible`); an admin may create
a webhook without a tenant, which receives every tenant's events and the cluster's.
A URL the node's egress policy refuses is INVALID_ARGUMENT naming `url`; an owner past
`subscriptions.MAX_WEBHOOKS_PER_TENANT` webhooks gets RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc

from cronwheel.clock import Clock
from cronwheel.cluster.api import convert as cv
from cronwheel.cluster.api import pages
from cronwheel.cluster.api.auth import current_caller
from cronwheel.cluster.commands.values import text, visible
from cronwheel.cluster.webhooks import subscriptions
from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument, NotFound
from cronwheel.storage import PgStore
from cronwheel.storage.webhooks import DeliveryFilter, NewWebhook
from cronwheel.v1 import admin_pb2

Ctx = grpc.aio.ServicerContext[Any, Any]
STATES = {admin_pb2.DELIVERY_STATE_PENDING: "pending", admin_pb2.DELIVERY_STATE_DELIVERED: "delivered",
          admin_pb2.DELIVERY_STATE_FAILED: "failed"}
STATE_NUMBERS = {v: k for k, v in STATES.items()}


def webhook_out(r: dict[str, Any]) -> admin_pb2.Webhook:
    w = admin_pb2.Webhook(id=str(r["id"]), tenant=r["tenant"] or "", url=r["url"], kinds=list(r["kinds"]),
                          schedule_id=str(r["schedule_id"] or ""), description=r["description"],
                          created_by=r["created_by"] or "")
    w.created_at.CopyFrom(cv.ts(r["created_at"]))
    return w


def delivery_out(r: dict[str, Any]) -> admin_pb2.Delivery:
    d = admin_pb2.Delivery(id=str(r["id"]), webhook_id=str(r["webhook_id"]), event_id=r["event_id"],
                           kind=r["kind"] or "", state=STATE_NUMBERS[r["state"]],  # type: ignore[arg-type]
                           attempts=r["attempts"], node=r["claimed_by"] or "", last_status=r["last_status"] or 0,
                           last_error=r["last_error"] or "")
    d.next_attempt_at.CopyFrom(cv.ts(r["next_attempt_at"]))
    d.created_at.CopyFrom(cv.ts(r["created_at"]))
    if r["finished_at"] is not None:
        d.finished_at.CopyFrom(cv.ts(r["finished_at"]))
    return d


class WebhookService:
    def __init__(self, store: PgStore, clock: Clock, egress: EgressPolicy) -> None:
        self.store = store
        self.clock = clock
        self.egress = egress

    async def CreateWebhook(self, request: admin_pb2.CreateWebhookRequest, context: Ctx  # noqa: N802
                            ) -> admin_pb2.CreateWebhookResponse:
        caller = current_caller()
        tenant = caller.filter(request.tenant, "tenant")
        url = subscriptions.url(request.url, self.egress)
        kinds = subscriptions.kinds(request.kinds, tenant)
        secret = subscriptions.secret(request.secret)
        description = text("description", request.description, required=False)
        schedule_id = cv.uuid_of(request.schedule_id, "schedule_id", required=False)
        if schedule_id is not None:
            visible(await self.store.schedules.get(schedule_id), tenant, "schedule", schedule_id)
        row = await self.store.webhooks.create(NewWebhook(
            id=uuid.uuid4(), tenant=tenant, url=url, secret=secret, kinds=kinds, schedule_id=schedule_id,
            description=description, actor=caller.name, now=self.clock.now(),
            cap=subscriptions.MAX_WEBHOOKS_PER_TENANT))
        # A secret the caller gave is never echoed (no answer carries a secret the caller did not
        # need to learn); a generated one is shown this once, or nobody could verify a signature.
        return admin_pb2.CreateWebhookResponse(webhook=webhook_out(row), secret="" if request.secret else secret)

    async def ListWebhooks(self, request: admin_pb2.ListWebhooksRequest, context: Ctx  # noqa: N802
                           ) -> admin_pb2.ListWebhooksResponse:
        tenant = current_caller().filter(request.tenant, "tenant")
        size = cv.page_size(request.page_size)
        filters = {"tenant": tenant}
        after = pages.one_cursor(pages.decode(request.page_token, "webhooks", filters), uuid.UUID)
        page, token = pages.one_key_page(await self.store.webhooks.list(tenant, after, size + 1), size, "webhooks",
                                         filters)
        return admin_pb2.ListWebhooksResponse(webhooks=[webhook_out(r) for r in page], next_page_token=token)

    async def DeleteWebhook(self, request: admin_pb2.DeleteWebhookRequest, context: Ctx  # noqa: N802
                            ) -> admin_pb2.DeleteWebhookResponse:
        wid = cv.req_uuid(request.webhook_id, "webhook_id")
        visible(await self.store.webhooks.get(wid), current_caller().scope(), "webhook", wid)
        dropped = await self.store.webhooks.delete(wid)
        if dropped is None:  # deleted meanwhile
            raise NotFound("webhook", wid)
        return admin_pb2.DeleteWebhookResponse(dropped_pending=dropped)

    async def ListDeliveries(self, request: admin_pb2.ListDeliveriesRequest, context: Ctx  # noqa: N802
                             ) -> admin_pb2.ListDeliveriesResponse:
        caller = current_caller()
        tenant = caller.filter(request.tenant, "tenant")
        wid = cv.uuid_of(request.webhook_id, "webhook_id", required=False)
        if wid is not None:
            visible(await self.store.webhooks.get(wid), caller.scope(), "webhook", wid)
        if request.event_id < 0:
            raise InvalidArgument("event_id", f"must be >= 0, got {request.event_id}")
        state = cv.enum(STATES, request.state, "state", default="") or None
        size = cv.page_size(request.page_size)
        filters = {"tenant": tenant, "webhook_id": str(wid or ""), "event_id": request.event_id, "state": state}
        before_at, before_id = pages.time_id_cursor(pages.decode(request.page_token, "deliveries", filters))
        rows = await self.store.webhooks.deliveries(DeliveryFilter(
            tenant=tenant, webhook_id=wid, event_id=request.event_id or None, state=state,
            before=(before_at, before_id) if before_at is not None and before_id is not None else None,
            limit=size + 1))
        page, token = pages.time_id_page(rows, size, "deliveries", filters, "created_at")
        return admin_pb2.ListDeliveriesResponse(deliveries=[delivery_out(r) for r in page], next_page_token=token)
