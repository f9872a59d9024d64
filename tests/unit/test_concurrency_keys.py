"""A job's concurrency key and limit go together (the one rule, cluster/commands/values.py), are
refused naming the field the caller typed, and the Client checks the same before sending; the
multi-tenant benchmark's weighted shares are max-min fair with the rate caps applied."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench.dispatch import jain, weighted_shares
from cronwheel.client import JobSpec
from cronwheel.client.calls import _job_request
from cronwheel.client.errors import InvalidArgument as ClientInvalidArgument
from cronwheel.cluster.commands.runs import JobSpec as ServerJob
from cronwheel.cluster.commands.runs import prepare_job
from cronwheel.cluster.commands.values import MAX_CONCURRENCY_LIMIT, concurrency_key
from cronwheel.errors import InvalidArgument

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def test_neither_is_no_key() -> None:
    assert concurrency_key(None, None) == (None, None)
    assert concurrency_key("", 0) == (None, None)


def test_a_key_and_a_limit_are_kept_stripped() -> None:
    assert concurrency_key("  customer:42 ", 2) == ("customer:42", 2)


@pytest.mark.parametrize(("key", "limit", "field"), [
    ("k", None, "concurrency_limit"), ("k", 0, "concurrency_limit"), ("k", -1, "concurrency_limit"),
    ("k", MAX_CONCURRENCY_LIMIT + 1, "concurrency_limit"), (None, 3, "concurrency_key"),
    ("x" * 201, 2, "concurrency_key"), ("a\x00b", 2, "concurrency_key"),
])
def test_a_bad_pair_names_the_field(key: str | None, limit: int | None, field: str) -> None:
    with pytest.raises(InvalidArgument) as got:
        concurrency_key(key, limit)
    assert got.value.field == field


def test_a_prepared_job_carries_its_key_to_the_insert() -> None:
    job = prepare_job(ServerJob(tenant="t", type="j", concurrency_key="c:1", concurrency_limit=3), NOW, 8)
    assert (job.concurrency_key, job.concurrency_limit) == ("c:1", 3)


class _Ctx:
    class clock:  # noqa: N801
        @staticmethod
        def now() -> datetime:
            return NOW


@pytest.mark.parametrize(("kw", "field"), [
    ({"concurrency_key": "k"}, "jobs[0].concurrency_limit"),
    ({"concurrency_limit": 2}, "jobs[0].concurrency_key"),
    ({"concurrency_key": "k", "concurrency_limit": True}, "jobs[0].concurrency_limit"),
    ({"concurrency_key": " ", "concurrency_limit": 2}, "jobs[0].concurrency_key"),
])
def test_the_client_refuses_a_bad_pair_before_sending(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ClientInvalidArgument) as got:
        _job_request(_Ctx(), "jobs[0].", JobSpec("j", **kw))  # type: ignore[arg-type]
    assert got.value.field == field


def test_the_client_sends_the_pair() -> None:
    req = _job_request(_Ctx(), "", JobSpec("j", concurrency_key="c:9", concurrency_limit=4))  # type: ignore[arg-type]
    assert (req.concurrency_key, req.concurrency_limit) == ("c:9", 4)


def test_weighted_shares_give_capped_tenants_their_cap_and_split_the_rest_by_weight() -> None:
    assert weighted_shares(100, [1, 1, 2], [None, None, None]) == [25, 25, 50]
    assert weighted_shares(100, [1, 1, 2], [10, None, None]) == [10, 30, 60]
    assert weighted_shares(100, [3, 1], [1000, None]) == [75, 25]
    assert jain([1, 1, 1]) == pytest.approx(1.0) and jain([1, 0]) == pytest.approx(0.5)
