"""Hypothesis fuzz of every RPC against a real node: random and malformed fields get only
well-formed refusals (never UNKNOWN, INTERNAL or UNAVAILABLE), a refused call stores nothing,
and the node keeps serving."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import admin_pb2, common_pb2, scheduler_pb2

from .api_cluster import Api, api_cluster

pytestmark = [pytest.mark.e2e]
S = scheduler_pb2
C = grpc.StatusCode
REFUSALS = {C.INVALID_ARGUMENT, C.NOT_FOUND, C.ALREADY_EXISTS, C.FAILED_PRECONDITION, C.PERMISSION_DENIED,
            C.RESOURCE_EXHAUSTED}
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

POOL: dict[str, list[str]] = {"schedule": [], "execution": []}  # filled by the fixture


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as (cluster, address):
        fuzz, acme = Api(address, "fuzz"), Api(address, "acme")
        for api in (fuzz, acme):
            s = api.create(name=f"seed-{uuid.uuid4().hex[:6]}")
            p = api.create(name=f"seed-{uuid.uuid4().hex[:6]}", paused=True)
            e = api.submit(idempotency_key="seed")
            c = api.submit()
            api.call("CancelExecution", S.CancelExecutionRequest(execution_id=c.id))
            t = api.call("TriggerSchedule", S.TriggerScheduleRequest(schedule_id=s.id)).execution
            POOL["schedule"] += [s.id, p.id]
            POOL["execution"] += [e.id, c.id, t.id]
        yield cluster, address


def ids(kind: str) -> st.SearchStrategy[str]:
    return st.one_of(st.deferred(lambda: st.sampled_from(POOL[kind] or [""])), st.just(str(uuid.uuid4())),
                     st.sampled_from(["", "not-a-uuid", "00000000-0000-0000-0000-000000000000",
                                      "{12345678-1234-1234-1234-123456789012}", "\x00", "🙂" * 36]),
                     st.text(max_size=40))


TEXT = st.one_of(st.text(max_size=60), st.sampled_from(["", " ", "x", "a" * 200, "a" * 201, "\x00", "a\nb",
                                                         "\u202e", "🙂" * 201, " fuzz ", "fuzz", "acme"]))
CRON = st.one_of(st.sampled_from(["0 0 1 1 *", "@yearly", "H H 1 1 *", "0 12 29 2 *", "", "* * *", "61 * * * *",
                                  "0 0 30 2 *", "H(5-1) * * * *", "@reboot", "L * * * *", "0 0 1 1 * * *",
                                  "0 0 1 1 MON-FOO", "*/0 * * * *", "\x00"]), st.text(max_size=30))
ZONE = st.one_of(st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe", "", "Mars/Olympus", "localtime",
                                  "../../etc/passwd", "Europe/Berlin\x00", "/etc/localtime"]), st.text(max_size=30))
JSON = st.one_of(st.sampled_from(["", "{}", "[]", "null", "1", '"s"', '{"a": [1, 2.5e-3, true]}', "{", "nan",
                                  "NaN", "Infinity", '{"a": "\\u0000"}', '"\\ud800"', "[" * 150 + "]" * 150,
                                  "1e131072", "1e-16384", "1" * 5000, '{"k": 1, "k": 2}', "x" * 270_000,
                                  '"' + "y" * 262_140 + '"']), st.text(max_size=40))
ENUM = st.integers(-3, 12)


def ts() -> st.SearchStrategy[Timestamp]:
    return st.builds(Timestamp, seconds=st.one_of(INT64, st.integers(-62135596800, 253402300799),
                                                  st.integers(1_700_000_000, 1_900_000_000)),
                     nanos=st.one_of(INT32, st.integers(0, 999_999_999)))


def dur() -> st.SearchStrategy[Duration]:
    return st.builds(Duration, seconds=st.one_of(INT64, st.integers(-10, 10**7)),
                     nanos=st.one_of(INT32, st.integers(-999_999_999, 999_999_999)))


def opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def msg(cls: Any, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A message whose fields are each either left unset or drawn."""
    @st.composite
    def build(draw: st.DrawFn) -> Any:
        kw = {k: v for k, s in fields.items() if (v := draw(opt(s))) is not None}
        return cls(**kw)
    return build()


RETRY = msg(common_pb2.RetryPolicy, initial_backoff=dur(), backoff_multiplier=st.floats(), max_backoff=dur(),
            max_attempts=INT32)
DST = msg(common_pb2.DstPolicy, gap=ENUM, repeated_hour=ENUM)
SCHEDULE = msg(common_pb2.Schedule, id=ids("schedule"), tenant=TEXT, name=TEXT, cron=CRON, timezone=ZONE,
               job_type=TEXT, payload_json=JSON, priority=ENUM, retry_policy=RETRY, timeout=dur(),
               misfire_policy=ENUM, max_catch_up=INT32, overlap_policy=ENUM, dst_policy=DST, jitter=dur(),
               paused=st.booleans(), version=INT64, next_run_at=ts(), alert_if_no_success_within=dur())
RANGE = msg(common_pb2.TimeRange, start_time=ts(), end_time=ts())
NEAR_NOW = st.builds(Timestamp, seconds=st.integers(-86400 * 40, 86400).map(lambda d: int(time.time()) + d))
RECENT = msg(common_pb2.TimeRange, start_time=NEAR_NOW, end_time=NEAR_NOW)  # explain's retention window
MASK_PATHS = ["name", "cron", "timezone", "job_type", "payload_json", "priority", "retry_policy",
              "retry_policy.max_attempts", "retry_policy.initial_backoff", "timeout", "misfire_policy",
              "max_catch_up", "overlap_policy", "dst_policy", "dst_policy.gap", "jitter", "*", "id", "paused",
              "version", "nope", "", "retry_policy.nope"]
TOKEN = st.one_of(st.just(""), st.text(max_size=30), st.sampled_from(["eyJrIjoic2NoZWR1bGVzIn0", "e30", "W10",
                                                                      "eyJrIjoic2NoZWR1bGVzIiwiZiI6IngiLCJjIjpbXX0"]))

REQUESTS: dict[str, st.SearchStrategy[Any]] = {
    "CreateSchedule": msg(S.CreateScheduleRequest, schedule=SCHEDULE),
    "UpdateSchedule": msg(S.UpdateScheduleRequest, schedule=SCHEDULE, expected_version=INT64,
                          update_mask=st.builds(FieldMask, paths=st.lists(st.one_of(st.sampled_from(MASK_PATHS),
                                                                                    st.text(max_size=20)),
                                                                          max_size=4))),
    "GetSchedule": msg(S.GetScheduleRequest, schedule_id=ids("schedule")),
    "ListSchedules": msg(S.ListSchedulesRequest, tenant=TEXT, job_type=TEXT, paused=st.booleans(),
                         page_size=INT32, page_token=TOKEN),
    "DeleteSchedule": msg(S.DeleteScheduleRequest, schedule_id=ids("schedule"), expected_version=INT64,
                          cancel_pending=st.booleans(), reason=TEXT),
    "PauseSchedule": msg(S.PauseScheduleRequest, schedule_id=ids("schedule"), reason=TEXT, expected_version=INT64),
    "ResumeSchedule": msg(S.ResumeScheduleRequest, schedule_id=ids("schedule"), reason=TEXT,
                          expected_version=INT64),
    "TriggerSchedule": msg(S.TriggerScheduleRequest, schedule_id=ids("schedule"), payload_json=JSON,
                           overlap_policy=ENUM, idempotency_key=TEXT, reason=TEXT),
    "BackfillSchedule": msg(S.BackfillScheduleRequest, schedule_id=ids("schedule"), range=RANGE, reason=TEXT),
    "PreviewSchedule": st.one_of(
        msg(S.PreviewScheduleRequest, schedule_id=ids("schedule"), count=INT32, start_time=ts()),
        msg(S.PreviewScheduleRequest, count=INT32, start_time=ts(),
            spec=msg(S.ScheduleSpec, cron=CRON, timezone=ZONE, dst_policy=DST, jitter=dur(),
                     schedule_id=ids("schedule")))),
    "ExplainSchedule": msg(S.ExplainScheduleRequest, schedule_id=ids("schedule"), range=st.one_of(RANGE, RECENT),
                           page_size=INT32, page_token=TOKEN),
    "SubmitJob": msg(S.SubmitJobRequest, tenant=TEXT, type=TEXT, payload_json=JSON, run_at=ts(), priority=ENUM,
                     retry_policy=RETRY, timeout=dur(), idempotency_key=TEXT),
    "GetExecution": msg(S.GetExecutionRequest, execution_id=ids("execution")),
    "ListExecutions": msg(S.ListExecutionsRequest, tenant=TEXT, schedule_id=ids("schedule"),
                          states=st.lists(ENUM, max_size=3), scheduled_for=RANGE, type=TEXT, page_size=INT32,
                          page_token=TOKEN),
    "CancelExecution": msg(S.CancelExecutionRequest, execution_id=ids("execution"), reason=TEXT),
    "RetryExecution": msg(S.RetryExecutionRequest, execution_id=ids("execution"), additional_attempts=INT32,
                          run_at=ts(), reason=TEXT),
    "ListEvents": msg(admin_pb2.ListEventsRequest, tenant=TEXT, schedule_id=ids("schedule"),
                      execution_id=ids("execution"), kind=TEXT, alerts_only=st.booleans(), after_id=INT64,
                      page_size=INT32, page_token=TOKEN),
    "ClusterStatus": st.just(admin_pb2.ClusterStatusRequest()),
}


def snapshot(cluster: ProcessCluster) -> tuple[Any, ...]:
    """Everything an API call could store. Nothing here moves by itself during the test: the
    schedules fire once a year and no worker is running."""
    return (cluster.sql("SELECT * FROM schedules ORDER BY id"),
            cluster.sql("SELECT * FROM executions ORDER BY id"),
            cluster.sql("SELECT count(*), max(id) FROM events"),
            cluster.sql("SELECT * FROM tenants ORDER BY id"))


@settings(max_examples=int(os.environ.get("CRONWHEEL_FUZZ_EXAMPLES", "600")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_rpc_answers_bad_input_with_a_well_formed_refusal_and_stores_nothing(
        node: tuple[ProcessCluster, str], data: st.DataObject) -> None:
    cluster, address = node
    rpc = data.draw(st.sampled_from(sorted(REQUESTS)), label="rpc")
    request = data.draw(REQUESTS[rpc], label="request")
    who = data.draw(st.sampled_from(["fuzz", "fuzz", "fuzz", "admin", None]), label="caller")
    api = Api(address, who)
    before = snapshot(cluster)
    try:
        api.call(rpc, request)
    except grpc.RpcError as exc:
        code = exc.code()
        allowed = REFUSALS | ({C.UNAUTHENTICATED} if who is None else set())
        assert code in allowed, (rpc, code, exc.details(), f"node exit code: {cluster.nodes['n1'].proc.poll()}")
        assert exc.details(), (rpc, code)
        if code == C.INVALID_ARGUMENT:
            field = exc.details().split(":", 1)[0]
            assert field and " " not in field, (rpc, exc.details())  # starts with the field path
        assert snapshot(cluster) == before, (rpc, code, exc.details())
    finally:
        api.channel.close()


def test_the_node_still_serves_after_the_fuzz(node: tuple[ProcessCluster, str]) -> None:
    cluster, address = node
    api = Api(address, "fuzz")
    health = health_pb2_grpc.HealthStub(api.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    made = api.create(name=f"after-{uuid.uuid4().hex[:6]}")
    assert api.call("GetSchedule", S.GetScheduleRequest(schedule_id=made.id)).schedule == made
    assert cluster.nodes["n1"].alive()
    assert cluster.nodes["n1"].log_events("rpc_internal_error") == []
