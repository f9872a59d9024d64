"""SubmitJobs and group-committed SubmitJob through a real node's gRPC API."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import grpc
import psycopg
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import common_pb2, scheduler_pb2

from .api_cluster import Api, api_cluster
from .helpers import wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as c:
        yield c


def rows(c: ProcessCluster, sql: str, *args: object) -> list[tuple]:
    with psycopg.connect(c.dsn) as conn:
        return conn.execute(sql, args).fetchall()


def item(**fields: object) -> scheduler_pb2.SubmitJobRequest:
    return scheduler_pb2.SubmitJobRequest(**{"type": "job", **fields})  # type: ignore[arg-type]


def test_submit_jobs_refuses_10001_jobs_naming_jobs(cluster: tuple[ProcessCluster, str]) -> None:
    f = Api(cluster[1], "acme").fails("SubmitJobs", scheduler_pb2.SubmitJobsRequest(
        jobs=[item() for _ in range(10_001)]))
    assert f.code == grpc.StatusCode.INVALID_ARGUMENT and f.details.startswith("jobs:"), f


def test_a_bad_item_at_7777_fails_the_call_naming_it_and_stores_nothing(cluster: tuple[ProcessCluster, str]) -> None:
    c, address = cluster
    jobs = [item(idempotency_key=f"bad-call-{i}") for i in range(10_000)]
    jobs[7777] = item(type="", idempotency_key="bad-call-7777")
    f = Api(address, "acme").fails("SubmitJobs", scheduler_pb2.SubmitJobsRequest(jobs=jobs))
    assert f.code == grpc.StatusCode.INVALID_ARGUMENT and f.details.startswith("jobs[7777].type:"), f
    assert rows(c, "SELECT count(*) FROM executions WHERE idempotency_key LIKE 'bad-call-%%'") == [(0,)]


def test_submit_jobs_stores_each_job_once_and_dedupes_per_item(cluster: tuple[ProcessCluster, str]) -> None:
    c, address = cluster
    api = Api(address, "acme")
    got = api.call("SubmitJobs", scheduler_pb2.SubmitJobsRequest(
        jobs=[item(idempotency_key=f"bulk-{i}") for i in range(1000)])).results
    assert len(got) == 1000 and not any(r.deduplicated for r in got)
    again = api.call("SubmitJobs", scheduler_pb2.SubmitJobsRequest(
        jobs=[item(idempotency_key="bulk-5"), item(idempotency_key="bulk-new"),
              item(idempotency_key="bulk-new")])).results
    assert (again[0].execution_id, again[0].deduplicated) == (got[5].execution_id, True)
    assert not again[1].deduplicated and (again[2].execution_id, again[2].deduplicated) == (again[1].execution_id, True)
    assert rows(c, "SELECT count(*), count(DISTINCT idempotency_key) FROM executions "
                   "WHERE idempotency_key LIKE 'bulk-%%'") == [(1001, 1001)]


def test_concurrent_submits_each_get_their_own_answer(cluster: tuple[ProcessCluster, str]) -> None:
    c, address = cluster
    api = Api(address, "acme")
    api.submit(idempotency_key="gc-taken")
    reqs = [item(idempotency_key=f"gc-{i}") for i in range(100)]
    reqs[13] = item(type="", idempotency_key="gc-13")  # invalid
    reqs[42] = item(idempotency_key="gc-taken")  # repeats a key

    def one(r: scheduler_pb2.SubmitJobRequest) -> object:
        try:
            return api.call("SubmitJob", r)
        except grpc.RpcError as exc:
            return exc.code()

    with ThreadPoolExecutor(32) as pool:
        got = list(pool.map(one, reqs))
    assert got[13] == grpc.StatusCode.INVALID_ARGUMENT
    assert got[42].deduplicated and got[42].execution.idempotency_key == "gc-taken"
    for i, g in enumerate(got):
        if i not in (13, 42):
            assert not g.deduplicated and g.execution.idempotency_key == f"gc-{i}", (i, g)
    assert rows(c, "SELECT count(*) FROM executions WHERE idempotency_key LIKE 'gc-%%'") == [(99,)]


def test_a_scheduled_job_fires_at_its_run_at(cluster: tuple[ProcessCluster, str]) -> None:
    """Jobs due more than QUEUED_AT_SUBMIT_WITHIN ahead are scheduled and fired by their owners
    (a second before their run_at); jobs due sooner are queued by the submit itself, claimable
    from their run_at."""
    c, address = cluster
    far, soon = Timestamp(), Timestamp()
    far.FromDatetime(datetime.now(UTC) + timedelta(seconds=11))  # past the node's 10 s window
    soon.FromDatetime(datetime.now(UTC) + timedelta(seconds=1))
    got = Api(address, "acme").call("SubmitJobs", scheduler_pb2.SubmitJobsRequest(
        jobs=[item(run_at=far) for _ in range(50)] + [item(run_at=soon) for _ in range(5)])).results
    states = [common_pb2.EXECUTION_STATE_SCHEDULED] * 50 + [common_pb2.EXECUTION_STATE_QUEUED] * 5
    assert [r.state for r in got] == states
    ids = [r.execution_id for r in got[:50]]
    wait_until(lambda: rows(c, "SELECT count(*) FROM executions WHERE id = ANY(%s::uuid[]) AND state <> 'scheduled'",
                            ids) == [(50,)], 25, "the 50 jobs to be fired")
    fired = rows(c, "SELECT count(*) FROM executions WHERE id = ANY(%s::uuid[]) AND fired_at IS NOT NULL", ids)
    assert fired == [(50,)]


def test_a_node_killed_mid_submit_loses_no_acknowledged_job() -> None:
    with api_cluster() as (c, address):
        acked: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def caller(n: int) -> None:
            api = Api(address, "acme")
            i = 0
            while not stop.is_set():
                try:
                    r = api.call("SubmitJob", item(idempotency_key=f"kill-{n}-{i}"))
                except grpc.RpcError:
                    return  # the node died
                with lock:
                    acked.append(r.execution.id)
                i += 1

        threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        wait_until(lambda: len(acked) >= 300, 30, "300 acknowledged submits")
        c.nodes["n1"].signal(signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join(30)
        stored = {str(r[0]) for r in rows(c, "SELECT id FROM executions WHERE idempotency_key LIKE 'kill-%%'")}
        assert set(acked) <= stored, f"{len(set(acked) - stored)} acknowledged jobs are missing"


def test_the_daily_quota_is_exact_under_concurrent_submits(cluster: tuple[ProcessCluster, str]) -> None:
    c, address = cluster
    with psycopg.connect(c.dsn) as conn:
        conn.execute("INSERT INTO tenants (id, max_executions_per_day) VALUES ('globex', 13) "
                     "ON CONFLICT (id) DO UPDATE SET max_executions_per_day = 13")
    api = Api(address, "globex")

    def one(i: int) -> object:
        try:
            return api.call("SubmitJob", item())
        except grpc.RpcError as exc:
            return exc.code()

    with ThreadPoolExecutor(40) as pool:
        got = list(pool.map(one, range(40)))
    refused = [g for g in got if g == grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert (len(got) - len(refused), len(refused)) == (13, 27), got
    assert rows(c, "SELECT count(*) FROM executions WHERE tenant = 'globex'") == [(13,)]
