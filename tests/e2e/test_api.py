"""SchedulerService and AdminService through a real gRPC channel against a real node process
(with an auth file), PostgreSQL and etcd: every RPC, and every status code on purpose."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import admin_pb2, common_pb2, scheduler_pb2

from .api_cluster import YEARLY, Api, api_cluster

pytestmark = [pytest.mark.e2e]
C = grpc.StatusCode
S = scheduler_pb2


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as got:
        yield got


@pytest.fixture
def acme(node: tuple[ProcessCluster, str]) -> Api:
    return Api(node[1], "acme")


@pytest.fixture
def admin(node: tuple[ProcessCluster, str]) -> Api:
    return Api(node[1], "admin")


def name() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def at(dt: datetime) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(dt)
    return t


def test_schedule_lifecycle_create_get_update_pause_resume_delete(acme: Api, node: tuple[ProcessCluster, str]
                                                                  ) -> None:
    s = acme.create(name=name(), cron="*/10 * * * *", timezone="Europe/Berlin", payload_json='{"a": 1}',
                    priority=common_pb2.PRIORITY_BULK)
    assert s.version == 1 and s.tenant == "acme" and s.id and s.HasField("next_run_at")
    assert s.retry_policy.max_attempts == 5 and s.overlap_policy == common_pb2.OVERLAP_POLICY_ALLOW
    assert json.loads(s.payload_json) == {"a": 1}
    got = acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=s.id)).schedule
    assert got == s

    upd = acme.call("UpdateSchedule", S.UpdateScheduleRequest(
        schedule=common_pb2.Schedule(id=s.id, cron="0 5 * * *", retry_policy=common_pb2.RetryPolicy(max_attempts=9)),
        update_mask=FieldMask(paths=["cron", "retry_policy.max_attempts"]), expected_version=1)).schedule
    assert (upd.version, upd.cron, upd.retry_policy.max_attempts) == (2, "0 5 * * *", 9)
    nxt = upd.next_run_at.ToDatetime(tzinfo=UTC)
    assert nxt > datetime.now(UTC)
    assert (nxt.minute, nxt.second) == (0, 0)  # the tick itself, no jitter added
    assert upd.retry_policy.initial_backoff.seconds == 30  # untouched sub-fields keep their values

    p = acme.call("PauseSchedule", S.PauseScheduleRequest(schedule_id=s.id, reason="maintenance")).schedule
    assert p.paused and not p.HasField("next_run_at") and p.version == 3
    assert acme.call("PauseSchedule", S.PauseScheduleRequest(schedule_id=s.id)).schedule.version == 3  # no-op
    r = acme.call("ResumeSchedule", S.ResumeScheduleRequest(schedule_id=s.id, expected_version=3)).schedule
    assert not r.paused and r.HasField("next_run_at") and r.version == 4

    d = acme.call("DeleteSchedule", S.DeleteScheduleRequest(schedule_id=s.id, expected_version=4, reason="done"))
    assert d.cancelled_count == 0
    assert acme.fails("GetSchedule", S.GetScheduleRequest(schedule_id=s.id)).code == C.NOT_FOUND
    assert acme.fails("PauseSchedule", S.PauseScheduleRequest(schedule_id=s.id)).code == C.NOT_FOUND
    cluster = node[0]
    kinds = [r[0] for r in cluster.sql("SELECT kind FROM events WHERE schedule_id = %s ORDER BY id", s.id)]
    assert kinds == ["schedule_created", "schedule_updated", "schedule_paused", "schedule_resumed",
                     "schedule_deleted"]
    actors = {r[0] for r in cluster.sql("SELECT actor FROM events WHERE schedule_id = %s", s.id)}
    assert actors == {"acme-ci"}
    ev = acme.call("ListEvents", admin_pb2.ListEventsRequest(schedule_id=s.id, kind="schedule_updated")).events
    assert json.loads(ev[0].data_json)["fields"] == ["cron", "retry_policy"]


def test_create_refusals_name_the_field_or_say_why(acme: Api, admin: Api, node: tuple[ProcessCluster, str]) -> None:
    bad = {
        "schedule.cron": dict(cron="0 0 1 1"),
        "schedule.timezone": dict(timezone="Mars/Olympus"),
        "schedule.misfire_policy": dict(misfire_policy=0),
        "schedule.name": dict(name=""),
        "schedule.id": dict(id="not-a-uuid"),
        "schedule.payload_json": dict(payload_json="{nope"),
        "schedule.jitter": dict(jitter={"seconds": 7200}),
        "schedule.priority": dict(priority=42),
        "schedule.retry_policy.backoff_multiplier": dict(retry_policy=common_pb2.RetryPolicy(backoff_multiplier=0.5)),
    }
    for field, kw in bad.items():
        f = acme.fails("CreateSchedule", S.CreateScheduleRequest(schedule=common_pb2.Schedule(
            **{**dict(name=name(), cron=YEARLY, timezone="UTC", job_type="j", misfire_policy=1), **kw})))
        assert f.code == C.INVALID_ARGUMENT and f.details.startswith(f"{field}: "), (field, f)
    n = name()
    acme.create(name=n)
    f = acme.fails("CreateSchedule", S.CreateScheduleRequest(schedule=common_pb2.Schedule(
        name=n, cron=YEARLY, timezone="UTC", job_type="j", misfire_policy=1)))
    assert f.code == C.ALREADY_EXISTS
    f = acme.fails("CreateSchedule", S.CreateScheduleRequest(schedule=common_pb2.Schedule(
        tenant="globex", name=name(), cron=YEARLY, timezone="UTC", job_type="j", misfire_policy=1)))
    assert f.code == C.PERMISSION_DENIED
    f = admin.fails("CreateSchedule", S.CreateScheduleRequest(schedule=common_pb2.Schedule(
        name=name(), cron=YEARLY, timezone="UTC", job_type="j", misfire_policy=1)))
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("schedule.tenant: ")
    assert admin.create(name=name(), tenant="initech").tenant == "initech"
    node[0].sql("INSERT INTO tenants (id, max_schedules) VALUES ('quota-co', 1) RETURNING id")
    admin.create(name=name(), tenant="quota-co")
    f = admin.fails("CreateSchedule", S.CreateScheduleRequest(schedule=common_pb2.Schedule(
        tenant="quota-co", name=name(), cron=YEARLY, timezone="UTC", job_type="j", misfire_policy=1)))
    assert f.code == C.RESOURCE_EXHAUSTED


def test_update_mask_and_version_rules(acme: Api) -> None:
    s = acme.create(name=name())

    def update(paths: list[str], version: int = 0, **fields: object) -> S.UpdateScheduleRequest:
        return S.UpdateScheduleRequest(schedule=common_pb2.Schedule(id=s.id, **fields),  # type: ignore[arg-type]
                                       update_mask=FieldMask(paths=paths), expected_version=version)

    for paths, needle in [([], "update_mask: required"), (["nope"], "update_mask: unknown path"),
                          (["version"], "update_mask: 'version' is output only or immutable"),
                          (["paused"], "update_mask: 'paused'"), (["*", "cron"], "update_mask: '*'")]:
        f = acme.fails("UpdateSchedule", update(paths))
        assert f.code == C.INVALID_ARGUMENT and f.details.startswith(needle), f
    f = acme.fails("UpdateSchedule", update(["cron"], cron="bad"))
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("schedule.cron: ")
    f = acme.fails("UpdateSchedule", update(["misfire_policy"]))  # named but unset: required
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("schedule.misfire_policy: ")
    acme.call("UpdateSchedule", update(["name"], name=name()))
    f = acme.fails("UpdateSchedule", update(["name"], 1, name=name()))
    assert f.code == C.FAILED_PRECONDITION and f.details == "version conflict: expected 1, found 2"
    other = acme.create(name=name())
    f = acme.fails("UpdateSchedule", update(["name"], name=other.name))
    assert f.code == C.ALREADY_EXISTS
    every = acme.call("UpdateSchedule", update(["*"], name=s.name, cron=YEARLY, timezone="Asia/Tokyo", job_type="k",
                                               misfire_policy=common_pb2.MISFIRE_POLICY_CATCH_UP)).schedule
    assert (every.timezone, every.job_type, every.max_catch_up, every.payload_json) == ("Asia/Tokyo", "k", 10, "{}")
    f = acme.fails("DeleteSchedule", S.DeleteScheduleRequest(schedule_id=s.id, expected_version=1))
    assert f.code == C.FAILED_PRECONDITION


def test_credentials_are_required_except_for_health(node: tuple[ProcessCluster, str], acme: Api) -> None:
    req = S.ListSchedulesRequest()
    assert acme.fails("ListSchedules", req, metadata=()).code == C.UNAUTHENTICATED
    assert acme.fails("ListSchedules", req, metadata=(("authorization", "Basic abc"),)).code == C.UNAUTHENTICATED
    assert acme.fails("ListSchedules", req, metadata=(("authorization", "Bearer wrong"),)).code == C.UNAUTHENTICATED
    assert acme.fails("ClusterStatus", admin_pb2.ClusterStatusRequest(), metadata=()).code == C.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(acme.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(acme.channel)
    answers = list(reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                timeout=5))
    names = {s.name for s in answers[0].list_services_response.service}
    assert {"cronwheel.v1.SchedulerService", "cronwheel.v1.AdminService"} <= names


def test_cluster_status_is_admin_only(acme: Api, admin: Api) -> None:
    assert acme.fails("ClusterStatus", admin_pb2.ClusterStatusRequest()).code == C.PERMISSION_DENIED
    st = admin.call("ClusterStatus", admin_pb2.ClusterStatusRequest())
    assert [m.node_id for m in st.members] == ["n1"] and st.partition_count == 8
    assert [q.priority for q in st.queue_depths] == [1, 2, 3]


def test_trigger_runs_now_and_backfill_runs_each_missed_tick_once(acme: Api, node: tuple[ProcessCluster, str]
                                                                  ) -> None:
    s = acme.create(name=name(), cron="0 * * * *", paused=True)
    before = time.time()
    t = acme.call("TriggerSchedule", S.TriggerScheduleRequest(schedule_id=s.id, payload_json='[1, 2]',
                                                               reason="hotfix"))
    e = t.execution
    assert not t.deduplicated and e.state == common_pb2.EXECUTION_STATE_QUEUED
    assert e.trigger == common_pb2.TRIGGER_MANUAL
    assert before - 1 < e.scheduled_for.ToDatetime().replace(tzinfo=UTC).timestamp() < time.time() + 1
    assert e.payload_json == "[1, 2]" and e.schedule_id == s.id
    assert acme.call("GetSchedule", S.GetScheduleRequest(schedule_id=s.id)).schedule.paused  # unchanged
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=5)
    req = S.BackfillScheduleRequest(schedule_id=s.id, range=common_pb2.TimeRange(start_time=at(start),
                                                                                  end_time=at(end)))
    b = acme.call("BackfillSchedule", req)
    assert (b.created_count, b.existing_count, len(b.execution_ids)) == (5, 0, 5)
    again = acme.call("BackfillSchedule", req)
    assert (again.created_count, again.existing_count) == (0, 5)
    got = node[0].sql("SELECT scheduled_for FROM executions WHERE schedule_id = %s AND trigger = 'backfill' "
                      "ORDER BY scheduled_for", s.id)
    assert [r[0] for r in got] == [start + timedelta(hours=h) for h in range(5)]
    future = S.BackfillScheduleRequest(schedule_id=s.id, range=common_pb2.TimeRange(
        start_time=at(start), end_time=at(datetime.now(UTC) + timedelta(hours=1))))
    assert acme.fails("BackfillSchedule", future).details.startswith("range.end_time: ")
    assert acme.fails("BackfillSchedule", S.BackfillScheduleRequest(schedule_id=s.id)).code == C.INVALID_ARGUMENT
    huge = S.BackfillScheduleRequest(schedule_id=s.id, range=common_pb2.TimeRange(
        start_time=at(end - timedelta(days=500)), end_time=at(end)))
    f = acme.fails("BackfillSchedule", huge)
    assert f.code == C.INVALID_ARGUMENT and "10000" in f.details


def test_submit_deduplicates_by_idempotency_key(acme: Api) -> None:
    key = name()
    a = acme.call("SubmitJob", S.SubmitJobRequest(type="email", payload_json='{"to": "a"}', idempotency_key=key))
    b = acme.call("SubmitJob", S.SubmitJobRequest(type="other", idempotency_key=key))
    assert not a.deduplicated and b.deduplicated and a.execution == b.execution
    assert a.execution.state == common_pb2.EXECUTION_STATE_QUEUED and a.execution.trigger == common_pb2.TRIGGER_SUBMIT
    later = acme.submit(run_at=at(datetime.now(UTC) + timedelta(hours=1)))
    assert later.state == common_pb2.EXECUTION_STATE_SCHEDULED
    for req, field in [(S.SubmitJobRequest(), "type"), (S.SubmitJobRequest(type="t", payload_json="nan"),
                                                        "payload_json"),
                       (S.SubmitJobRequest(type="t", run_at=at(datetime(2100, 1, 1, tzinfo=UTC))), "run_at"),
                       (S.SubmitJobRequest(type="t", idempotency_key="k" * 201), "idempotency_key"),
                       (S.SubmitJobRequest(type="t", timeout={"seconds": 0, "nanos": 1000}), "timeout")]:
        f = acme.fails("SubmitJob", req)
        assert f.code == C.INVALID_ARGUMENT and f.details.startswith(f"{field}: "), f
    assert acme.fails("SubmitJob", S.SubmitJobRequest(tenant="globex", type="t")).code == C.PERMISSION_DENIED


def test_list_schedules_pages_through_everything_in_creation_order(acme: Api) -> None:
    jt = name()
    made = [acme.create(name=name(), job_type=jt).id for _ in range(7)]
    seen, token, pages = [], "", 0
    while True:
        resp = acme.call("ListSchedules", S.ListSchedulesRequest(job_type=jt, page_size=3, page_token=token))
        seen += [s.id for s in resp.schedules]
        pages += 1
        token = resp.next_page_token
        if not token:
            break
    assert seen == made and pages == 3
    first = acme.call("ListSchedules", S.ListSchedulesRequest(job_type=jt, page_size=3))
    f = acme.fails("ListSchedules", S.ListSchedulesRequest(job_type="other", page_size=3,
                                                           page_token=first.next_page_token))
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("page_token: ")
    assert acme.fails("ListSchedules", S.ListSchedulesRequest(page_token="garbage!")).code == C.INVALID_ARGUMENT
    assert acme.fails("ListSchedules", S.ListSchedulesRequest(page_size=1001)).details.startswith("page_size: ")
    assert acme.fails("ListSchedules", S.ListSchedulesRequest(tenant="globex")).code == C.PERMISSION_DENIED
    paused = acme.call("ListSchedules", S.ListSchedulesRequest(job_type=jt, paused=True))
    assert list(paused.schedules) == []


def test_list_executions_filters_and_pages_newest_first(acme: Api) -> None:
    jt = name()
    made = [acme.submit(type=jt) for _ in range(5)]
    seen, token = [], ""
    while True:
        resp = acme.call("ListExecutions", S.ListExecutionsRequest(type=jt, page_size=2, page_token=token))
        seen += list(resp.executions)
        token = resp.next_page_token
        if not token:
            break
    assert [e.id for e in seen] == [e.id for e in sorted(made, key=lambda e: (e.scheduled_for.ToNanoseconds(), e.id),
                                                          reverse=True)]
    acme.call("CancelExecution", S.CancelExecutionRequest(execution_id=made[0].id))
    cancelled = acme.call("ListExecutions", S.ListExecutionsRequest(
        type=jt, states=[common_pb2.EXECUTION_STATE_CANCELLED])).executions
    assert [e.id for e in cancelled] == [made[0].id]
    f = acme.fails("ListExecutions", S.ListExecutionsRequest(states=[0]))
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("states: ")
    assert acme.fails("ListExecutions", S.ListExecutionsRequest(schedule_id="x")).code == C.INVALID_ARGUMENT
    unknown = acme.call("ListExecutions", S.ListExecutionsRequest(schedule_id=str(uuid.uuid4())))
    assert list(unknown.executions) == []


def test_cancel_and_retry_follow_the_state_machine(acme: Api, node: tuple[ProcessCluster, str]) -> None:
    e = acme.submit(retry_policy=common_pb2.RetryPolicy(max_attempts=2))
    c = acme.call("CancelExecution", S.CancelExecutionRequest(execution_id=e.id, reason="wrong payload")).execution
    assert c.state == common_pb2.EXECUTION_STATE_CANCELLED and c.state_reason == "cancelled by acme-ci: wrong payload"
    assert acme.call("CancelExecution", S.CancelExecutionRequest(execution_id=e.id)).execution == c
    r = acme.call("RetryExecution", S.RetryExecutionRequest(execution_id=e.id, additional_attempts=3)).execution
    assert r.state == common_pb2.EXECUTION_STATE_QUEUED and r.max_attempts == 3 and r.id == e.id
    f = acme.fails("RetryExecution", S.RetryExecutionRequest(execution_id=e.id))
    assert f.code == C.FAILED_PRECONDITION
    node[0].sql("UPDATE executions SET state = 'succeeded' WHERE id = %s RETURNING id", e.id)
    assert acme.fails("CancelExecution", S.CancelExecutionRequest(execution_id=e.id)).code == C.FAILED_PRECONDITION
    f = acme.fails("RetryExecution", S.RetryExecutionRequest(execution_id=e.id, additional_attempts=5000))
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("additional_attempts: ")
    f = acme.fails("CancelExecution", S.CancelExecutionRequest(execution_id=e.id, reason="x" * 1001))
    assert f.code == C.INVALID_ARGUMENT and f.details.startswith("reason: ")
    assert acme.fails("GetExecution", S.GetExecutionRequest(execution_id=str(uuid.uuid4()))).code == C.NOT_FOUND
    assert acme.fails("GetExecution", S.GetExecutionRequest(execution_id="nope")).details.startswith("execution_id: ")
    later = acme.submit(run_at=at(datetime.now(UTC) + timedelta(hours=2)))
    assert acme.call("CancelExecution", S.CancelExecutionRequest(execution_id=later.id)).execution.state == \
        common_pb2.EXECUTION_STATE_CANCELLED


def test_delete_with_cancel_pending_cancels_queued_runs(acme: Api) -> None:
    s = acme.create(name=name())
    runs = [acme.call("TriggerSchedule", S.TriggerScheduleRequest(schedule_id=s.id)).execution for _ in range(2)]
    d = acme.call("DeleteSchedule", S.DeleteScheduleRequest(schedule_id=s.id, cancel_pending=True))
    assert d.cancelled_count == 2
    for r in runs:
        assert acme.call("GetExecution", S.GetExecutionRequest(execution_id=r.id)).execution.state == \
            common_pb2.EXECUTION_STATE_CANCELLED
    listed = acme.call("ListExecutions", S.ListExecutionsRequest(schedule_id=s.id)).executions
    assert len(listed) == 2  # a deleted schedule's executions are still listed


def test_preview_of_saved_and_unsaved_specs(acme: Api) -> None:
    s = acme.create(name=name(), cron="30 2 * * *", timezone="Europe/Berlin", jitter={"seconds": 600})
    after = at(datetime(2025, 3, 28, 12, tzinfo=UTC))
    saved = acme.call("PreviewSchedule", S.PreviewScheduleRequest(schedule_id=s.id, count=3, start_time=after)).ticks
    assert [t.local_time for t in saved] == ["2025-03-29T02:30:00+01:00", "2025-03-30T03:00:00+02:00",
                                             "2025-03-31T02:30:00+02:00"]
    assert "does not exist" in saved[1].note and saved[0].note == ""
    assert all(0 <= t.run_at.ToSeconds() - t.scheduled_for.ToSeconds() < 600 for t in saved)
    unsaved = acme.call("PreviewSchedule", S.PreviewScheduleRequest(
        spec=S.ScheduleSpec(cron="30 2 * * *", timezone="Europe/Berlin"), count=3, start_time=after)).ticks
    assert [t.scheduled_for for t in unsaved] == [t.scheduled_for for t in saved]
    assert len(acme.call("PreviewSchedule", S.PreviewScheduleRequest(
        spec=S.ScheduleSpec(cron="@hourly", timezone="UTC"))).ticks) == 10
    for req, prefix in [(S.PreviewScheduleRequest(), "source: "),
                        (S.PreviewScheduleRequest(spec=S.ScheduleSpec(cron="* *", timezone="UTC")), "spec.cron: "),
                        (S.PreviewScheduleRequest(spec=S.ScheduleSpec(cron="* * * * *", timezone="X/Y")),
                         "spec.timezone: "),
                        (S.PreviewScheduleRequest(schedule_id=s.id, count=1001), "count: ")]:
        f = acme.fails("PreviewSchedule", req)
        assert f.code == C.INVALID_ARGUMENT and f.details.startswith(prefix), f


def test_explain_accounts_for_the_ticks_of_a_window(acme: Api) -> None:
    s = acme.create(name=name(), cron="0 * * * *", paused=True)
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = common_pb2.TimeRange(start_time=at(end - timedelta(hours=3)), end_time=at(end))
    acme.call("BackfillSchedule", S.BackfillScheduleRequest(schedule_id=s.id, range=window))
    ticks = acme.call("ExplainSchedule", S.ExplainScheduleRequest(schedule_id=s.id, range=window)).ticks
    assert [t.scheduled_for.ToDatetime(tzinfo=UTC) for t in ticks] == [end - timedelta(hours=h) for h in (3, 2, 1)]
    assert all(t.execution_id for t in ticks)
    for req, code in [(S.ExplainScheduleRequest(schedule_id=str(uuid.uuid4()), range=window), C.NOT_FOUND),
                      (S.ExplainScheduleRequest(schedule_id="x", range=window), C.INVALID_ARGUMENT),
                      (S.ExplainScheduleRequest(schedule_id=s.id), C.INVALID_ARGUMENT),
                      (S.ExplainScheduleRequest(schedule_id=s.id, range=window, page_size=-1), C.INVALID_ARGUMENT)]:
        assert acme.fails("ExplainSchedule", req).code == code


def test_list_events_pages_and_keeps_tenants_apart(acme: Api, admin: Api) -> None:
    s = acme.create(name=name())
    for i in range(3):
        acme.call("PauseSchedule" if i % 2 == 0 else "ResumeSchedule",
                  S.PauseScheduleRequest(schedule_id=s.id) if i % 2 == 0 else S.ResumeScheduleRequest(schedule_id=s.id))
    page1 = acme.call("ListEvents", admin_pb2.ListEventsRequest(schedule_id=s.id, page_size=2))
    page2 = acme.call("ListEvents", admin_pb2.ListEventsRequest(schedule_id=s.id, page_size=2,
                                                                page_token=page1.next_page_token))
    kinds = [e.kind for e in [*page1.events, *page2.events]]
    assert kinds == ["schedule_created", "schedule_paused", "schedule_resumed", "schedule_paused"]
    assert not page2.next_page_token
    assert all(e.tenant == "acme" for e in acme.call("ListEvents", admin_pb2.ListEventsRequest()).events)
    assert acme.fails("ListEvents", admin_pb2.ListEventsRequest(tenant="globex")).code == C.PERMISSION_DENIED
    other = admin.create(name=name(), tenant="hooli")
    assert acme.call("ListEvents", admin_pb2.ListEventsRequest(schedule_id=other.id)).events == []
    seen = admin.call("ListEvents", admin_pb2.ListEventsRequest(kind="schedule_created", page_size=1000)).events
    assert {"acme", "hooli"} <= {e.tenant for e in seen}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls_with_a_token(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        from .api_cluster import write_auth_file

        n = c.start_node("tls", "--auth-file", str(write_auth_file(d / "auth.json")),
                         "--tls-cert", str(d / "cert.pem"), "--tls-key", str(d / "key.pem"))
        creds = grpc.ssl_channel_credentials(root_certificates=(d / "cert.pem").read_bytes())
        api = Api(n.address, "acme", channel=grpc.secure_channel(n.address, creds))
        assert api.create(name="over-tls").tenant == "acme"
        plain = Api(n.address, "acme")
        with pytest.raises(grpc.RpcError):
            plain.call("ListSchedules", S.ListSchedulesRequest())
        c.start_node("tls2", "--auth-file", str(d / "auth.json"),
                     "--tls-cert", str(d / "cert.pem"), "--tls-key", str(d / "key.pem"))
        c.wait_converged(["tls", "tls2"])
        admin = Api(n.address, "admin", channel=grpc.secure_channel(n.address, creds))
        members = admin.call("ClusterStatus", admin_pb2.ClusterStatusRequest()).members
        # The peer answered over TLS (its self-view, no token forwarded): its figures are present.
        assert sorted(m.node_id for m in members) == ["tls", "tls2"] and all(m.HasField("stats_at") for m in members)
