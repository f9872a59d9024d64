"""Tenancy through the real API: a tenant's token, handed another tenant's ids, learns nothing
(NOT_FOUND, exactly as for ids that do not exist) and changes nothing (the other tenant's rows
in PostgreSQL are byte-for-byte unchanged)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import admin_pb2, common_pb2, scheduler_pb2

from .api_cluster import Api, api_cluster

pytestmark = [pytest.mark.e2e]
C = grpc.StatusCode
S = scheduler_pb2


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as got:
        yield got


def at(dt: datetime) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(dt)
    return t


def acme_rows(cluster: ProcessCluster) -> tuple[Any, ...]:
    return (cluster.sql("SELECT * FROM schedules WHERE tenant = 'acme' ORDER BY id"),
            cluster.sql("SELECT * FROM executions WHERE tenant = 'acme' ORDER BY id"),
            cluster.sql("SELECT * FROM events WHERE tenant = 'acme' ORDER BY id"))


def test_another_tenants_objects_are_not_found_and_unchanged(node: tuple[ProcessCluster, str]) -> None:
    cluster, address = node
    acme, globex = Api(address, "acme"), Api(address, "globex")
    sched = acme.create(name="payroll")
    paused = acme.create(name="paused-one", paused=True)
    job = acme.submit(type="email", idempotency_key="acme-key")
    later = acme.submit(type="email", run_at=at(datetime.now(UTC) + timedelta(days=30)))
    dead = acme.submit(type="email")
    acme.call("CancelExecution", S.CancelExecutionRequest(execution_id=dead.id))
    run = acme.call("TriggerSchedule", S.TriggerScheduleRequest(schedule_id=sched.id)).execution
    before = acme_rows(cluster)
    missing_s, missing_e = str(uuid.uuid4()), str(uuid.uuid4())

    def same_as_missing(rpc: str, make: Callable[[str], Any], foreign: str, missing: str) -> None:
        got = globex.fails(rpc, make(foreign))
        ref = globex.fails(rpc, make(missing))
        assert got.code == ref.code == C.NOT_FOUND, (rpc, got, ref)
        assert got.details.replace(foreign, "ID") == ref.details.replace(missing, "ID"), (rpc, got, ref)

    end = datetime.now(UTC) - timedelta(minutes=1)
    schedule_rpcs: dict[str, Callable[[str], Any]] = {
        "GetSchedule": lambda i: S.GetScheduleRequest(schedule_id=i),
        "UpdateSchedule": lambda i: S.UpdateScheduleRequest(schedule=common_pb2.Schedule(id=i, name="stolen"),
                                                            update_mask=FieldMask(paths=["name"])),
        "DeleteSchedule": lambda i: S.DeleteScheduleRequest(schedule_id=i, cancel_pending=True),
        "PauseSchedule": lambda i: S.PauseScheduleRequest(schedule_id=i),
        "TriggerSchedule": lambda i: S.TriggerScheduleRequest(schedule_id=i, idempotency_key="acme-key"),
        "BackfillSchedule": lambda i: S.BackfillScheduleRequest(schedule_id=i, range=common_pb2.TimeRange(
            start_time=at(end - timedelta(days=400)), end_time=at(end))),
        "PreviewSchedule": lambda i: S.PreviewScheduleRequest(schedule_id=i),
    }
    for rpc, make in schedule_rpcs.items():
        same_as_missing(rpc, make, sched.id, missing_s)
    same_as_missing("ResumeSchedule", lambda i: S.ResumeScheduleRequest(schedule_id=i), paused.id, missing_s)
    execution_rpcs: dict[str, tuple[Callable[[str], Any], str]] = {
        "GetExecution": (lambda i: S.GetExecutionRequest(execution_id=i), job.id),
        "CancelExecution": (lambda i: S.CancelExecutionRequest(execution_id=i), later.id),
        "RetryExecution": (lambda i: S.RetryExecutionRequest(execution_id=i), dead.id),
    }
    for rpc, (make, foreign) in execution_rpcs.items():
        same_as_missing(rpc, make, foreign, missing_e)
        same_as_missing(rpc, make, run.id, missing_e)
    same_as_missing("ExplainSchedule", lambda i: S.ExplainScheduleRequest(schedule_id=i, range=common_pb2.TimeRange(
        start_time=at(end - timedelta(days=1)))), sched.id, missing_s)

    # Listings: nothing of acme's, whatever the filters; naming acme is refused.
    assert globex.call("ListSchedules", S.ListSchedulesRequest()).schedules == []
    assert globex.call("ListExecutions", S.ListExecutionsRequest()).executions == []
    assert globex.call("ListExecutions", S.ListExecutionsRequest(schedule_id=sched.id)).executions == []
    assert globex.call("ListEvents", admin_pb2.ListEventsRequest(schedule_id=sched.id)).events == []
    assert globex.call("ListEvents", admin_pb2.ListEventsRequest(execution_id=job.id)).events == []
    for rpc, req in [("ListSchedules", S.ListSchedulesRequest(tenant="acme")),
                     ("ListExecutions", S.ListExecutionsRequest(tenant="acme")),
                     ("ListEvents", admin_pb2.ListEventsRequest(tenant="acme")),
                     ("SubmitJob", S.SubmitJobRequest(tenant="acme", type="x")),
                     ("CreateSchedule", S.CreateScheduleRequest(schedule=common_pb2.Schedule(
                         tenant="acme", name="x", cron="0 0 1 1 *", timezone="UTC", job_type="x", misfire_policy=1))),
                     ("ClusterStatus", admin_pb2.ClusterStatusRequest())]:
        assert globex.fails(rpc, req).code == C.PERMISSION_DENIED, rpc
    assert acme_rows(cluster) == before  # nothing of acme's changed, no event recorded for acme
    # A page token of acme's listing gives globex nothing of acme's either.
    for _ in range(2):
        acme.create(name=f"more-{uuid.uuid4().hex[:6]}")
    token = acme.call("ListSchedules", S.ListSchedulesRequest(page_size=1)).next_page_token
    assert globex.fails("ListSchedules", S.ListSchedulesRequest(page_size=1, page_token=token)).code == \
        C.INVALID_ARGUMENT
    before = acme_rows(cluster)

    # Same names and idempotency keys are per tenant: globex gets its own objects, not acme's.
    own = globex.call("SubmitJob", S.SubmitJobRequest(type="email", idempotency_key="acme-key"))
    assert not own.deduplicated and own.execution.id != job.id and own.execution.tenant == "globex"
    assert globex.create(name="payroll").id != sched.id

    assert acme_rows(cluster) == before
    # Acme still sees its own things, and an admin sees everyone's.
    assert acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=sched.id)).schedule.name == "payroll"
    admin = Api(address, "admin")
    assert admin.call("GetExecution", S.GetExecutionRequest(execution_id=job.id)).execution.tenant == "acme"
    tenants = {s.tenant for s in admin.call("ListSchedules", S.ListSchedulesRequest()).schedules}
    assert tenants == {"acme", "globex"}
