"""Queues and worker capabilities against a real cluster (issue 52 items 2 and 3): PostgreSQL,
etcd, two node processes and `cronwheel worker` processes given --queue and --capability flags.

- one worker process serves `long` with 2 slots and `default`: its long runs never overlap more
  than 2 at once, and default jobs submitted while they run start and finish meanwhile;
- a tenant's limit for a queue (set through the API) is never exceeded, judged from the
  executions' own started_at and finished_at, while two workers of 8 slots serve it;
- a job requiring gpu=a100 goes only to the worker advertising it;
- bad queues, capabilities and queue limits are refused naming the field, nothing stored; the
  CLI and the apply file set queue limits too.
Handlers: tests/e2e/limits_jobs.py (`noop`, `nap`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

import grpc
import pytest

from cronwheel.client import Client, InvalidArgument, JobSpec
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import admin_pb2, admin_pb2_grpc

from .helpers import run_cli, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODULE = "tests.e2e.limits_jobs"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        c.start_node("n1")
        c.start_node("n2")
        c.wait_converged(["n1", "n2"])
        c.start_worker("mixed", MODULE, "n1", {"CRONWHEEL_TEST_CONCURRENCY": "6"},
                       "--queue", "long:2", "--queue", "default")
        c.start_worker("gpu", MODULE, "n2", {"CRONWHEEL_TEST_CONCURRENCY": "4"},
                       "--queue", "default", "--capability", "gpu=a100")
        for name, node in (("batch1", "n1"), ("batch2", "n2")):
            c.start_worker(name, MODULE, node, {"CRONWHEEL_TEST_CONCURRENCY": "8"}, "--queue", "batch")
        yield c


@pytest.fixture(scope="module")
def client(cluster: ProcessCluster) -> Iterator[Client]:
    with Client(cluster.addresses(), token=None) as cw:
        yield cw


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, d in edges:  # at one instant a finish (-1) counts before a start
        now += d
        peak = max(peak, now)
    return peak


def all_done(c: ProcessCluster, tenant: str) -> bool:
    return c.sql("SELECT count(*) FROM executions WHERE tenant = %s AND state <> 'succeeded'", tenant) == [(0,)]


def test_one_worker_serves_long_with_2_slots_and_default_keeps_starting_meanwhile(
        cluster: ProcessCluster, client: Client) -> None:
    client.submit_many([JobSpec("whoami", {"ms": 1500}, tenant="lq", queue="long") for _ in range(8)])
    wait_until(lambda: cluster.sql("SELECT count(*) FROM executions WHERE tenant = 'lq' AND state = 'running'")
               == [(2,)], 30, "the mixed worker to run 2 long jobs")
    client.submit_many([JobSpec("nap", {"ms": 20}, tenant="dq") for _ in range(40)])
    wait_until(lambda: all_done(cluster, "dq"), 30, "every default job to finish")
    long_left = cluster.sql("SELECT count(*) FROM executions WHERE tenant = 'lq' AND state <> 'succeeded'")[0][0]
    wait_until(lambda: all_done(cluster, "lq"), 60, "every long job to finish")
    longs = cluster.sql("SELECT started_at, finished_at FROM executions WHERE tenant = 'lq'")
    owners = {r[0] for r in cluster.sql("SELECT DISTINCT result->>'worker' FROM executions WHERE tenant = 'lq'")}
    peak = most_at_once([(s, f) for s, f in longs])
    lags = sorted(r[0] for r in cluster.sql(
        "SELECT extract(epoch FROM started_at - run_at)::float8 FROM executions WHERE tenant = 'dq'"))
    print(f"long runs at once: {peak}; long jobs unfinished when the 40 default jobs were done: {long_left}; "
          f"default start lag p50 {lags[len(lags) // 2] * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms")
    assert owners == {"mixed"}  # the one worker naming `long`
    assert peak == 2  # 8 long jobs of 1.5 s, only the mixed worker names `long`: 2 at a time
    assert long_left >= 4  # the default jobs did not wait for the long queue to drain
    assert lags[-1] < 1.0


def test_a_tenants_queue_limit_is_never_exceeded_while_two_workers_serve_the_queue(
        cluster: ProcessCluster, client: Client) -> None:
    assert [(q.name, q.max_concurrency) for q in client.set_tenant_queue("tq", "batch", max_concurrency=3)] \
        == [("batch", 3)]
    client.submit_many([JobSpec("nap", {"ms": 150}, tenant="tq", queue="batch") for _ in range(40)])
    client.submit_many([JobSpec("nap", {"ms": 150}, tenant="other", queue="batch") for _ in range(40)])
    wait_until(lambda: all_done(cluster, "tq") and all_done(cluster, "other"), 90, "every batch job to finish")
    rows = cluster.sql("SELECT tenant, started_at, finished_at FROM executions WHERE tenant IN ('tq', 'other')")
    tq = most_at_once([(s, f) for t, s, f in rows if t == "tq"])
    other = most_at_once([(s, f) for t, s, f in rows if t == "other"])
    print(f"most at once: tq (limit 3) {tq}, other (no limit) {other}")
    assert tq == 3
    assert other > 3  # the limit is the tenant's, not the queue's


def test_a_job_requiring_gpu_a100_goes_only_to_the_worker_advertising_it(
        cluster: ProcessCluster, client: Client) -> None:
    jobs = [JobSpec("whoami", {"ms": 30}, tenant="caps", required_capabilities=["gpu=a100"]) for _ in range(20)]
    jobs += [JobSpec("whoami", {"ms": 30}, tenant="caps") for _ in range(20)]
    jobs += [JobSpec("whoami", {"ms": 30}, tenant="caps", required_capabilities=["gpu=h100"])]
    made = client.submit_many(jobs)
    wait_until(lambda: cluster.sql("SELECT count(*) FROM executions WHERE tenant = 'caps' AND state = 'succeeded'")
               == [(40,)], 60, "the 40 jobs some worker can run to finish")
    ran = cluster.sql("SELECT required_capabilities, result->>'worker', count(*) FROM executions"
                      " WHERE tenant = 'caps' AND state = 'succeeded' GROUP BY 1, 2")
    print(f"(required capabilities, worker, runs): {sorted(ran)}")
    assert {w for c, w, _ in ran if c == "gpu=a100"} == {"gpu"}
    assert sum(n for c, _, n in ran if c == "gpu=a100") == 20
    # A schedule's runs (fired by the nodes' cron path) carry its requirement the same way.
    sched = client.create_schedule("gpu-every-second", "* * * * * *", "whoami", timezone="UTC",
                                   misfire_policy="skip", tenant="caps", payload={"ms": 10},
                                   required_capabilities=["gpu=a100"])
    assert sched.required_capabilities == ("gpu=a100",) and sched.queue == "default"
    wait_until(lambda: cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = %s AND state = 'succeeded'",
                                   sched.id)[0][0] >= 3, 30, "3 cron runs of the gpu schedule")
    client.delete(sched.id, cancel_pending=True)
    fired = cluster.sql("SELECT DISTINCT trigger, required_capabilities, result->>'worker' FROM executions"
                        " WHERE schedule_id = %s AND state = 'succeeded'", sched.id)
    assert fired == [("cron", "gpu=a100", "gpu")], fired
    h100 = client.get_execution(made[-1].execution_id)
    assert (h100.state, h100.required_capabilities, h100.queue) == ("queued", ("gpu=h100",), "default")


def test_bad_queues_capabilities_and_queue_limits_are_refused_naming_the_field(
        cluster: ProcessCluster, client: Client) -> None:
    for kw, field in (({"queue": "no spaces"}, "queue"),
                      ({"required_capabilities": ["gpu"]}, "required_capabilities[0]")):
        with pytest.raises(InvalidArgument) as got:
            client.submit("noop", {}, tenant="bad", **kw)  # type: ignore[arg-type]
        assert got.value.field == field, got.value
    with grpc.insecure_channel(cluster.addresses()[0]) as ch:
        stub = admin_pb2_grpc.TenantServiceStub(ch)
        for q, field in ((admin_pb2.TenantQueue(name="long", max_concurrency=-1), "queue.max_concurrency"),
                         (admin_pb2.TenantQueue(name="long", weight=5000), "queue.weight"),
                         (admin_pb2.TenantQueue(name="a b"), "queue.name")):
            with pytest.raises(grpc.RpcError) as rpc:
                stub.SetTenantQueue(admin_pb2.SetTenantQueueRequest(tenant_id="bad", queue=q))
            assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in rpc.value.details()
    assert cluster.sql("SELECT count(*) FROM executions WHERE tenant = 'bad'") == [(0,)]
    assert cluster.sql("SELECT count(*) FROM tenant_queues WHERE tenant = 'bad'") == [(0,)]


def test_the_cli_and_the_apply_file_set_queue_limits(cluster: ProcessCluster, client: Client) -> None:
    addr = cluster.addresses()[0]
    out = run_cli("tenant", "queue", "cliq", "long", "--max-concurrency", "2", "--weight", "3", "--address", addr,
                  "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"name": "long", "max_concurrency": 2, "weight": 3}]
    bad = run_cli("tenant", "queue", "cliq", "long", "--weight", "0", "--address", addr)
    assert bad.returncode != 0 and "weight" in bad.stderr
    client.create_tenant("applyq")
    plan = client.apply_tenants([{"id": "applyq", "queues": {"long": {"max_concurrency": 2}, "gpu": {"weight": 2}}}])
    assert [c.field for c in plan.items[0].changes] == ["queues.gpu", "queues.long"]
    assert client.apply_tenants([{"id": "applyq", "queues": {"long": {"max_concurrency": 2}}}],
                                dry_run=True).items[0].action == "unchanged"
    got = client.get_tenant("applyq")
    assert [(q.name, q.max_concurrency, q.weight) for q in got.queues] == [("gpu", None, 2), ("long", 2, 1)]
