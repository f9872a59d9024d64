"""gRPC as the ecosystem expects, against a real node process: reflection v1 (what grpcurl and
Postman ask first) as well as v1alpha, health per service, INVALID_ARGUMENT with a
google.rpc.BadRequest detail naming the field, per-method RPC metrics and process_* metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cronwheel.cluster.api.reflection import V1_METHOD, v1_messages
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import common_pb2, scheduler_pb2

from .api_cluster import TOKENS, YEARLY, Api, api_cluster
from .ops_helpers import CRONWHEEL_SERVICES, SERVING, health, value

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as got:
        yield got


def reflect_v1(address: str, **request: Any) -> Any:
    """One request on grpc.reflection.v1, with the v1 messages (package grpc.reflection.v1)."""
    req_cls, resp_cls = v1_messages()
    assert req_cls.DESCRIPTOR.full_name == "grpc.reflection.v1.ServerReflectionRequest"
    with grpc.insecure_channel(address) as ch:
        call = ch.stream_stream(V1_METHOD, request_serializer=req_cls.SerializeToString,
                                response_deserializer=resp_cls.FromString)
        (answer,) = list(call(iter([req_cls(**request)]), timeout=10))
    return answer


def test_reflection_v1_lists_every_service(node: tuple[ProcessCluster, str]) -> None:
    answer = reflect_v1(node[1], list_services="")
    names = {s.name for s in answer.list_services_response.service}
    assert {*CRONWHEEL_SERVICES, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names


def test_reflection_v1_resolves_a_method_and_a_call_built_from_it_works(node: tuple[ProcessCluster, str]) -> None:
    """What grpcurl does: fetch the file holding the service, build the request type from the
    descriptors alone (no generated code), call the method."""
    answer = reflect_v1(node[1], file_containing_symbol="cronwheel.v1.SchedulerService")
    pool = descriptor_pool.DescriptorPool()
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in answer.file_descriptor_response.file_descriptor_proto]
    added: set[str] = set()
    while len(added) < len(files):  # dependencies first
        for f in files:
            if f.name not in added and all(d in added for d in f.dependency):
                pool.Add(f)
                added.add(f.name)
    method = pool.FindMethodByName("cronwheel.v1.SchedulerService.ListSchedules")
    assert method.input_type.full_name == "cronwheel.v1.ListSchedulesRequest"
    assert "page_size" in method.input_type.fields_by_name
    sched_file = next(f for f in files if f.name == "cronwheel/v1/scheduler.proto")
    assert sched_file.options.go_package.endswith(";cronwheelv1")
    assert sched_file.options.java_package == "dev.cronwheel.v1"
    req_cls = message_factory.GetMessageClass(method.input_type)
    resp_cls = message_factory.GetMessageClass(method.output_type)
    with grpc.insecure_channel(node[1]) as ch:
        call = ch.unary_unary("/cronwheel.v1.SchedulerService/ListSchedules",
                              request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString)
        resp = call(req_cls(page_size=5), metadata=(("authorization", f"Bearer {TOKENS['acme'][0]}"),), timeout=10)
    assert resp.DESCRIPTOR.full_name == "cronwheel.v1.ListSchedulesResponse"


def test_reflection_v1alpha_still_answers(node: tuple[ProcessCluster, str]) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(node[1]) as ch:
        (answer,) = list(reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
    assert "cronwheel.v1.SchedulerService" in {s.name for s in answer.list_services_response.service}


def test_health_answers_serving_per_service_and_not_found_for_an_unknown_one(node: tuple[ProcessCluster, str]
                                                                            ) -> None:
    for service in ("", *CRONWHEEL_SERVICES, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"):
        assert health(node[1], service) == SERVING, service
    assert health(node[1], "cronwheel.v1.NoSuchService") == -1  # NOT_FOUND


def test_invalid_argument_carries_a_bad_request_detail_naming_the_field(node: tuple[ProcessCluster, str]) -> None:
    acme = Api(node[1], "acme")
    bad = common_pb2.Schedule(name="bad-cron", cron="* * *", timezone="UTC", job_type="job",
                              misfire_policy=common_pb2.MISFIRE_POLICY_SKIP)
    with pytest.raises(grpc.RpcError) as info:
        acme.call("CreateSchedule", scheduler_pb2.CreateScheduleRequest(schedule=bad))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(info.value)
    assert status is not None and status.message == info.value.details()
    (detail,) = status.details
    assert detail.Is(error_details_pb2.BadRequest.DESCRIPTOR)
    br = error_details_pb2.BadRequest()
    detail.Unpack(br)
    (violation,) = br.field_violations
    assert violation.field == "schedule.cron"
    assert info.value.details().startswith("schedule.cron: ")


def test_other_errors_carry_no_rich_detail(node: tuple[ProcessCluster, str]) -> None:
    acme = Api(node[1], "acme")
    with pytest.raises(grpc.RpcError) as info:
        acme.call("GetSchedule", scheduler_pb2.GetScheduleRequest(schedule_id="00000000-0000-0000-0000-000000000001"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert rpc_status.from_call(info.value) is None


def test_rpc_counts_and_latency_per_method_and_code_and_process_metrics(node: tuple[ProcessCluster, str]) -> None:
    cluster, address = node
    n1 = cluster.nodes["n1"]
    labels = {"service": "cronwheel.v1.SchedulerService", "method": "CreateSchedule"}
    before = value(n1, "cronwheel_grpc_server_handled_total", **labels, code="INVALID_ARGUMENT")
    acme = Api(address, "acme")
    ok = acme.create(name="metrics-ok", cron=YEARLY)
    assert ok.id
    bad = common_pb2.Schedule(name="m-bad", cron="nope", timezone="UTC", job_type="job")
    assert acme.fails("CreateSchedule", scheduler_pb2.CreateScheduleRequest(schedule=bad)).code == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert Api(address, None).fails("ListSchedules", scheduler_pb2.ListSchedulesRequest()).code == \
        grpc.StatusCode.UNAUTHENTICATED
    assert value(n1, "cronwheel_grpc_server_handled_total", **labels, code="INVALID_ARGUMENT") == before + 1
    assert value(n1, "cronwheel_grpc_server_handled_total", **labels, code="OK") >= 1
    assert value(n1, "cronwheel_grpc_server_handled_total", service="cronwheel.v1.SchedulerService",
                 method="ListSchedules", code="UNAUTHENTICATED") >= 1
    assert value(n1, "cronwheel_grpc_server_handling_seconds_count", **labels) >= 2
    assert value(n1, "cronwheel_grpc_server_handled_total", service="grpc.health.v1.Health", method="Check",
                 code="OK") >= 1
    assert value(n1, "process_resident_memory_bytes") > 0
    assert value(n1, "process_cpu_seconds_total") > 0
