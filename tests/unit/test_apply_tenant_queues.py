"""The apply file's tenants[].queues (client/apply_tenants.py) against a MockTransport: which
queues differ, what SetTenantQueue is sent, and the spec errors naming the key. The server's
side is tests/e2e/test_queues.py."""

from __future__ import annotations

from typing import Any

import pytest

from cronwheel.client import Client, TenantSpecError
from cronwheel.client.testing import MockTransport, Request
from cronwheel.v1 import admin_pb2


def _client(sent: list[Any], queues: list[admin_pb2.TenantQueue]) -> Client:
    tenant = admin_pb2.Tenant(id="acme", max_concurrency=1000, weight=1)

    def get(request: Request) -> Any:
        full = admin_pb2.Tenant()
        full.CopyFrom(tenant)
        full.queues.extend(queues)
        return admin_pb2.GetTenantResponse(tenant=full)

    def set_queue(request: Request) -> Any:
        sent.append(request.message)
        return admin_pb2.SetTenantQueueResponse(queues=[request.message.queue])

    return Client(transport=MockTransport({
        "ListTenants": admin_pb2.ListTenantsResponse(tenants=[tenant]), "GetTenant": get,
        "SetTenantQueue": set_queue}))


def test_apply_sets_only_the_queues_whose_limits_differ() -> None:
    sent: list[Any] = []
    cw = _client(sent, [admin_pb2.TenantQueue(name="long", max_concurrency=2, weight=1)])
    plan = cw.apply_tenants([{"id": "acme", "queues": {"long": {"max_concurrency": 2},
                                                       "gpu": {"max_concurrency": None, "weight": 3}}}])
    assert [(c.field, c.old, c.new) for c in plan.items[0].changes] == [("queues.gpu", None, (None, 3))]
    assert [(m.tenant_id, m.queue.name, m.queue.max_concurrency, m.queue.weight) for m in sent] == \
        [("acme", "gpu", 0, 3)]
    sent.clear()
    again = cw.apply_tenants([{"id": "acme", "queues": {"long": {"max_concurrency": 2}}}], dry_run=True)
    assert again.items[0].action == "unchanged" and sent == []


@pytest.mark.parametrize(("queues", "key"), [
    ([], "queues"), ({"long": 2}, "queues.long"), ({"long": {"slots": 2}}, "queues.long.slots"),
    ({"long": {"max_concurrency": 0}}, "queues.long.max_concurrency"),
    ({"long": {"weight": "3"}}, "queues.long.weight"),
    ({"long": {"weight": 2**31}}, "queues.long.weight"),  # as set_tenant_queue refuses it, before any change
])
def test_a_bad_queue_spec_is_refused_naming_the_key(queues: Any, key: str) -> None:
    with pytest.raises(TenantSpecError) as e:
        _client([], []).apply_tenants([{"id": "acme", "queues": queues}])
    assert e.value.field == f"tenants[0].{key}"
