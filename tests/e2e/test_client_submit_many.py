"""Client.submit_many and AsyncClient.submit_many against a real node (PostgreSQL, etcd, a node
process with an auth file), one cluster for the module: 25,000 jobs are three SubmitJobs calls
and every job is stored once; a job the client refuses (at index 17,777) stores nothing at all;
a job only the server refuses fails its call alone (the 10,000 jobs of the first call stay
stored, nothing of the second or third call is) and the error names the caller's index; a call
retried after a lost response creates each job once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from cronwheel.client import AsyncClient, Client, ExecutionState, InvalidArgument, JobSpec
from cronwheel.devtools.harness import ProcessCluster

from .api_cluster import TOKENS, api_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ACME = TOKENS["acme"][0]
LATER = timedelta(hours=1)  # no worker runs these jobs: they stay SCHEDULED


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster(partitions=4) as got:
        yield got


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def stored(c: ProcessCluster, job_type: str) -> list[tuple[str, str]]:
    """(id, idempotency_key) of every execution of this job type."""
    return [(str(i), k) for i, k in c.sql("SELECT id, idempotency_key FROM executions WHERE type = %s", job_type)]


class Counting(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Counts SubmitJobs calls; with `drop_first`, loses the first response after the server
    answered (the jobs are stored), as a dropped connection would."""

    def __init__(self, drop_first: bool = False) -> None:
        self.drop_first = drop_first
        self.sent = 0

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        if details.method.endswith("/SubmitJobs"):
            self.sent += 1
            if self.drop_first and self.sent == 1:
                outcome.result()
                raise Dropped()
        return outcome


class Dropped(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "response dropped by the test"


class AioDropFirst(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.sent = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if method.endswith("/SubmitJobs"):
            self.sent += 1
            if self.sent == 1:
                await call
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                           details="response dropped by the test")
        return call


def test_25000_jobs_are_stored_once_each_in_order(node: tuple[ProcessCluster, str]) -> None:
    c, address = node
    job_type = unique("many")
    count = Counting()
    with Client(address, token=ACME, interceptors=[count]) as cw:
        t0 = time.monotonic()
        got = cw.submit_many([JobSpec(job_type, {"i": i}, delay=LATER) for i in range(25_000)])
        took = time.monotonic() - t0
    print(f"submit_many of 25,000 jobs: {took:.2f} s in {count.sent} calls")
    assert count.sent == 3 and len(got) == 25_000
    rows = stored(c, job_type)
    assert len(rows) == 25_000 and len({i for i, _ in rows}) == 25_000
    assert {i: key for i, key in rows} == {r.execution_id: r.idempotency_key for r in got}  # one result per job
    assert all(r.state is ExecutionState.SCHEDULED and not r.deduplicated for r in got)
    # In order: the payload of result i is job i's.
    [(payload,)] = c.sql("SELECT payload FROM executions WHERE id = %s", got[17_777].execution_id)
    assert payload == {"i": 17_777}


def test_a_job_the_client_refuses_stores_nothing_at_all(node: tuple[ProcessCluster, str]) -> None:
    c, address = node
    job_type = unique("refused")
    jobs = [JobSpec(job_type, delay=LATER) for _ in range(25_000)]
    jobs[17_777] = JobSpec("", delay=LATER)
    count = Counting()
    with Client(address, token=ACME, interceptors=[count]) as cw, pytest.raises(InvalidArgument) as bad:
        cw.submit_many(jobs)
    assert bad.value.field == "jobs[17777].type"
    assert count.sent == 0 and stored(c, job_type) == []


def test_a_job_only_the_server_refuses_fails_its_call_alone_naming_the_callers_index(
        node: tuple[ProcessCluster, str]) -> None:
    c, address = node
    job_type = unique("late")
    jobs = [JobSpec(job_type, delay=LATER, idempotency_key=f"{job_type}-{i}") for i in range(25_000)]
    jobs[17_777] = JobSpec(job_type, run_at=datetime.now(UTC) + timedelta(days=11 * 366))  # the server's rule
    count = Counting()
    with Client(address, token=ACME, interceptors=[count]) as cw:
        with pytest.raises(InvalidArgument) as bad:
            cw.submit_many(jobs)
        assert bad.value.field == "jobs[17777].run_at"  # the second call's jobs[7777]
        assert count.sent == 2, "the third call is not sent"
        first = bad.value.submitted
        assert len(first) == 10_000
        # Exactly the first call's jobs are stored: nothing of the second call, nothing of the third.
        assert sorted(k for _, k in stored(c, job_type)) == sorted(j.idempotency_key for j in jobs[:10_000])

        jobs[17_777] = JobSpec(job_type, delay=LATER, idempotency_key=f"{job_type}-17777")
        again = cw.submit_many(jobs)  # the same keys: the rest is stored, once
    assert [r.deduplicated for r in again] == [True] * 10_000 + [False] * 15_000
    assert [r.execution_id for r in again[:10_000]] == [r.execution_id for r in first]
    assert len(stored(c, job_type)) == 25_000


def test_a_retried_call_creates_each_job_once(node: tuple[ProcessCluster, str]) -> None:
    c, address = node
    job_type = unique("retried")
    drop = Counting(drop_first=True)
    with Client(address, token=ACME, interceptors=[drop], backoff_s=0.01) as cw:
        got = cw.submit_many([JobSpec(job_type, {"i": i}, delay=LATER) for i in range(15_000)])  # no keys given
    assert drop.sent == 3, "the first call sent twice, the second once"
    assert [r.deduplicated for r in got] == [True] * 10_000 + [False] * 5_000
    rows = stored(c, job_type)
    assert len(rows) == 15_000 and {i for i, _ in rows} == {r.execution_id for r in got}


async def test_async_submit_many_splits_retries_and_names_the_callers_index(
        node: tuple[ProcessCluster, str]) -> None:
    c, address = node
    job_type = unique("aio-many")
    drop = AioDropFirst()
    async with AsyncClient(address, token=ACME, interceptors=[drop], backoff_s=0.01) as cw:
        got = await cw.submit_many([{"type": job_type, "payload": {"i": i}, "delay": LATER} for i in range(12_000)])
        assert drop.sent == 3 and [r.deduplicated for r in got] == [True] * 10_000 + [False] * 2_000
        rows = stored(c, job_type)
        assert len(rows) == 12_000 and {i for i, _ in rows} == {r.execution_id for r in got}

        late = unique("aio-late")
        jobs = [JobSpec(late, delay=LATER) for _ in range(12_000)]
        jobs[10_005] = JobSpec(late, run_at=datetime.now(UTC) + timedelta(days=11 * 366))
        with pytest.raises(InvalidArgument) as bad:
            await cw.submit_many(jobs)
        assert bad.value.field == "jobs[10005].run_at" and len(bad.value.submitted) == 10_000
        assert len(stored(c, late)) == 10_000

        jobs[10_005] = JobSpec("", delay=LATER)
        with pytest.raises(InvalidArgument) as local:
            await cw.submit_many(jobs)
        assert local.value.field == "jobs[10005].type" and drop.sent == 5  # nothing sent this time
        assert await cw.submit_many([]) == []
