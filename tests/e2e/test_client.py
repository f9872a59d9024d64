"""cronwheel.client.Client and AsyncClient against a real cluster (PostgreSQL, etcd, a node
process serving the API with an auth file) and a real SDK Worker running in this process: every
method, sync and async; pagination; wait for success, failure and dead letter; fail-over; a
retried submit creates one execution; each typed exception from a real server error."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from cronwheel.client import (
    AlreadyExists,
    AsyncClient,
    Client,
    DstPolicy,
    ExecutionState,
    FailedPrecondition,
    InvalidArgument,
    JobContext,
    MisfirePolicy,
    NonRetryable,
    NotFound,
    OverlapPolicy,
    PermissionDenied,
    Priority,
    ResourceExhausted,
    RetryPolicy,
    TickOutcome,
    Unauthenticated,
    Unavailable,
    Worker,
)
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.errors import NotFound as DomainNotFound

from .api_cluster import TOKENS, YEARLY, api_cluster
from .test_worker_sdk import serving

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ADMIN, ACME = TOKENS["admin"][0], TOKENS["acme"][0]
ONE_SHOT = RetryPolicy(max_attempts=1)


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    """One cluster for the module, with a Worker (in this process) for the job types cl-*."""
    with api_cluster(partitions=4) as (c, address):
        w = Worker(address, token=ADMIN, worker_id="w-client", lease_s=10.0)

        @w.job("cl-ok")
        async def ok(ctx: JobContext) -> dict[str, Any]:
            return {"echo": ctx.payload}

        @w.job("cl-bad")
        async def bad(ctx: JobContext) -> None:
            raise NonRetryable("this input can never work")

        @w.job("cl-boom")
        async def boom(ctx: JobContext) -> None:
            raise RuntimeError("boom")

        with serving(w):
            yield c, address


@pytest.fixture(scope="module")
def acme(node: tuple[ProcessCluster, str]) -> Iterator[Client]:
    with Client(node[1], token=ACME) as cw:
        yield cw


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def free_address() -> str:
    """An address nothing listens on (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


# ------------------------------------------------------------------------------------ schedules


def test_schedule_methods(acme: Client) -> None:
    name = unique("nightly")
    s = acme.create_schedule(name, "0 * * * *", "cl-ok", timezone="Europe/Berlin", misfire_policy="run_once",
                             payload={"report": "daily"}, priority=Priority.CRITICAL,
                             retry_policy=RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=2)),
                             attempt_timeout=timedelta(minutes=5), jitter=timedelta(seconds=30),
                             dst_policy=DstPolicy(gap="skip"))
    assert (s.name, s.tenant, s.version, s.payload) == (name, "acme", 1, {"report": "daily"})
    assert s.misfire_policy is MisfirePolicy.RUN_ONCE and s.priority == "critical"
    assert s.retry_policy.max_attempts == 3 and s.retry_policy.initial_backoff == timedelta(seconds=2)
    assert s.attempt_timeout == timedelta(minutes=5) and s.dst_policy.gap == "skip"
    assert s.next_run_at is not None and s.next_run_at.tzinfo is not None

    assert acme.get_schedule(s.id) == s
    assert acme.get_schedule(name) == s  # by name

    u = acme.update_schedule(s.id, expected_version=1, cron="30 * * * *", jitter=None)
    assert (u.cron, u.jitter, u.version) == ("30 * * * *", None, 2)
    assert (u.payload, u.priority, u.attempt_timeout) == (s.payload, s.priority, s.attempt_timeout)  # untouched

    assert acme.pause(s.id, reason="maintenance").paused
    assert acme.resume(s.id).paused is False

    ticks = acme.preview(s.id, count=3)
    assert len(ticks) == 3 and all(t.scheduled_for.minute == 30 for t in ticks)
    spec = acme.preview(cron="0 9 * * 1", timezone="UTC", count=2, after=datetime(2026, 1, 1, tzinfo=UTC))
    assert [t.scheduled_for for t in spec] == [datetime(2026, 1, d, 9, tzinfo=UTC) for d in (5, 12)]

    ex = acme.trigger(s.id, idempotency_key=unique("k"), overlap_policy=OverlapPolicy.ALLOW)
    assert ex.trigger == "manual" and ex.schedule_id == s.id and ex.payload == {"report": "daily"}
    assert acme.trigger(s.id, idempotency_key=ex.idempotency_key).deduplicated
    assert acme.wait(ex.id, timeout=30).result == {"echo": {"report": "daily"}}

    # A schedule whose cron never changed: after an update of cron, ExplainSchedule evaluates the
    # old expression and misses the backfilled executions (a server bug, reported separately).
    hourly = acme.create_schedule(unique("hourly"), "0 * * * *", "j", timezone="UTC", misfire_policy="skip")
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    b = acme.backfill(hourly.id, hour - timedelta(hours=3), hour - timedelta(minutes=1), reason="catch up")
    assert (b.created_count, b.existing_count, len(b.execution_ids)) == (3, 0, 3)
    assert acme.backfill(hourly.id, hour - timedelta(hours=3), hour - timedelta(minutes=1)).existing_count == 3

    why = acme.explain(hourly.id, hour - timedelta(hours=3), hour - timedelta(minutes=1), page_size=2)  # 2 pages
    assert [t.execution_id for t in why.ticks] == list(b.execution_ids), why
    assert all(t.outcome is TickOutcome.FIRED for t in why.ticks)
    assert acme.delete(hourly.id, cancel_pending=True) == 3

    assert acme.delete(s.id, cancel_pending=True, reason="done") >= 0
    with pytest.raises(NotFound):
        acme.get_schedule(s.id)
    with pytest.raises(DomainNotFound):  # the domain's class catches it too
        acme.get_schedule(name)


def test_list_methods_follow_pages(acme: Client) -> None:
    job_type = unique("paged")
    made = [acme.create_schedule(unique("p"), YEARLY, job_type, timezone="UTC", misfire_policy="skip").id
            for _ in range(5)]
    assert [s.id for s in acme.list_schedules(job_type=job_type, page_size=2)] == made  # 3 pages, creation order
    acme.pause(made[0])
    assert [s.id for s in acme.list_schedules(job_type=job_type, paused=True)] == made[:1]

    later = [acme.submit(job_type, {"i": i}, delay=timedelta(hours=1 + i)).id for i in range(5)]
    got = list(acme.list_executions(type=job_type, page_size=2))
    assert [e.id for e in got] == later[::-1]  # newest scheduled_for first
    assert {e.state for e in got} == {ExecutionState.SCHEDULED}
    assert [e.id for e in acme.list_executions(type=job_type, states=["cancelled"])] == []


# ------------------------------------------------------------------------------------ jobs


def test_submit_and_wait_for_success_failure_and_dead_letter(acme: Client) -> None:
    ok = acme.submit("cl-ok", {"n": 1}, priority="critical")
    assert ok.idempotency_key, "the client adds a key"
    bad = acme.submit("cl-bad", retry_policy=ONE_SHOT)
    dead = acme.submit("cl-boom", retry_policy=ONE_SHOT, attempt_timeout=timedelta(seconds=30))

    done = acme.wait(ok.id, timeout=30)
    assert (done.state, done.result, done.priority) == (ExecutionState.SUCCEEDED, {"echo": {"n": 1}}, "critical")
    failed = acme.wait(bad.id, timeout=30)
    assert failed.state is ExecutionState.FAILED and "never work" in failed.error
    gone = acme.wait(dead.id, timeout=30)
    assert (gone.state, gone.error_type, gone.attempt) == (ExecutionState.DEAD, "RuntimeError", 1)
    assert "boom" in gone.error
    assert acme.get_execution(dead.id) == gone


def test_cancel_retry_and_wait_timeout(acme: Client) -> None:
    ex = acme.submit("cl-ok", run_at=datetime.now(UTC) + timedelta(hours=1), idempotency_key=unique("k"))
    assert ex.state is ExecutionState.SCHEDULED and not ex.deduplicated
    with pytest.raises(TimeoutError):
        acme.wait(ex.id, timeout=0.2)
    assert acme.cancel(ex.id, reason="not needed").state is ExecutionState.CANCELLED
    back = acme.retry(ex.id, additional_attempts=2)
    assert back.state in (ExecutionState.QUEUED, ExecutionState.RUNNING, ExecutionState.SUCCEEDED)
    assert acme.wait(ex.id, timeout=30).state is ExecutionState.SUCCEEDED


# ------------------------------------------------------------------------------------ cluster


def test_status_and_events(node: tuple[ProcessCluster, str], acme: Client) -> None:
    with Client(node[1], token=ADMIN) as admin:
        st = admin.status()
        assert st.partition_count == 4 and [m.node_id for m in st.members] == ["n1"]
        assert {q.priority for q in st.queue_depths} == {Priority.CRITICAL, Priority.DEFAULT, Priority.BULK}
    s = acme.create_schedule(unique("ev"), YEARLY, "cl-ok", timezone="UTC", misfire_policy="skip")
    mine = [e for e in acme.events(schedule_id=s.id)]
    assert [e.kind for e in mine] == ["schedule_created"] and mine[0].tenant == "acme"
    follow = acme.events(since=mine[-1].id, follow=True, poll_s=0.05, schedule_id=s.id)
    acme.pause(s.id, reason="see it followed")
    nxt = next(follow)
    assert (nxt.kind, nxt.data.get("reason")) == ("schedule_paused", "see it followed")


# ------------------------------------------------------------------------------------ connection


def test_fail_over_when_the_first_address_is_down(node: tuple[ProcessCluster, str]) -> None:
    with Client([free_address(), node[1]], token=ACME, backoff_s=0.01) as cw:
        assert cw.submit("cl-ok").state  # a safe call moves on
        cw.create_schedule(unique("fo"), YEARLY, "j", timezone="UTC", misfire_policy="skip")  # never sent: moves on
    with Client(free_address(), token=ACME, retries=2, backoff_s=0.01) as down, pytest.raises(Unavailable):
        down.get_execution(str(uuid.uuid4()))


class Dropped(grpc.RpcError):
    """What the client sees when a response is lost after the server committed."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "response dropped by the test"


class DropFirstResponse(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, rpc: str) -> None:
        self.rpc = rpc
        self.sent = 0

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        if details.method.endswith(f"/{self.rpc}"):
            self.sent += 1
            if self.sent == 1:
                outcome.result()  # the server answered: the job is stored
                raise Dropped()
        return outcome


def test_a_submit_retried_after_a_lost_response_creates_one_execution(node: tuple[ProcessCluster, str]) -> None:
    job_type = unique("once")
    drop = DropFirstResponse("SubmitJob")
    with Client(node[1], token=ACME, interceptors=[drop], backoff_s=0.01) as cw:
        ex = cw.submit(job_type, run_at=datetime.now(UTC) + timedelta(hours=1))  # no key given
        assert drop.sent == 2 and ex.deduplicated
        assert [e.id for e in cw.list_executions(type=job_type)] == [ex.id]


def test_a_call_unsafe_to_repeat_is_not_retried_after_it_was_sent(node: tuple[ProcessCluster, str]) -> None:
    job_type = unique("unsafe")
    drop = DropFirstResponse("CreateSchedule")
    with Client(node[1], token=ACME, interceptors=[drop], backoff_s=0.01) as cw:
        with pytest.raises(Unavailable, match="dropped"):
            cw.create_schedule(unique("u"), YEARLY, job_type, timezone="UTC", misfire_policy="skip")
        assert drop.sent == 1, "not sent again: the caller decides (it was created)"
        assert len(list(cw.list_schedules(job_type=job_type))) == 1


def test_each_typed_exception_from_a_real_server_error(node: tuple[ProcessCluster, str], acme: Client) -> None:
    c, address = node
    with pytest.raises(InvalidArgument) as bad:
        acme.create_schedule(unique("x"), "* * *", "j", timezone="UTC", misfire_policy="skip")
    assert bad.value.field == "schedule.cron" and bad.value.code == "INVALID_ARGUMENT"
    with pytest.raises(InvalidArgument) as local:  # refused before any call
        acme.submit("j", priority="urgent")
    assert local.value.field == "priority"
    with pytest.raises(NotFound):
        acme.get_execution(str(uuid.uuid4()))
    name = unique("dup")
    s = acme.create_schedule(name, YEARLY, "j", timezone="UTC", misfire_policy="skip")
    with pytest.raises(AlreadyExists):
        acme.create_schedule(name, YEARLY, "j", timezone="UTC", misfire_policy="skip")
    with pytest.raises(FailedPrecondition, match="version conflict"):
        acme.update_schedule(s.id, expected_version=7, cron="5 4 * * *")
    with Client(address, token="tok-nobody-0123456789") as nobody, pytest.raises(Unauthenticated):
        nobody.get_execution(str(uuid.uuid4()))
    with pytest.raises(PermissionDenied):
        acme.status()
    c.sql("INSERT INTO tenants (id, max_schedules) VALUES ('full-co', 1) RETURNING id")
    with Client(address, token=ADMIN) as admin:
        admin.create_schedule(unique("q"), YEARLY, "j", timezone="UTC", misfire_policy="skip", tenant="full-co")
        with pytest.raises(ResourceExhausted):
            admin.create_schedule(unique("q"), YEARLY, "j", timezone="UTC", misfire_policy="skip", tenant="full-co")


# ------------------------------------------------------------------------------------ async


class AioDropFirstSubmitResponse(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.sent = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if method.endswith("/SubmitJob"):
            self.sent += 1
            if self.sent == 1:
                await call  # the server answered: the job is stored
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                           details="response dropped by the test")
        return call


async def test_async_client_every_method(node: tuple[ProcessCluster, str]) -> None:
    c, address = node
    async with AsyncClient([free_address(), address], token=ACME, backoff_s=0.01) as cw:  # fail-over too
        job_type = unique("aio")
        s = await cw.create_schedule(unique("a"), "0 * * * *", job_type, timezone="UTC", misfire_policy="catch_up",
                                     max_catch_up=3, payload=[1, 2])
        assert (await cw.get_schedule(s.name)).id == s.id
        assert (await cw.get_schedule(s.id)).max_catch_up == 3
        assert (await cw.update_schedule(s.id, payload={"x": 1})).payload == {"x": 1}
        assert (await cw.pause(s.id)).paused and not (await cw.resume(s.id)).paused
        assert len(await cw.preview(s.id, count=2)) == 2
        others = [(await cw.create_schedule(unique("a"), YEARLY, job_type, timezone="UTC",
                                            misfire_policy="skip")).id for _ in range(2)]
        assert [x.id async for x in cw.list_schedules(job_type=job_type, page_size=1)] == [s.id, *others]
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        b = await cw.backfill(s.id, hour - timedelta(hours=2), hour - timedelta(minutes=1))
        why = await cw.explain(s.id, hour - timedelta(hours=2), hour - timedelta(minutes=1), page_size=1)
        assert [t.execution_id for t in why.ticks] == list(b.execution_ids) and b.created_count == 2
        trig = await cw.trigger(s.id, payload={"now": True})
        assert trig.payload == {"now": True}
        listed = [e.id async for e in cw.list_executions(schedule_id=s.id, page_size=1)]
        assert sorted(listed) == sorted([*b.execution_ids, trig.id])
        assert (await cw.cancel(trig.id)).state is ExecutionState.CANCELLED
        assert (await cw.retry(trig.id, run_at=datetime.now(UTC) + timedelta(hours=1))).state == "retry_scheduled"
        assert await cw.delete(s.id, cancel_pending=True) >= 1

        ok, bad, dead = (await cw.submit("cl-ok", {"a": 1}), await cw.submit("cl-bad", retry_policy=ONE_SHOT),
                         await cw.submit("cl-boom", retry_policy=ONE_SHOT))
        results = await asyncio.gather(cw.wait(ok.id, timeout=30), cw.wait(bad.id, timeout=30),
                                       cw.wait(dead.id, timeout=30))
        assert [r.state for r in results] == ["succeeded", "failed", "dead"]
        assert results[0].result == {"echo": {"a": 1}} and "boom" in results[2].error
        assert (await cw.get_execution(ok.id)).state is ExecutionState.SUCCEEDED

        events = [e async for e in cw.events(schedule_id=s.id)]
        assert events[0].kind == "schedule_created" and events[-1].kind == "schedule_deleted"
        follow = cw.events(since=events[-1].id, follow=True, poll_s=0.05, kind="schedule_created")
        s2 = await cw.create_schedule(unique("a"), YEARLY, job_type, timezone="UTC", misfire_policy="skip")
        assert (await anext(follow)).schedule_id == s2.id
        await follow.aclose()

        with pytest.raises(PermissionDenied):
            await cw.status()
        with pytest.raises(InvalidArgument) as bad_zone:
            await cw.create_schedule(unique("a"), YEARLY, "j", timezone="Mars/Olympus", misfire_policy="skip")
        assert bad_zone.value.field == "schedule.timezone"
        with pytest.raises(NotFound):
            await cw.get_schedule("no-such-name")
    async with AsyncClient(address, token=ADMIN) as admin:
        assert (await admin.status()).answered_by == "n1"
    drop = AioDropFirstSubmitResponse()
    async with AsyncClient(address, token=ACME, interceptors=[drop], backoff_s=0.01) as cw:
        once = unique("once")
        ex = await cw.submit(once, delay=timedelta(hours=1))
        assert drop.sent == 2 and ex.deduplicated
        assert [e.id async for e in cw.list_executions(type=once)] == [ex.id]
