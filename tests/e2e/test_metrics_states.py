"""The execution state counters on real node processes: every transition is counted on the node
that decided it. A dead letter decided by a worker's FailExecution is counted on the node that
served the call; one decided by the reaper (lease lapsed on the last attempt) on the node that
owns the execution's partition, and on no other."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from cronwheel.devtools.harness import NodeProc, ProcessCluster
from cronwheel.v1 import common_pb2, dispatch_pb2, dispatch_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

from .helpers import wait_until
from .ops_helpers import value, wait_serving

pytestmark = [pytest.mark.e2e]
ENTERED = "cronwheel_executions_entered_total"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        for name in ("n1", "n2"):
            c.start_node(name)
        for name in ("n1", "n2"):
            wait_serving(c.nodes[name].address)
        yield c


def submit(node: NodeProc, job_type: str) -> common_pb2.Execution:
    with grpc.insecure_channel(node.address) as ch:
        return scheduler_pb2_grpc.SchedulerServiceStub(ch).SubmitJob(scheduler_pb2.SubmitJobRequest(
            type=job_type, retry_policy=common_pb2.RetryPolicy(max_attempts=1)), timeout=10).execution


def lease_one(node: NodeProc, job_type: str, lease_s: int) -> dispatch_pb2.LeasedExecution:
    with grpc.insecure_channel(node.address) as ch:
        got = dispatch_pb2_grpc.DispatchServiceStub(ch).LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
            worker_id="w-metrics", job_types=[job_type], max_count=1, lease_duration=Duration(seconds=lease_s),
            wait_timeout=Duration(seconds=10)), timeout=20)
    (leased,) = got.executions
    return leased


def test_a_dead_letter_from_a_worker_failure_is_counted_on_the_node_that_served_the_failure(
        cluster: ProcessCluster) -> None:
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    ex = submit(n1, "fails-once")
    leased = lease_one(n1, "fails-once", 30)
    assert leased.execution_id == ex.id
    with grpc.insecure_channel(n1.address) as ch:
        out = dispatch_pb2_grpc.DispatchServiceStub(ch).FailExecution(dispatch_pb2.FailExecutionRequest(
            execution_id=ex.id, fencing_token=leased.fencing_token, worker_id="w-metrics", error="boom",
            retryable=True, error_type="Boom"), timeout=10)
    assert out.state == common_pb2.EXECUTION_STATE_DEAD
    assert value(n1, ENTERED, state="running", job_type="fails-once") == 1
    assert value(n1, ENTERED, state="dead", job_type="fails-once") == 1
    assert value(n1, "cronwheel_failures_total", type="Boom") == 1
    assert value(n2, ENTERED, state="dead", job_type="fails-once") == 0


def test_a_dead_letter_decided_by_the_reaper_is_counted_on_the_partition_owner_only(cluster: ProcessCluster) -> None:
    ex = submit(cluster.nodes["n1"], "lapses")
    leased = lease_one(cluster.nodes["n2"], "lapses", 1)  # never heartbeated: the lease lapses after 1 s
    assert leased.execution_id == ex.id
    owner_name = cluster.owners()[ex.partition][0]
    owner = cluster.nodes[owner_name]
    other = cluster.nodes["n2" if owner_name == "n1" else "n1"]
    dead_before = value(owner, "cronwheel_dead_letters_total")
    wait_until(lambda: value(owner, ENTERED, state="dead", job_type="lapses") == 1, 30,
               f"the reaper's dead letter in {owner_name}'s state counters")
    assert value(owner, "cronwheel_dead_letters_total") == dead_before + 1
    assert value(owner, "cronwheel_failures_total", type="lease_expired") == 1
    assert value(other, ENTERED, state="dead", job_type="lapses") == 0
    assert value(cluster.nodes["n2"], ENTERED, state="running", job_type="lapses") == 1  # the claim: n2 served it


def test_a_submitted_one_off_is_counted_as_queued_where_its_partition_owner_fired_it(cluster: ProcessCluster
                                                                                     ) -> None:
    """Fired by the firer of the partition owner (a delayed job: `scheduled`, then queued a
    second before its run_at; only a job due more than QUEUED_AT_SUBMIT_WITHIN ahead is)."""
    from google.protobuf.timestamp_pb2 import Timestamp

    at = Timestamp()
    at.GetCurrentTime()
    at.seconds += 11  # past the node's QUEUED_AT_SUBMIT_WITHIN (10 s): scheduled, then fired
    with grpc.insecure_channel(cluster.nodes["n1"].address) as ch:
        ex = scheduler_pb2_grpc.SchedulerServiceStub(ch).SubmitJob(scheduler_pb2.SubmitJobRequest(
            type="delayed", run_at=at), timeout=10).execution
    owner = cluster.nodes[cluster.owners()[ex.partition][0]]
    wait_until(lambda: value(owner, ENTERED, state="queued", job_type="delayed") == 1, 30,
               "the delayed job's fire in its owner's state counters")


def test_cron_ticks_on_the_fast_path_are_counted_with_their_job_type_where_they_fired(
        cluster: ProcessCluster) -> None:
    """A plain cron tick (overlap allow) goes through the one-statement fast path; the statement
    reports what it inserted by state and job type. Before, those ticks were counted as queued
    with an empty job_type (fails without the fix)."""
    with grpc.insecure_channel(cluster.nodes["n1"].address) as ch:
        s = scheduler_pb2_grpc.SchedulerServiceStub(ch).CreateSchedule(scheduler_pb2.CreateScheduleRequest(
            schedule=common_pb2.Schedule(name="every-second-metrics", cron="* * * * * *", timezone="UTC",
                                         job_type="sec.tick", tenant="default",
                                         misfire_policy=common_pb2.MISFIRE_POLICY_SKIP)), timeout=10).schedule
    owner = cluster.nodes[cluster.owners()[s.partition][0]]
    wait_until(lambda: value(owner, ENTERED, state="queued", job_type="sec.tick") >= 2, 30,
               "the schedule's ticks in its owner's state counters under their job type")
    assert value(owner, ENTERED, state="queued", job_type="") == 0
    with grpc.insecure_channel(cluster.nodes["n1"].address) as ch:
        scheduler_pb2_grpc.SchedulerServiceStub(ch).DeleteSchedule(
            scheduler_pb2.DeleteScheduleRequest(schedule_id=s.id), timeout=10)


def test_what_the_api_moves_is_counted_on_the_node_that_served_the_call(cluster: ProcessCluster) -> None:
    """SubmitJob(s), TriggerSchedule, BackfillSchedule, CancelExecution and RetryExecution count
    the states they move executions into; a deduplicated submit or a repeated cancel moves
    nothing and counts nothing (these were not counted before)."""
    from datetime import UTC, datetime, timedelta

    from cronwheel.client import Client, JobSpec

    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    with Client(n1.address) as client:
        client.submit("api-now", idempotency_key="k1")
        client.submit("api-now", idempotency_key="k1")  # deduplicated: moves nothing
        later = client.submit("api-later", delay=timedelta(hours=1))
        client.submit_many([JobSpec("api-now", {"i": i}) for i in range(3)])
        client.cancel(later.id)
        client.cancel(later.id)  # already cancelled: moves nothing
        client.retry(later.id)
        sched = client.create_schedule("api-metrics", "* * * * *", "api-cron", timezone="UTC",
                                       misfire_policy="skip", paused=True)
        client.trigger(sched.id)
        now = datetime.now(UTC).replace(second=0, microsecond=0)
        client.backfill(sched.id, now - timedelta(minutes=3), now)
    assert value(n1, ENTERED, state="queued", job_type="api-now") == 4
    assert value(n1, ENTERED, state="scheduled", job_type="api-later") == 1
    assert value(n1, ENTERED, state="cancelled", job_type="api-later") == 1
    assert value(n1, ENTERED, state="queued", job_type="api-later") == 1  # the retry
    assert value(n1, ENTERED, state="queued", job_type="api-cron") == 4  # the trigger and 3 backfilled ticks
    for job_type in ("api-now", "api-later", "api-cron"):
        assert value(n2, ENTERED, state="queued", job_type=job_type) == 0


def test_a_retry_the_reaper_requeues_is_counted_on_the_partition_owner(cluster: ProcessCluster) -> None:
    with grpc.insecure_channel(cluster.nodes["n1"].address) as ch:
        ex = scheduler_pb2_grpc.SchedulerServiceStub(ch).SubmitJob(scheduler_pb2.SubmitJobRequest(
            type="requeued", retry_policy=common_pb2.RetryPolicy(
                max_attempts=2, initial_backoff=Duration(seconds=1))), timeout=10).execution
    leased = lease_one(cluster.nodes["n1"], "requeued", 30)
    with grpc.insecure_channel(cluster.nodes["n1"].address) as ch:
        out = dispatch_pb2_grpc.DispatchServiceStub(ch).FailExecution(dispatch_pb2.FailExecutionRequest(
            execution_id=ex.id, fencing_token=leased.fencing_token, worker_id="w-metrics", error="again",
            retryable=True, error_type="Again"), timeout=10)
    assert out.state == common_pb2.EXECUTION_STATE_RETRY_SCHEDULED
    owner_name = cluster.owners()[ex.partition][0]
    owner = cluster.nodes[owner_name]
    other = cluster.nodes["n2" if owner_name == "n1" else "n1"]
    submitted_on_owner = 1 if owner_name == "n1" else 0  # the submit's own `queued`
    wait_until(lambda: value(owner, ENTERED, state="queued", job_type="requeued") == submitted_on_owner + 1, 30,
               f"the reaper's requeue in {owner_name}'s state counters")
    assert value(other, ENTERED, state="queued", job_type="requeued") == 1 - submitted_on_owner


def test_what_an_overlap_policy_moves_beside_the_call_is_counted(cluster: ProcessCluster) -> None:
    """Beside the run a call makes, an overlap policy moves others: a `replace` trigger cancels
    the run ahead of it, and a buffered run is released (`queued`) when the run ahead of it ends:
    by a CancelExecution, and by a CompleteExecutions batch. Each is counted on the node that
    served the call (none was counted before: fails without the change)."""
    from cronwheel.client import Client

    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    with Client(n1.address) as client:
        rep = client.create_schedule("replace-metrics", "* * * * *", "ov-replace", timezone="UTC",
                                     misfire_policy="skip", overlap_policy="replace", paused=True)
        client.trigger(rep.id)
        client.trigger(rep.id)  # cancels the first, still queued
        buf = client.create_schedule("buffer-metrics", "* * * * *", "ov-buffer", timezone="UTC",
                                     misfire_policy="skip", overlap_policy="buffer_all", paused=True)
        a = client.trigger(buf.id)
        b = client.trigger(buf.id)
        c = client.trigger(buf.id)
        assert (a.state, b.state, c.state) == ("queued", "scheduled", "scheduled")
        client.cancel(a.id)  # releases b
        assert client.get_execution(b.id).state == "queued"
    assert value(n1, ENTERED, state="queued", job_type="ov-replace") == 2
    assert value(n1, ENTERED, state="cancelled", job_type="ov-replace") == 1
    assert value(n1, ENTERED, state="scheduled", job_type="ov-buffer") == 2
    assert value(n1, ENTERED, state="cancelled", job_type="ov-buffer") == 1
    assert value(n1, ENTERED, state="queued", job_type="ov-buffer") == 2  # a, and b released by the cancel

    leased = lease_one(n2, "ov-buffer", 30)
    assert leased.execution_id == b.id
    with grpc.insecure_channel(n2.address) as ch:
        out = dispatch_pb2_grpc.DispatchServiceStub(ch).CompleteExecutions(dispatch_pb2.CompleteExecutionsRequest(
            items=[dispatch_pb2.CompleteExecutionRequest(execution_id=b.id, fencing_token=leased.fencing_token,
                                                         worker_id="w-metrics")]), timeout=10)
    assert [o.code for o in out.outcomes] == [0]
    assert value(n2, ENTERED, state="succeeded", job_type="ov-buffer") == 1
    assert value(n2, ENTERED, state="queued", job_type="ov-buffer") == 1  # c, released by b's completion
    with Client(n1.address) as client:
        assert client.get_execution(c.id).state == "queued"
