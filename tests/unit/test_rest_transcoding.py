"""The REST transcoder's pure half (cluster/api/rest.py): routes from the annotations, requests
from paths, queries and bodies, errors in JSON (issue 51). The calls themselves are shown on a
real cluster in tests/e2e/test_rest_api.py."""

from __future__ import annotations

import json

import grpc
import pytest
from google.rpc import error_details_pb2

from cronwheel.cluster.api import rest
from cronwheel.v1 import common_pb2, scheduler_pb2

ROUTES = rest.Routes()
SID = "3f2b8a3e-5d1c-4b8e-9a77-0c2e4f6a1b90"


def build(verb: str, path: str, query: str = "", body: bytes = b"") -> object:
    route, variables = ROUTES.match(verb, path)
    assert route is not None, (verb, path)
    assert isinstance(variables, dict)
    return rest.request_message(route, variables, query, body)


def test_every_rpc_has_a_route_and_no_two_routes_collide() -> None:
    assert ROUTES.missing == []
    assert len({(r.verb, r.template) for r in ROUTES.all}) == len(ROUTES.all)


def test_custom_method_fills_the_path_variable_and_the_body() -> None:
    req = build("POST", f"/v1/schedules/{SID}:pause", body=b'{"reason": "maintenance"}')
    assert req == scheduler_pb2.PauseScheduleRequest(schedule_id=SID, reason="maintenance")


def test_literal_custom_method_wins_over_a_templated_path() -> None:
    route, _ = ROUTES.match("POST", "/v1/executions:lease")
    assert route is not None and route.rpc == "LeaseExecutions"


def test_body_field_route_takes_the_schedule_as_the_body() -> None:
    req = build("POST", "/v1/schedules", body=b'{"name": "n", "misfire_policy": "MISFIRE_POLICY_RUN_ONCE"}')
    assert req == scheduler_pb2.CreateScheduleRequest(
        schedule=common_pb2.Schedule(name="n", misfire_policy=common_pb2.MISFIRE_POLICY_RUN_ONCE))


def test_query_parameters_are_typed_by_the_descriptor_and_repeat() -> None:
    req = build("GET", "/v1/executions", f"schedule_id={SID}&states=EXECUTION_STATE_FAILED"
                "&states=EXECUTION_STATE_CANCELLED&page_size=5&page_token=abc&scheduled_for.start_time=2026-01-01T00:00:00Z")
    assert isinstance(req, scheduler_pb2.ListExecutionsRequest)
    assert list(req.states) == [common_pb2.EXECUTION_STATE_FAILED, common_pb2.EXECUTION_STATE_CANCELLED]
    assert (req.page_size, req.page_token, req.schedule_id) == (5, "abc", SID)
    assert req.scheduled_for.start_time.seconds == 1767225600


@pytest.mark.parametrize(("verb", "path", "query", "body", "field"), [
    ("POST", "/v1/schedules", "", b'{"name": "n", "misfire": "run_once"}', "schedule.misfire"),
    ("POST", "/v1/schedules", "", b'{"retry_policy": {"max_attempts": "many"}}', "schedule.retry_policy.max_attempts"),
    ("POST", "/v1/jobs", "", b'{"type": "t", "run_at": "tomorrow"}', "run_at"),
    ("GET", "/v1/schedules", "page_size=ten", b"", "page_size"),
    ("GET", "/v1/schedules", "paused=yes", b"", "paused"),
    ("GET", "/v1/schedules", "pageSize2=1", b"", "pageSize2"),
    ("POST", "/v1/jobs", "type=t", b"{}", "type"),
])
def test_a_bad_field_is_refused_naming_it(verb: str, path: str, query: str, body: bytes, field: str) -> None:
    with pytest.raises(rest.BadRequest) as info:
        build(verb, path, query, body)
    assert info.value.field == field
    status = rest.bad_request_status(info.value)
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad) and bad.field_violations[0].field == field


def test_lower_camel_case_is_read_as_the_json_mapping_says() -> None:
    req = build("POST", "/v1/jobs", body=b'{"type": "t", "idempotencyKey": "k"}')
    assert req == scheduler_pb2.SubmitJobRequest(type="t", idempotency_key="k")


def test_unknown_path_is_404_and_known_path_with_another_verb_is_405() -> None:
    assert ROUTES.match("GET", "/v1/nothing") == (None, False)
    assert ROUTES.match("PUT", "/v1/schedules") == (None, True)


def test_status_table_is_grpc_gateways() -> None:
    assert rest.HTTP_STATUS[grpc.StatusCode.UNAUTHENTICATED] == 401
    assert rest.HTTP_STATUS[grpc.StatusCode.PERMISSION_DENIED] == 403
    assert rest.HTTP_STATUS[grpc.StatusCode.NOT_FOUND] == 404
    assert rest.HTTP_STATUS[grpc.StatusCode.FAILED_PRECONDITION] == 400
    assert rest.HTTP_STATUS[grpc.StatusCode.RESOURCE_EXHAUSTED] == 429
    assert rest.HTTP_STATUS[grpc.StatusCode.CANCELLED] == 499
    assert set(rest.HTTP_STATUS) == set(grpc.StatusCode)


def test_error_body_carries_code_message_and_field_violations() -> None:
    status = rest.bad_request_status(rest.BadRequest("schedule.timezone", "unknown zone"))
    body = json.loads(rest.error_json(grpc.StatusCode.INVALID_ARGUMENT, status.message, status))
    assert body["code"] == 3 and body["message"] == "schedule.timezone: unknown zone"
    assert body["details"][0]["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert body["details"][0]["field_violations"][0]["field"] == "schedule.timezone"
    plain = json.loads(rest.error_json(grpc.StatusCode.NOT_FOUND, "gone"))
    assert plain == {"code": 5, "message": "gone", "details": []}


def test_update_mask_names_paths_by_the_apis_names_or_in_lower_camel_case() -> None:
    for mask in ("cron,job_type,retry_policy.max_attempts", "cron,jobType,retryPolicy.maxAttempts"):
        req = build("PATCH", f"/v1/schedules/{SID}", body=json.dumps({"schedule": {"cron": "* * * * *"},
                                                                      "update_mask": mask}).encode())
        assert isinstance(req, scheduler_pb2.UpdateScheduleRequest)
        assert list(req.update_mask.paths) == ["cron", "job_type", "retry_policy.max_attempts"]
        assert req.schedule.id == SID


def _rich_schedule() -> common_pb2.Schedule:
    s = common_pb2.Schedule(id=SID, tenant="acme", name="n", cron="0 0 * * *", timezone="Europe/Amsterdam",
                            job_type="t", payload_json='{"a": 1}', priority=common_pb2.PRIORITY_BULK,
                            misfire_policy=common_pb2.MISFIRE_POLICY_RUN_ONCE, max_catch_up=3, version=2**40,
                            keep_last=0)
    s.retry_policy.max_attempts = 5
    s.retry_policy.backoff_multiplier = 1.5
    s.retry_policy.initial_backoff.FromJsonString("30s")
    s.jitter.FromJsonString("120.5s")
    s.next_run_at.FromJsonString("2027-01-01T00:00:00.123456Z")
    return s


def test_answers_are_written_as_json_format_writes_them() -> None:
    from google.protobuf import json_format

    from cronwheel.cluster.api import rest_json
    from cronwheel.v1 import admin_pb2

    status = admin_pb2.ClusterStatusResponse(cluster_name="c", partition_count=4)
    status.members.add(node_id="n1", partitions=[1, 2], egress_allow=["127.0.0.0/8"])
    samples = [_rich_schedule(), common_pb2.Schedule(), scheduler_pb2.ListExecutionsResponse(
        executions=[common_pb2.Execution(id=SID, state=common_pb2.EXECUTION_STATE_FAILED, fencing_token=7)]),
        status, scheduler_pb2.UpdateScheduleRequest(update_mask={"paths": ["job_type", "retry_policy.max_attempts"]})]
    for msg in samples:
        assert rest_json.render(msg) == json_format.MessageToDict(
            msg, always_print_fields_with_no_presence=True, preserving_proto_field_name=True), type(msg)


def test_bodies_are_read_as_json_format_reads_them() -> None:
    from google.protobuf import json_format

    from cronwheel.cluster.api import rest_json

    doc = json_format.MessageToDict(_rich_schedule(), preserving_proto_field_name=True)
    camel = json_format.MessageToDict(_rich_schedule())
    for d in (doc, camel, {**doc, "version": 2**40, "max_catch_up": "3", "jitter": None}):
        fast, ref = common_pb2.Schedule(), common_pb2.Schedule()
        rest_json.parse(d, fast)
        json_format.ParseDict(d, ref)
        assert fast == ref


@pytest.mark.parametrize("text", ["2027-01-01T00:00:00Z", "1970-01-01T00:00:00.5Z", "2026-12-07T15:47:51.123456789Z",
                                  "0001-01-01T00:00:00Z", "2027-03-01T10:00:00+01:00", "1969-12-31T23:59:59.999Z"])
def test_timestamps_are_read_as_json_format_reads_them(text: str) -> None:
    from google.protobuf import json_format

    from cronwheel.cluster.api import rest_json

    fast, ref = scheduler_pb2.SubmitJobRequest(), scheduler_pb2.SubmitJobRequest()
    rest_json.parse({"run_at": text}, fast)
    json_format.ParseDict({"run_at": text}, ref)
    assert fast == ref


@pytest.mark.parametrize(("seconds", "nanos"), [(0, 0), (1_800_000_000, 500_000_000), (1_800_000_000, 123_456_000),
                                                (1_800_000_000, 123_456_789), (-1, 999_000_000),
                                                (-62135596800, 0), (253402300799, 999_999_999)])
def test_timestamps_are_written_as_json_format_writes_them(seconds: int, nanos: int) -> None:
    from cronwheel.cluster.api import rest_json

    run = common_pb2.Execution()
    run.run_at.seconds, run.run_at.nanos = seconds, nanos
    assert rest_json.render(run)["run_at"] == run.run_at.ToJsonString()


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/jobs", b'{"type": "t", "run_at": "2027-13-01T00:00:00Z"}', "run_at"),
    ("/v1/jobs", b'{"type": "t", "run_at": "2027-02-30T00:00:00Z"}', "run_at"),
    ("/v1/schedules", b'{"retry_policy": {"max_attempts": 99999999999}}', "schedule.retry_policy.max_attempts"),
    ("/v1/schedules", b'{"version": "99999999999999999999999"}', "schedule.version"),
])
def test_a_value_the_field_cannot_hold_is_refused_naming_it(path: str, body: bytes, field: str) -> None:
    """Not a ValueError out of the transcoder: `cronwheel rest` would drop the connection unanswered."""
    with pytest.raises(rest.BadRequest) as info:
        build("POST", path, body=body)
    assert info.value.field == field


def _probe_class() -> type:
    """A proto3 message with the field types the contract has none of (bytes, 32-bit float)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="rest_probe.proto", package="restprobe", syntax="proto3")
    probe = fdp.message_type.add(name="Probe")
    t, label = descriptor_pb2.FieldDescriptorProto, descriptor_pb2.FieldDescriptorProto
    probe.field.add(name="data", number=1, type=t.TYPE_BYTES, label=label.LABEL_OPTIONAL, json_name="data")
    probe.field.add(name="ratio", number=2, type=t.TYPE_FLOAT, label=label.LABEL_OPTIONAL, json_name="ratio")
    probe.field.add(name="chunks", number=3, type=t.TYPE_BYTES, label=label.LABEL_REPEATED, json_name="chunks")
    probe.field.add(name="weight", number=4, type=t.TYPE_DOUBLE, label=label.LABEL_OPTIONAL, json_name="weight")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("restprobe.Probe"))


def test_bytes_and_32_bit_floats_are_read_and_written_as_json_format_does() -> None:
    from google.protobuf import json_format

    from cronwheel.cluster.api import rest_json

    probe = _probe_class()
    msg = probe(data=b"\xfb\xff-_", ratio=0.1, chunks=[b"", b"\x00\x01"], weight=float("-inf"))
    want = json_format.MessageToDict(msg, always_print_fields_with_no_presence=True, preserving_proto_field_name=True)
    assert rest_json.render(msg) == want
    for doc in (want, {"data": "-_8tXw", "ratio": "0.1", "chunks": ["AAE="], "weight": "NaN"}):
        fast, ref = probe(), probe()
        rest_json.parse(doc, fast)
        json_format.ParseDict(doc, ref)
        assert fast.SerializeToString() == ref.SerializeToString(), doc
    with pytest.raises(rest_json.JsonError) as info:
        rest_json.parse({"data": 5}, probe())
    assert info.value.path == "data"


def test_a_body_nested_deeper_than_json_reads_is_refused() -> None:
    """json.loads raises RecursionError, not ValueError, on such a body: it too is a 400."""
    with pytest.raises(rest.BadRequest) as info:
        build("POST", "/v1/jobs", body=b"[" * 100_000 + b"]" * 100_000)
    assert info.value.field == "" and "not JSON" in str(info.value)
