"""ListSchedules' name search and order (name_contains, order_by), against a real node: what the
console's Schedules page pages through. Tenancy still applies; a page token belongs to its order
and filters; the typed text's % and _ are literal, not wildcards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cronwheel.client import Client
from cronwheel.v1 import scheduler_pb2 as S
from tests.e2e.api_cluster import TOKENS, Api, api_cluster

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    with api_cluster(partitions=4) as (_, address):
        yield address


def test_name_contains_ignores_case_and_order_by_name_pages_by_name(node: str) -> None:
    tag = uuid.uuid4().hex[:6]
    acme = Api(node, "acme")
    names = [f"Zed-{tag}", f"alpha-{tag}", f"Mid-{tag}", f"beta-{tag}", "unrelated-" + tag[::-1]]
    for n in names:
        acme.create(name=n)
    Api(node, "globex").create(name=f"alpha-{tag}-globex")
    with Client(node, token=TOKENS["acme"][0]) as cw:
        got = [s.name for s in cw.list_schedules(name_contains=tag.upper(), order_by="name", page_size=2)]
        assert got == sorted(names[:4])  # 2 pages of 2 by (name, id); globex's is not visible
        first = cw.schedules_page(name_contains=tag, page_size=3)
        assert [s.name for s in first.items] == names[:3] and first.next_page_token  # creation order
        rest = cw.schedules_page(name_contains=tag, page_size=3, page_token=first.next_page_token)
        assert [s.name for s in rest.items] == [names[3]] and rest.next_page_token == ""


def test_wildcards_in_the_typed_text_are_literal(node: str) -> None:
    tag = uuid.uuid4().hex[:6]
    acme = Api(node, "acme")
    acme.create(name=f"100%-{tag}")
    acme.create(name=f"100x-{tag}")
    acme.create(name=f"a_b-{tag}")
    acme.create(name=f"axb-{tag}")
    with Client(node, token=TOKENS["acme"][0]) as cw:
        assert [s.name for s in cw.list_schedules(name_contains=f"100%-{tag}")] == [f"100%-{tag}"]
        assert [s.name for s in cw.list_schedules(name_contains=f"a_b-{tag}")] == [f"a_b-{tag}"]


def test_a_bad_order_or_a_token_of_another_order_is_invalid_argument(node: str) -> None:
    acme = Api(node, "acme")
    for i in range(3):
        acme.create(name=f"tok-{uuid.uuid4().hex[:6]}-{i}")
    bad = acme.fails("ListSchedules", S.ListSchedulesRequest(order_by="size"))
    assert bad.code == grpc.StatusCode.INVALID_ARGUMENT and bad.details.startswith("order_by:")
    token: Any = acme.call("ListSchedules", S.ListSchedulesRequest(page_size=1)).next_page_token
    other = acme.fails("ListSchedules", S.ListSchedulesRequest(page_size=1, order_by="name", page_token=token))
    assert other.code == grpc.StatusCode.INVALID_ARGUMENT and other.details.startswith("page_token:")
    by_name = acme.call("ListSchedules", S.ListSchedulesRequest(page_size=1, order_by="name")).next_page_token
    changed = acme.fails("ListSchedules", S.ListSchedulesRequest(page_size=1, order_by="name", page_token=by_name,
                                                                  name_contains="tok"))
    assert changed.code == grpc.StatusCode.INVALID_ARGUMENT
