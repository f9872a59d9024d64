"""Queues and capabilities, the pure rules (cluster/commands/lanes.py): names, canonical sets,
what a lease call may take. The claim's use of them is tests/integration/test_claim_lanes.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronwheel.cluster.commands.lanes import (
    DEFAULT_LANES,
    DEFAULT_QUEUE,
    MAX_CAPABILITIES,
    capabilities,
    capability_items,
    capability_set,
    queue_name,
    worker_lanes,
)
from cronwheel.cluster.commands.runs import JobSpec, prepare_job
from cronwheel.errors import InvalidArgument

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)


def test_a_job_without_a_queue_waits_in_default_and_requires_nothing() -> None:
    job = prepare_job(JobSpec(tenant="t", type="j"), NOW, 8)
    assert (job.queue, job.required_capabilities) == (DEFAULT_QUEUE, "")


def test_required_capabilities_are_stored_sorted_and_once() -> None:
    job = prepare_job(JobSpec(tenant="t", type="j", queue="long",
                              required_capabilities=("region=eu", "gpu=a100", "region=eu")), NOW, 8)
    assert (job.queue, job.required_capabilities) == ("long", "gpu=a100,region=eu")
    assert capability_items(job.required_capabilities) == ("gpu=a100", "region=eu")
    assert capability_items("") == ()


@pytest.mark.parametrize(("kw", "field"), [
    ({"queue": "has space"}, "queue"), ({"queue": "x" * 101}, "queue"),
    ({"required_capabilities": ("gpu",)}, "required_capabilities[0]"),
    ({"required_capabilities": ("gpu=a100", "=x")}, "required_capabilities[1]"),
    ({"required_capabilities": ("a=b,c=d",)}, "required_capabilities[0]"),
    ({"required_capabilities": tuple(f"k{i}=v" for i in range(MAX_CAPABILITIES + 1))}, "required_capabilities"),
])
def test_a_bad_queue_or_capability_is_refused_naming_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        prepare_job(JobSpec(tenant="t", type="j", **kw), NOW, 8)  # type: ignore[arg-type]
    assert e.value.field == field


def test_a_worker_naming_nothing_takes_the_default_lanes() -> None:
    assert worker_lanes([], {}, []) == DEFAULT_LANES
    assert DEFAULT_LANES.queues == (DEFAULT_QUEUE,) and DEFAULT_LANES.capabilities == ()


def test_worker_lanes_are_canonical_so_equal_calls_share_a_poll_scope() -> None:
    a = worker_lanes(["long", "default"], {"long": 2}, ["region=eu", "gpu=a100"])
    b = worker_lanes(["default", "long", "long"], {"long": 2}, ["gpu=a100", "region=eu"])
    assert a == b and a.key == b.key
    assert a.slots == (("long", 2),)


@pytest.mark.parametrize(("queues", "slots", "caps", "field"), [
    (["default"], {"long": 2}, [], "queue_slots"),
    (["long"], {"long": 0}, [], "queue_slots"),
    (["bad name"], {}, [], "queues[0]"),
    ([], {}, ["gpu"], "capabilities[0]"),
])
def test_bad_worker_lanes_are_refused_naming_the_field(queues: list[str], slots: dict[str, int],
                                                       caps: list[str], field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        worker_lanes(queues, slots, caps)
    assert e.value.field == field


def test_queue_name_and_capability_set() -> None:
    assert queue_name("queue", None) == DEFAULT_QUEUE
    assert queue_name("queue", "gpu.long:eu-1") == "gpu.long:eu-1"
    assert capability_set(capabilities("c", ["b=2", "a=1"])) == "a=1,b=2"


def test_the_worker_cli_reads_queue_flags_as_names_and_slots() -> None:
    from cronwheel.cli.commands import _worker_queues

    assert _worker_queues(["long:2", "default", "eu:batch"]) == {"long": 2, "default": None, "eu:batch": None}
    from cronwheel.client.worker import split_queues  # what cmd_worker sets on the Worker

    assert split_queues(_worker_queues(["long:2", "default"])) == (["default", "long"], {"long": 2})
    for bad in (["long:0"], [":2"], ["long", "long:2"]):
        with pytest.raises(InvalidArgument) as e:
            _worker_queues(bad)
        assert e.value.field == "--queue"


def test_slots_name_their_queue_as_the_queues_do_and_each_queue_once() -> None:
    """"" names DEFAULT_QUEUE in slots as in queues: the claim matches slots to queues by name,
    so a slot kept under "" capped nothing; and one queue's slots given twice are refused."""
    assert worker_lanes([], {"": 2}, []).slots == ((DEFAULT_QUEUE, 2),)
    with pytest.raises(InvalidArgument) as e:
        worker_lanes([], {"": 2, DEFAULT_QUEUE: 3}, [])
    assert e.value.field == "queue_slots"


def test_a_tenants_queue_limits_are_checked_as_the_tenants_own_naming_the_field() -> None:
    from cronwheel.cluster.commands.tenants import DEFAULT_WEIGHT, MAX_CONCURRENCY, MAX_WEIGHT, tenant_queue

    assert tenant_queue("long", 0, 0) == ("long", None, DEFAULT_WEIGHT)  # 0: unset, as on CreateTenant
    assert tenant_queue("long", MAX_CONCURRENCY, MAX_WEIGHT) == ("long", MAX_CONCURRENCY, MAX_WEIGHT)
    for args, field in ((("", 1, 1), "queue.name"), (("a b", 1, 1), "queue.name"),
                        (("long", -1, 1), "queue.max_concurrency"),
                        (("long", MAX_CONCURRENCY + 1, 1), "queue.max_concurrency"),
                        (("long", 1, -1), "queue.weight"), (("long", 1, MAX_WEIGHT + 1), "queue.weight"),
                        (("long", True, 1), "queue.max_concurrency")):
        with pytest.raises(InvalidArgument) as e:
            tenant_queue(*args)  # type: ignore[arg-type]
        assert e.value.field == field, args
