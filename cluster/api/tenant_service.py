"""TenantService: tenants' limits and quotas, and the API-made bearer tokens (admin.proto).

Admin only: the auth interceptor refuses tenant tokens on every RPC here (`auth.admin_only`),
before the servicer runs. Validation is cluster/commands/tenants.py (nothing stored when it
fails); the storage ports are storage/tenants.py and storage/tokens.py.

Tokens: the secret is made here (cronwheel/token_format.py), returned once and stored
only as its SHA-256. After a create or a revoke this node re-reads the token table at once
(`TokenCache.refresh`); the other nodes do within their refresh interval.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc

from cronwheel.clock import Clock
from cronwheel.cluster.api import convert as cv
from cronwheel.cluster.api import pages
from cronwheel.cluster.api.auth import current_caller
from cronwheel.cluster.api.tokens import TokenCache
from cronwheel.cluster.commands import tenants as cmd
from cronwheel.cluster.commands.values import text
from cronwheel.errors import NotFound
from cronwheel.storage import PgStore
from cronwheel.storage.tenants import TenantFields
from cronwheel.storage.tokens import NewToken
from cronwheel.token_format import hash_token, new_secret
from cronwheel.v1 import admin_pb2

Ctx = grpc.aio.ServicerContext[Any, Any]
_OPTIONAL = ("rate_per_s", "burst", "max_schedules", "max_executions_per_day")


def tenant_out(r: dict[str, Any]) -> admin_pb2.Tenant:
    t = admin_pb2.Tenant(id=r["id"], max_concurrency=r["max_concurrency"], weight=r["weight"])
    for name in _OPTIONAL:
        if r[name] is not None:
            setattr(t, name, r[name])
    t.created_at.CopyFrom(cv.ts(r["created_at"]))
    t.egress_rules.extend(r.get("egress_rules") or ())
    return t


def queue_out(r: dict[str, Any]) -> admin_pb2.TenantQueue:
    return admin_pb2.TenantQueue(name=r["queue"], max_concurrency=r["max_concurrency"] or 0, weight=r["weight"])


def token_out(r: dict[str, Any]) -> admin_pb2.Token:
    t = admin_pb2.Token(id=str(r["id"]), name=r["name"], tenant=r["tenant"] or "", admin=r["admin"],
                        created_by=r["created_by"] or "")
    t.created_at.CopyFrom(cv.ts(r["created_at"]))
    if r["expires_at"] is not None:
        t.expires_at.CopyFrom(cv.ts(r["expires_at"]))
    if r["revoked_at"] is not None:
        t.revoked_at.CopyFrom(cv.ts(r["revoked_at"]))
    return t


def _value(msg: admin_pb2.Tenant, name: str) -> Any:
    """A field of a Tenant message as a column value (an unset optional field: None)."""
    if name in _OPTIONAL:
        return getattr(msg, name) if msg.HasField(name) else None
    if name == "egress_rules":
        return tuple(msg.egress_rules) or None
    return getattr(msg, name)


class TenantService:
    def __init__(self, store: PgStore, clock: Clock, tokens: TokenCache | None) -> None:
        self.store = store
        self.clock = clock
        self.tokens = tokens

    async def CreateTenant(self, request: admin_pb2.CreateTenantRequest, context: Ctx  # noqa: N802
                           ) -> admin_pb2.CreateTenantResponse:
        t = request.tenant
        fields = cmd.new_tenant(t.id, **{n: _value(t, n) for n in cmd.SETTABLE})
        row = await self.store.tenants.create(fields, self.clock.now(), current_caller().name)
        return admin_pb2.CreateTenantResponse(tenant=tenant_out(row))

    async def UpdateTenant(self, request: admin_pb2.UpdateTenantRequest, context: Ctx  # noqa: N802
                           ) -> admin_pb2.UpdateTenantResponse:
        tenant_id = text("tenant.id", request.tenant.id)
        names = cmd.mask(list(request.update_mask.paths))
        changes = {n: _value(request.tenant, n) for n in names}

        def change(current: TenantFields) -> TenantFields:
            return cmd.merged(current, changes)

        row = await self.store.tenants.update(tenant_id, change, self.clock.now(), current_caller().name)
        return admin_pb2.UpdateTenantResponse(tenant=tenant_out(row))

    async def GetTenant(self, request: admin_pb2.GetTenantRequest, context: Ctx  # noqa: N802
                        ) -> admin_pb2.GetTenantResponse:
        tenant_id = text("tenant_id", request.tenant_id)
        row = await self.store.tenants.get(tenant_id)
        if row is None:
            raise NotFound("tenant", tenant_id)
        t = tenant_out(row)
        t.queues.extend(queue_out(r) for r in await self.store.tenants.queues(tenant_id))
        return admin_pb2.GetTenantResponse(tenant=t)

    async def SetTenantQueue(self, request: admin_pb2.SetTenantQueueRequest, context: Ctx  # noqa: N802
                             ) -> admin_pb2.SetTenantQueueResponse:
        tenant_id = text("tenant_id", request.tenant_id)
        name, limit, weight = cmd.tenant_queue(request.queue.name, request.queue.max_concurrency,
                                               request.queue.weight)
        await self.store.tenants.set_queue(tenant_id, name, limit, weight, self.clock.now(), current_caller().name)
        return admin_pb2.SetTenantQueueResponse(
            queues=[queue_out(r) for r in await self.store.tenants.queues(tenant_id)])

    async def ListTenants(self, request: admin_pb2.ListTenantsRequest, context: Ctx  # noqa: N802
                          ) -> admin_pb2.ListTenantsResponse:
        size = cv.page_size(request.page_size)
        after = pages.one_cursor(pages.decode(request.page_token, "tenants", {}), str)
        page, token = pages.one_key_page(await self.store.tenants.list(after, size + 1), size, "tenants", {})
        return admin_pb2.ListTenantsResponse(tenants=[tenant_out(r) for r in page], next_page_token=token)

    async def CreateToken(self, request: admin_pb2.CreateTokenRequest, context: Ctx  # noqa: N802
                          ) -> admin_pb2.CreateTokenResponse:
        name = text("name", request.name)
        tenant = text("tenant", request.tenant, required=not request.admin) or None
        now = self.clock.now()
        expires_at = cmd.token_expiry(cv.opt_dt(request, "expires_at", "expires_at"), now)
        secret = new_secret()
        row = await self.store.tokens.create(NewToken(
            id=uuid.uuid4(), name=name, tenant=tenant, admin=request.admin, sha256=hash_token(secret),
            expires_at=expires_at, actor=current_caller().name, now=now))
        await self._refresh()
        return admin_pb2.CreateTokenResponse(token=token_out(row), secret=secret)

    async def ListTokens(self, request: admin_pb2.ListTokensRequest, context: Ctx  # noqa: N802
                         ) -> admin_pb2.ListTokensResponse:
        tenant = text("tenant", request.tenant, required=False) or None
        size = cv.page_size(request.page_size)
        filters = {"tenant": tenant, "include_revoked": request.include_revoked}
        after = pages.one_cursor(pages.decode(request.page_token, "tokens", filters), uuid.UUID)
        rows = await self.store.tokens.list(tenant, request.include_revoked, after, size + 1)
        page, token = pages.one_key_page(rows, size, "tokens", filters)
        return admin_pb2.ListTokensResponse(tokens=[token_out(r) for r in page], next_page_token=token)

    async def RevokeToken(self, request: admin_pb2.RevokeTokenRequest, context: Ctx  # noqa: N802
                          ) -> admin_pb2.RevokeTokenResponse:
        token_id = cv.req_uuid(request.token_id, "token_id")
        row = await self.store.tokens.revoke(token_id, self.clock.now(), current_caller().name)
        if row is None:
            raise NotFound("token", token_id)
        await self._refresh()
        return admin_pb2.RevokeTokenResponse(token=token_out(row))

    async def _refresh(self) -> None:
        if self.tokens is not None:
            await self.tokens.refresh()
