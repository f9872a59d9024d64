"""The gRPC contract (proto/cronwheel/v1): committed stubs are fresh, complete and usable."""

from __future__ import annotations

import importlib.util
import re
import sys
from concurrent import futures
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"
PACKAGE_DIR = PROTO_ROOT / "cronwheel" / "v1"
REGENERATE = "run `python tools/generate.py` and commit the result"

# The RPCs of DESIGN.md ("The API"), per service.
EXPECTED_RPCS = {
    "SchedulerService": {
        "CreateSchedule",
        "UpdateSchedule",
        "GetSchedule",
        "ListSchedules",
        "DeleteSchedule",
        "PauseSchedule",
        "ResumeSchedule",
        "TriggerSchedule",
        "BackfillSchedule",
        "PreviewSchedule",
        "ExplainSchedule",
        "SubmitJob",
        "GetExecution",
        "ListExecutions",
        "CancelExecution",
        "RetryExecution",
    },
    "DispatchService": {
        "LeaseExecutions",
        "Heartbeat",
        "Checkpoint",
        "CompleteExecution",
        "FailExecution",
    },
    "AdminService": {"ClusterStatus"},
}


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cronwheel_proto_generate", REPO / "tools" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------
# Freshness: the committed stubs are what the generator produces from the .proto files.


def _compile_descriptor_set(tmp_path: Path, *extra: str):
    """Compile every .proto of the contract into a FileDescriptorSet (needs grpcio-tools)."""
    return _load_generator().descriptor_set(PROTO_ROOT, *extra)


def _strip_json_names(message) -> None:
    for field in message.field:
        field.ClearField("json_name")
    for nested in message.nested_type:
        _strip_json_names(nested)


def test_committed_stubs_describe_the_current_protos(tmp_path: Path) -> None:
    """Independent of the grpcio-tools version: the descriptors embedded in the committed
    *_pb2.py modules equal those compiled from the .proto files now."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) is needed to compile")
    from google.protobuf import descriptor_pb2

    fresh = _compile_descriptor_set(tmp_path)
    modules = {}
    for f in fresh.file:
        stem = Path(f.name).stem
        try:
            modules[f.name] = importlib.import_module(f"cronwheel.v1.{stem}_pb2")
        except ImportError as exc:
            pytest.fail(f"cronwheel.v1.{stem}_pb2 cannot be imported ({exc}); {REGENERATE}")
    changed = []
    for f in fresh.file:
        committed = descriptor_pb2.FileDescriptorProto.FromString(modules[f.name].DESCRIPTOR.serialized_pb)
        for message in (*f.message_type, *committed.message_type):
            _strip_json_names(message)
        if committed != f:
            changed.append(f.name)
    assert not changed, f"{changed} changed since the stubs were generated; {REGENERATE}"


def test_generated_stubs_are_up_to_date(tmp_path: Path) -> None:
    """Byte for byte: regenerating changes nothing."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) is needed to regenerate")
    from grpc_tools import grpc_version

    generator = _load_generator()
    fresh = {p.name: p for p in generator.generate(tmp_path / "out")}
    committed = {p.name: p for p in PACKAGE_DIR.iterdir() if generator.is_generated(p)}

    assert fresh, "the generator produced nothing"
    missing = sorted(set(fresh) - set(committed))
    extra = sorted(set(committed) - set(fresh))
    assert not missing, f"generated stubs missing from proto/cronwheel/v1: {missing}; {REGENERATE}"
    assert not extra, f"stale generated stubs with no .proto behind them: {extra}; {REGENERATE}"

    stale = [n for n, p in sorted(fresh.items()) if p.read_bytes() != committed[n].read_bytes()]
    if not stale:
        return
    # Another grpcio-tools release stamps other versions into the files (and may lay the code
    # out differently). The descriptor test above still guards the content; the bytes can only
    # be compared with the generator that produced them.
    committed_tools = _generated_grpc_version(committed)
    if committed_tools != grpc_version.VERSION:
        pytest.skip(
            f"committed stubs come from grpcio-tools {committed_tools}, the installed one is "
            f"{grpc_version.VERSION}: byte comparison skipped ({REGENERATE} to move to it)"
        )
    pytest.fail(f"generated stubs are stale: {stale}; {REGENERATE}", pytrace=False)


def _generated_grpc_version(files: dict[str, Path]) -> str:
    for name, path in sorted(files.items()):
        if name.endswith("_pb2_grpc.py"):
            m = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'$", path.read_text(), re.MULTILINE)
            if m:
                return m.group(1)
    return "unknown"


def _undocumented(f) -> list[str]:
    """Elements of one FileDescriptorProto (compiled with source info) without a leading
    comment. Paths follow descriptor.proto: 4 message_type, 5 enum_type, 6 service; within a
    message 2 field, 3 nested_type, 4 enum_type; 2 is value in an enum and method in a service.
    """
    comments = {tuple(loc.path): loc.leading_comments.strip() for loc in f.source_code_info.location}
    missing: list[str] = []

    def need(path: tuple[int, ...], what: str) -> None:
        if not comments.get(path):
            missing.append(f"{f.name}: {what}")

    def walk_enum(path: tuple[int, ...], enum, name: str) -> None:
        need(path, f"enum {name}")
        for i, value in enumerate(enum.value):
            need((*path, 2, i), f"enum value {name}.{value.name}")

    def walk_message(path: tuple[int, ...], message, name: str) -> None:
        # Request and response messages are documented by their RPC; their fields are not.
        if not re.search(r"(Request|Response)$", message.name):
            need(path, f"message {name}")
        for i, field in enumerate(message.field):
            need((*path, 2, i), f"field {name}.{field.name}")
        for i, nested in enumerate(message.nested_type):
            walk_message((*path, 3, i), nested, f"{name}.{nested.name}")
        for i, enum in enumerate(message.enum_type):
            walk_enum((*path, 4, i), enum, f"{name}.{enum.name}")

    for i, message in enumerate(f.message_type):
        walk_message((4, i), message, message.name)
    for i, enum in enumerate(f.enum_type):
        walk_enum((5, i), enum, enum.name)
    for i, service in enumerate(f.service):
        need((6, i), f"service {service.name}")
        for j, method in enumerate(service.method):
            need((6, i, 2, j), f"rpc {service.name}.{method.name}")
    return missing


def test_every_element_of_the_contract_is_documented(tmp_path: Path) -> None:
    """The comments become the API reference: every service, RPC, message, field, enum and
    enum value has one, and every file's header describes authentication."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) is needed to compile")
    fds = _compile_descriptor_set(tmp_path, "--include_source_info")
    assert {f.name for f in fds.file} == {
        f"cronwheel/v1/{n}.proto" for n in ("common", "scheduler", "dispatch", "admin")
    }
    undocumented: list[str] = []
    for f in fds.file:
        assert f.package == "cronwheel.v1", f.name
        header = (PROTO_ROOT / f.name).read_text(encoding="utf-8").split("\nsyntax =")[0]
        assert "AUTHENTICATION" in header and "`authorization: Bearer <token>`" in header, (
            f"{f.name}: the file header must describe authentication"
        )
        undocumented.extend(_undocumented(f))
    assert undocumented == []


# --------------------------------------------------------------------------------------------
# Smoke: the committed stubs import, build, round-trip and serve.


def test_stubs_import_and_every_designed_rpc_exists() -> None:
    from cronwheel.v1 import (
        admin_pb2,
        admin_pb2_grpc,
        dispatch_pb2,
        dispatch_pb2_grpc,
        scheduler_pb2,
        scheduler_pb2_grpc,
    )

    services = {
        "SchedulerService": (scheduler_pb2, scheduler_pb2_grpc),
        "DispatchService": (dispatch_pb2, dispatch_pb2_grpc),
        "AdminService": (admin_pb2, admin_pb2_grpc),
    }
    for service_name, (pb2, pb2_grpc) in services.items():
        service = pb2.DESCRIPTOR.services_by_name[service_name]
        assert service.full_name == f"cronwheel.v1.{service_name}"
        methods = {m.name for m in service.methods}
        missing = EXPECTED_RPCS[service_name] - methods
        assert not missing, f"{service_name} lacks {sorted(missing)}"
        for m in service.methods:
            # Unary RPCs with dedicated <Rpc>Request / <Rpc>Response messages.
            assert not m.client_streaming and not m.server_streaming, m.full_name
            assert m.input_type.name == f"{m.name}Request", m.full_name
            assert m.output_type.name == f"{m.name}Response", m.full_name
        assert hasattr(pb2_grpc, f"{service_name}Stub")
        assert hasattr(pb2_grpc, f"{service_name}Servicer")
        assert hasattr(pb2_grpc, f"add_{service_name}Servicer_to_server")


def test_enums_follow_proto_style() -> None:
    from cronwheel.v1 import admin_pb2, common_pb2, dispatch_pb2, scheduler_pb2

    def upper_snake(name: str) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()

    enums = []
    for module in (common_pb2, scheduler_pb2, dispatch_pb2, admin_pb2):
        enums.extend(module.DESCRIPTOR.enum_types_by_name.values())
        for msg in module.DESCRIPTOR.message_types_by_name.values():
            enums.extend(msg.enum_types)
    assert enums
    for enum in enums:
        prefix = upper_snake(enum.name) + "_"
        assert enum.values[0].number == 0
        assert enum.values[0].name == prefix + "UNSPECIFIED", enum.full_name
        for value in enum.values:
            assert value.name.startswith(prefix), value.name


def test_enum_values_of_the_design() -> None:
    from cronwheel.v1 import common_pb2 as c
    from cronwheel.v1 import scheduler_pb2 as s

    def names(enum) -> set[str]:
        return set(enum.keys())

    assert names(c.Priority) == {"PRIORITY_UNSPECIFIED", "PRIORITY_CRITICAL", "PRIORITY_DEFAULT", "PRIORITY_BULK"}
    assert names(c.MisfirePolicy) == {
        "MISFIRE_POLICY_UNSPECIFIED",
        "MISFIRE_POLICY_SKIP",
        "MISFIRE_POLICY_RUN_ONCE",
        "MISFIRE_POLICY_CATCH_UP",
    }
    assert {n.removeprefix("OVERLAP_POLICY_") for n in names(c.OverlapPolicy)} == {
        "UNSPECIFIED",
        "FORBID",
        "ALLOW",
        "REPLACE",
        "BUFFER_ONE",
        "BUFFER_ALL",
    }
    assert {n.removeprefix("DST_GAP_POLICY_") for n in names(c.DstGapPolicy)} == {"UNSPECIFIED", "SHIFT", "SKIP"}
    assert {n.removeprefix("DST_REPEATED_POLICY_") for n in names(c.DstRepeatedPolicy)} == {
        "UNSPECIFIED",
        "FIRST",
        "LAST",
        "BOTH",
    }
    assert {n.removeprefix("EXECUTION_STATE_") for n in names(c.ExecutionState)} == {
        "UNSPECIFIED",
        "SCHEDULED",
        "QUEUED",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "RETRY_SCHEDULED",
        "DEAD",
        "CANCELLED",
        "SKIPPED",
        "WAITING",  # issue 52: a job waiting for its upstreams
    }
    assert {n.removeprefix("TICK_OUTCOME_") for n in names(s.TickOutcome)} == {
        "UNSPECIFIED",
        "FIRED",
        "SKIPPED_OVERLAP",
        "SKIPPED_MISFIRE",
        "COALESCED_MISFIRE",
        "REFUSED_CATCH_UP",
        "PAUSED",
        "NOT_YET_CREATED",
        "DELETED",
        "DST_SHIFTED",
        "DST_SKIPPED",
        "DST_REPEATED",
        "MISSED",
        "PENDING",
        "PRUNED_BY_RETENTION",
        "SKIPPED_QUOTA",
    }


def test_messages_round_trip() -> None:
    from google.protobuf import duration_pb2, field_mask_pb2, json_format, timestamp_pb2

    from cronwheel.v1 import common_pb2, dispatch_pb2, scheduler_pb2

    ts = timestamp_pb2.Timestamp(seconds=1_767_225_600, nanos=123_000)
    schedule = common_pb2.Schedule(
        id="3f2b8a3e-5d1c-4b8e-9a77-0c2e4f6a1b90",
        tenant="acme",
        name="nightly-report",
        cron="H 2 * * *",
        timezone="Europe/Berlin",
        job_type="report.build",
        payload_json='{"big": 12345678901234567890, "nested": {"a": [1, 2.5, null]}}',
        priority=common_pb2.PRIORITY_BULK,
        retry_policy=common_pb2.RetryPolicy(
            initial_backoff=duration_pb2.Duration(seconds=30),
            backoff_multiplier=4.0,
            max_backoff=duration_pb2.Duration(seconds=6 * 3600),
            max_attempts=5,
        ),
        timeout=duration_pb2.Duration(seconds=900),
        misfire_policy=common_pb2.MISFIRE_POLICY_CATCH_UP,
        max_catch_up=10,
        overlap_policy=common_pb2.OVERLAP_POLICY_BUFFER_ONE,
        dst_policy=common_pb2.DstPolicy(
            gap=common_pb2.DST_GAP_POLICY_SKIP,
            repeated_hour=common_pb2.DST_REPEATED_POLICY_BOTH,
        ),
        jitter=duration_pb2.Duration(seconds=5),
        version=3,
        partition=17,
        next_run_at=ts,
        alert_if_no_success_within=duration_pb2.Duration(seconds=86400),
    )
    wire = schedule.SerializeToString()
    assert common_pb2.Schedule.FromString(wire) == schedule
    as_json = json_format.MessageToJson(schedule)
    assert json_format.Parse(as_json, common_pb2.Schedule()) == schedule

    update = scheduler_pb2.UpdateScheduleRequest(
        schedule=schedule,
        expected_version=3,
        update_mask=field_mask_pb2.FieldMask(paths=["cron", "retry_policy.max_attempts"]),
    )
    again = scheduler_pb2.UpdateScheduleRequest.FromString(update.SerializeToString())
    assert list(again.update_mask.paths) == ["cron", "retry_policy.max_attempts"]
    assert again.schedule.dst_policy.repeated_hour == common_pb2.DST_REPEATED_POLICY_BOTH

    submit = scheduler_pb2.SubmitJobResponse(
        execution=common_pb2.Execution(
            id="0b6f9a3c-1d2e-4f50-8a9b-7c6d5e4f3a21",
            type="email.send",
            state=common_pb2.EXECUTION_STATE_SCHEDULED,
            trigger=common_pb2.TRIGGER_SUBMIT,
            idempotency_key="order-42",
            scheduled_for=ts,
            run_at=ts,
            attempt=0,
            max_attempts=5,
        ),
        deduplicated=True,
    )
    assert scheduler_pb2.SubmitJobResponse.FromString(submit.SerializeToString()) == submit

    preview = scheduler_pb2.PreviewScheduleRequest(
        spec=scheduler_pb2.ScheduleSpec(cron="*/5 * * * *", timezone="UTC"), count=3
    )
    assert preview.WhichOneof("source") == "spec"
    preview.schedule_id = schedule.id
    assert preview.WhichOneof("source") == "schedule_id"

    lease = dispatch_pb2.LeaseExecutionsResponse(
        executions=[
            dispatch_pb2.LeasedExecution(
                execution_id=submit.execution.id,
                type="email.send",
                payload_json="{}",
                scheduled_for=ts,
                run_at=ts,
                attempt=2,
                max_attempts=5,
                fencing_token=2**40 + 7,
                checkpoint_json='{"sent": 10}',
                lease_expires_at=ts,
                deadline=ts,
            )
        ]
    )
    leased = dispatch_pb2.LeaseExecutionsResponse.FromString(lease.SerializeToString())
    assert leased.executions[0].fencing_token == 2**40 + 7
    assert leased == lease

    failed = dispatch_pb2.FailExecutionResponse(
        state=common_pb2.EXECUTION_STATE_RETRY_SCHEDULED, next_run_at=ts, attempt=2
    )
    assert failed.HasField("next_run_at")
    assert not dispatch_pb2.FailExecutionResponse().HasField("next_run_at")

    listing = scheduler_pb2.ListSchedulesRequest(page_size=1000)
    assert not listing.HasField("paused")
    listing.paused = False
    assert listing.HasField("paused")


def test_a_stub_talks_to_a_servicer_in_process() -> None:
    import grpc

    from cronwheel.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

    class Servicer(scheduler_pb2_grpc.SchedulerServiceServicer):
        def GetSchedule(self, request, context):  # noqa: N802 - gRPC method name
            if request.schedule_id != "3f2b8a3e-5d1c-4b8e-9a77-0c2e4f6a1b90":
                context.abort(grpc.StatusCode.NOT_FOUND, f"schedule {request.schedule_id}")
            return scheduler_pb2.GetScheduleResponse(
                schedule=common_pb2.Schedule(id=request.schedule_id, name="n", version=1)
            )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = scheduler_pb2_grpc.SchedulerServiceStub(channel)
            reply = stub.GetSchedule(
                scheduler_pb2.GetScheduleRequest(schedule_id="3f2b8a3e-5d1c-4b8e-9a77-0c2e4f6a1b90"),
                metadata=[("authorization", "Bearer t")],
                timeout=10,
            )
            assert reply.schedule.version == 1
            with pytest.raises(grpc.RpcError) as err:
                stub.GetSchedule(scheduler_pb2.GetScheduleRequest(schedule_id="x"), timeout=10)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.RpcError) as err:
                stub.PauseSchedule(scheduler_pb2.PauseScheduleRequest(), timeout=10)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(grace=None)
