"""Unique jobs through the public Client against real nodes (PostgreSQL, etcd, two node processes
with an auth file): unique jobs by args and by states return the existing execution and say so
(sync and async, submit and submit_many), two nodes racing make one execution, a new one is made
once the first has finished (run by a real Worker), and bad options are INVALID_ARGUMENT naming
the field with nothing stored."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from google.protobuf.duration_pb2 import Duration

from cronwheel.client import (
    AsyncClient,
    Client,
    Deduplication,
    ExecutionState,
    InvalidArgument,
    JobContext,
    JobSpec,
    Unique,
    Worker,
)
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import common_pb2, scheduler_pb2

from .api_cluster import TOKENS, Api, write_auth_file
from .helpers import ok_json, one_line_error, run_cli, wait_until
from .test_worker_sdk import serving

pytestmark = [pytest.mark.e2e]
ACME = TOKENS["acme"][0]
LATER = timedelta(hours=1)  # no worker runs these jobs: they stay SCHEDULED
BY_ARGS = Unique(by_args=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ProcessCluster, list[str]]]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        auth = str(write_auth_file(c.workdir / "auth.json"))
        nodes = [c.start_node(name, "--auth-file", auth) for name in ("n1", "n2")]
        for i, n in enumerate(nodes):
            wait_until(lambda n=n: any(" ready (" in ln for ln in n.lines), 30, f"node {i + 1} to be ready")
        yield c, [n.address for n in nodes]


def kind() -> str:
    return f"refresh-{uuid.uuid4().hex[:8]}"


def stored(c: ProcessCluster, job_type: str) -> int:
    return int(c.sql("SELECT count(*) FROM executions WHERE type = %s", job_type)[0][0])


def test_unique_jobs_by_args_return_the_existing_execution(cluster: tuple[ProcessCluster, list[str]]) -> None:
    c, addresses = cluster
    t = kind()
    with Client(addresses[0], token=ACME) as cw:
        first = cw.submit(t, {"customer": 42}, delay=LATER, unique=BY_ARGS)
        again = cw.submit(t, {"customer": 42}, delay=LATER, unique=BY_ARGS)
        other = cw.submit(t, {"customer": 43}, delay=LATER, unique=BY_ARGS)
        keyed = cw.submit(t, {"customer": 42, "why": "x"}, delay=LATER, unique=Unique(args_keys=["customer"]))
        keyed_again = cw.submit(t, {"customer": 42, "why": "y"}, delay=LATER, unique=Unique(args_keys=["customer"]))
    assert (first.deduplicated, first.deduplicated_by) == (False, None)
    assert (again.id, again.deduplicated, again.deduplicated_by) == (first.id, True, Deduplication.UNIQUE)
    assert again.state == ExecutionState.SCHEDULED and again.payload == {"customer": 42}
    assert not other.deduplicated and other.id != first.id
    # what is compared is the args' value, however chosen: {"customer": 42} both times
    assert (keyed.id, keyed.deduplicated_by) == (first.id, Deduplication.UNIQUE)
    assert (keyed_again.id, keyed_again.deduplicated_by) == (first.id, Deduplication.UNIQUE)
    assert stored(c, t) == 2


def test_unique_jobs_by_states_a_new_one_once_the_first_has_run(cluster: tuple[ProcessCluster, list[str]]) -> None:
    _, addresses = cluster
    t = kind()
    w = Worker(addresses[1], token=ACME, worker_id="w-unique", concurrency=4)
    running, release = threading.Event(), threading.Event()

    @w.job(t)
    async def refresh(ctx: JobContext) -> dict[str, bool]:
        running.set()
        assert await asyncio.to_thread(release.wait, 30)
        return {"ok": True}

    with Client(addresses, token=ACME) as cw, serving(w):
        first = cw.submit(t, {"customer": 42}, unique=BY_ARGS)
        assert running.wait(30)
        assert cw.get_execution(first.id).state == ExecutionState.RUNNING
        while_running = cw.submit(t, {"customer": 42}, unique=BY_ARGS)
        assert (while_running.id, while_running.deduplicated_by) == (first.id, Deduplication.UNIQUE)
        release.set()
        assert cw.wait(first.id, timeout=30).state == ExecutionState.SUCCEEDED
        after = cw.submit(t, {"customer": 42}, unique=BY_ARGS)
        assert not after.deduplicated and after.id != first.id
        assert cw.wait(after.id, timeout=30).state == ExecutionState.SUCCEEDED
        # with succeeded among the states, a finished one keeps a second out for its period
        hourly = Unique(by_args=True, period=timedelta(hours=1),
                        states=["scheduled", "queued", "running", "retry_scheduled", "succeeded"])
        once = cw.submit(t, {"customer": 7}, unique=hourly)
        assert cw.wait(once.id, timeout=30).state == ExecutionState.SUCCEEDED
        twice = cw.submit(t, {"customer": 7}, unique=hourly)
    assert (twice.id, twice.deduplicated, twice.deduplicated_by) == (once.id, True, Deduplication.UNIQUE)
    assert twice.state == ExecutionState.SUCCEEDED


async def test_async_submits_racing_on_two_nodes_make_one_execution(cluster: tuple[ProcessCluster, list[str]]) -> None:
    c, addresses = cluster
    t = kind()
    async with AsyncClient(addresses[0], token=ACME) as a, AsyncClient(addresses[1], token=ACME) as b:
        for customer in range(3):
            got = await asyncio.gather(*(cw.submit(t, {"customer": customer}, delay=LATER, unique=BY_ARGS)
                                         for cw in (a, b) for _ in range(15)))
            assert len({x.id for x in got}) == 1
            assert sorted(x.deduplicated for x in got) == [False] + [True] * 29
    assert stored(c, t) == 3


async def test_async_submit_many_dedupes_per_item(cluster: tuple[ProcessCluster, list[str]]) -> None:
    c, addresses = cluster
    t = kind()
    async with AsyncClient(addresses, token=ACME) as cw:
        held = await cw.submit(t, {"customer": 1}, delay=LATER, unique=BY_ARGS)
        got = await cw.submit_many([JobSpec(t, {"customer": n}, delay=LATER, unique=BY_ARGS) for n in (1, 2, 2, 3)]
                                   + [JobSpec(t, {"customer": 1}, delay=LATER)])
    assert [(x.deduplicated, x.deduplicated_by) for x in got] == [
        (True, Deduplication.UNIQUE), (False, None), (True, Deduplication.UNIQUE), (False, None), (False, None)]
    assert got[0].execution_id == held.id and got[2].execution_id == got[1].execution_id
    assert stored(c, t) == 4


def test_an_idempotency_key_still_wins_and_says_so(cluster: tuple[ProcessCluster, list[str]]) -> None:
    _, addresses = cluster
    t = kind()
    with Client(addresses[0], token=ACME) as cw:
        first = cw.submit(t, {"customer": 5}, delay=LATER, unique=BY_ARGS, idempotency_key=f"{t}-k")
        again = cw.submit(t, {"customer": 6}, delay=LATER, unique=BY_ARGS, idempotency_key=f"{t}-k")
    assert (again.id, again.deduplicated_by) == (first.id, Deduplication.IDEMPOTENCY_KEY)


def test_bad_unique_options_are_invalid_argument_naming_the_field(cluster: tuple[ProcessCluster, list[str]]) -> None:
    c, addresses = cluster
    t = kind()
    api = Api(addresses[0], "acme")
    S, E = scheduler_pb2, common_pb2.ExecutionState
    ok = S.SubmitJobRequest(type=t, unique=S.UniqueOptions(by_args=True))
    cases = [
        (S.UniqueOptions(states=[E.EXECUTION_STATE_QUEUED, E.EXECUTION_STATE_UNSPECIFIED]), "jobs[1].unique.states[1]"),
        (S.UniqueOptions(states=[E.EXECUTION_STATE_QUEUED, E.EXECUTION_STATE_RUNNING]), "jobs[1].unique.states"),
        (S.UniqueOptions(period=Duration(seconds=-60)), "jobs[1].unique.period"),
        (S.UniqueOptions(args_keys=[""]), "jobs[1].unique.args_keys[0]"),
    ]
    for options, field in cases:
        bad = S.SubmitJobRequest(type=t, unique=options)
        err = api.fails("SubmitJobs", S.SubmitJobsRequest(jobs=[ok, bad]))
        assert err.code.name == "INVALID_ARGUMENT" and err.details.startswith(f"{field}:"), (field, err)
    err = api.fails("SubmitJob", S.SubmitJobRequest(type=t, unique=S.UniqueOptions(period=Duration(seconds=-1))))
    assert err.code.name == "INVALID_ARGUMENT" and err.details.startswith("unique.period:"), err
    with Client(addresses[0], token=ACME) as cw:
        with pytest.raises(InvalidArgument, match=r"unique\.args_keys\[1\]"):
            cw.submit(t, {"a": 1}, unique=Unique(args_keys=["a", 42]))  # type: ignore[list-item]
        with pytest.raises(InvalidArgument, match=r"unique\.states\[0\]"):
            cw.submit(t, {"a": 1}, unique=Unique(states=["done"]))
        with pytest.raises(InvalidArgument, match=r"jobs\[1\]\.unique\.period"):
            cw.submit_many([JobSpec(t, {}), JobSpec(t, {}, unique=Unique(period=-5))])
    assert stored(c, t) == 0


def test_the_cli_submits_unique_jobs_and_names_its_flags(cluster: tuple[ProcessCluster, list[str]]) -> None:
    c, addresses = cluster
    t = kind()
    base = ("job", "submit", "--type", t, "--payload", '{"customer": 42, "why": "cli"}', "--delay", "1h",
            "--address", addresses[0], "--json")
    env = {"CRONWHEEL_TOKEN": ACME}
    first = ok_json(run_cli(*base, "--unique-keys", "customer", env=env))
    again = ok_json(run_cli(*base, "--unique-keys", "customer", "--unique-states",
                            "scheduled,queued,running,retry_scheduled,succeeded", env=env))
    assert (first["deduplicated"], first["deduplicated_by"]) == (False, None)
    assert (again["id"], again["deduplicated"], again["deduplicated_by"]) == (first["id"], True, "unique")
    one_line_error(run_cli(*base, "--unique", "--unique-states", "queued,running", env=env), 2, "--unique-states")
    one_line_error(run_cli(*base, "--unique-states", "queued,bogus", env=env), 2, "--unique-states")
    assert stored(c, t) == 1
