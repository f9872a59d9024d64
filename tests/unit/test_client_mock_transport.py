"""cronwheel.client.testing.MockTransport, the users' testing aid (issue 49, build item 4): the
example of docs/testing.md runs as written; a status scripted in a handler becomes the same typed
exception as the same status from a real gRPC server (every code of the Client's table, for
Client and AsyncClient); the Client's fail-over, retries and idempotency keys run through the
transport seam. The default transport (gRPC) is covered by tests/e2e/test_client*.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from cronwheel.client import AsyncClient, Client, InvalidArgument, Unavailable
from cronwheel.client import errors as client_errors
from cronwheel.client.errors import ApiError
from cronwheel.client.testing import MockTransport, Request, RpcError
from cronwheel.clock import FakeClock
from cronwheel.v1 import common_pb2, scheduler_pb2
from tests.e2e.test_readme_examples import readme_examples  # the README's example marks, one parser

ROOT = Path(__file__).resolve().parents[2]
TESTING_MD = ROOT / "docs" / "testing.md"
QUEUED = common_pb2.Execution(id="e-1", state=common_pb2.EXECUTION_STATE_QUEUED)
SUBMITTED = scheduler_pb2.SubmitJobResponse(execution=QUEUED)


def test_the_testing_docs_example_runs_as_written(tmp_path: Path) -> None:
    text = TESTING_MD.read_text(encoding="utf-8")
    examples = readme_examples(text)
    assert len(examples) == text.count("\n```python\n") + text.count("\n```sh\n"), "a code block has no mark"
    assert [e.kind for e in examples] == ["file", "file", "run"]
    for e in examples[:2]:
        (tmp_path / e.arg).write_text(e.body, encoding="utf-8")
    tests = sum(e.body.count("\ndef test_") for e in examples[:2])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    for command in examples[2].commands():
        run = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"{tests} passed" in run.stdout, run.stdout


# ------------------------------------------------------------------------ statuses map as real ones

# A status the Client's table does not name becomes ApiError: two of those, besides the table.
CODES = [*client_errors._BY_CODE, grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN]
DETAILS = "schedule.cron: expected 5 or 6   fields"  # a field path, and whitespace the Client folds


@pytest.fixture(scope="module")
def aborting_node() -> Iterator[str]:
    """A real gRPC server whose GetExecution answers the status named by the execution id."""

    def get_execution(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode[request.execution_id], DETAILS)

    handler = grpc.method_handlers_generic_handler("cronwheel.v1.SchedulerService", {
        "GetExecution": grpc.unary_unary_rpc_method_handler(
            get_execution, request_deserializer=scheduler_pb2.GetExecutionRequest.FromString,
            response_serializer=scheduler_pb2.GetExecutionResponse.SerializeToString)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def raised(exc: ApiError) -> tuple[type, str, str, str]:
    return type(exc), exc.code, str(exc), getattr(exc, "field", "")


def mocked(code: grpc.StatusCode) -> MockTransport:
    return MockTransport({"GetExecution": RpcError(code, DETAILS)})


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_a_scripted_status_raises_what_the_same_status_from_a_real_server_raises(
        code: grpc.StatusCode, aborting_node: str) -> None:
    got = {}
    for name, client in (("real", Client(aborting_node, retries=0)),
                         ("mock", Client(transport=mocked(code), retries=0))):
        with client, pytest.raises(ApiError) as exc:
            client.get_execution(code.name)
        got[name] = raised(exc.value)
    assert got["mock"] == got["real"]
    assert got["mock"][0] is client_errors._BY_CODE.get(code, ApiError) and got["mock"][1] == code.name


def test_the_async_client_maps_a_scripted_status_as_a_real_one(aborting_node: str) -> None:
    async def both(code: grpc.StatusCode) -> list[tuple[type, str, str, str]]:
        out = []
        for client in (AsyncClient(aborting_node, retries=0), AsyncClient(transport=mocked(code), retries=0)):
            async with client:
                with pytest.raises(ApiError) as exc:
                    await client.get_execution(code.name)
            out.append(raised(exc.value))
        return out

    for code in CODES:
        real, mock = asyncio.run(both(code))
        assert mock == real, code
    assert raised(client_errors.from_rpc_error(RpcError("INVALID_ARGUMENT", DETAILS)))[3] == "schedule.cron"


# ------------------------------------------------------------------------ the Client's own rules


def flaky(*answers: Any) -> MockTransport:
    """Answers SubmitJob and CreateSchedule with `answers` in turn."""
    left = list(answers)
    return MockTransport({"SubmitJob": lambda r: left.pop(0), "CreateSchedule": lambda r: left.pop(0)})


def test_unavailable_then_success_is_retried_on_the_next_address_with_the_same_key() -> None:
    transport = flaky(RpcError("UNAVAILABLE", "node restarting"), RpcError("UNAVAILABLE", "node restarting"),
                      SUBMITTED)
    with Client(["n1:7070", "n2:7070", "n3:7070"], transport=transport) as cw:
        assert cw.submit("email").id == "e-1"  # no key given: the Client makes one
    assert [r.address for r in transport.requests] == ["n1:7070", "n2:7070", "n3:7070"]
    keys = {r.message.idempotency_key for r in transport.requests}
    assert len(keys) == 1 and keys != {""}


def test_the_async_client_retries_through_the_transport_and_sleeps_on_its_clock() -> None:
    async def main() -> tuple[str, list[str]]:
        clock = FakeClock()
        transport = flaky(RpcError("UNAVAILABLE", "x"), RpcError("UNAVAILABLE", "x"), SUBMITTED)
        async with AsyncClient(["n1:7070", "n2:7070"], transport=transport, clock=clock, backoff_s=5.0) as cw:
            call = asyncio.ensure_future(cw.submit("email"))
            await clock.until_asleep()  # both addresses failed once: the backoff, on the Client's clock
            assert clock.next_deadline() == clock.now_ts() + 5.0
            clock.advance(5.0)
            ex = await call
        return ex.id, [r.address for r in transport.requests]

    assert asyncio.run(main()) == ("e-1", ["n1:7070", "n2:7070", "n1:7070"])


def test_a_call_unsafe_to_repeat_is_retried_only_when_it_never_left() -> None:
    created = scheduler_pb2.CreateScheduleResponse(schedule=common_pb2.Schedule(id="s-1", name="nightly"))
    spec = dict(name="nightly", cron="0 3 * * *", job_type="report", timezone="UTC", misfire_policy="skip")
    sent = flaky(RpcError("UNAVAILABLE", "node shutting down"), created)
    with Client(["n1:7070", "n2:7070"], transport=sent) as cw, pytest.raises(Unavailable):
        cw.create_schedule(**spec)
    assert len(sent.requests) == 1, "it may have been created: the caller decides"
    never_left = flaky(RpcError("UNAVAILABLE", "failed to connect to all addresses"), created)
    with Client(["n1:7070", "n2:7070"], transport=never_left) as cw:
        assert cw.create_schedule(**spec).id == "s-1"
    assert [r.address for r in never_left.requests] == ["n1:7070", "n2:7070"]


def test_pages_are_followed_and_each_attempt_is_recorded_as_it_was_sent() -> None:
    pages = {"": scheduler_pb2.ListExecutionsResponse(executions=[QUEUED], next_page_token="p2"),
             "p2": scheduler_pb2.ListExecutionsResponse(executions=[QUEUED])}
    transport = MockTransport(lambda r: pages[r.message.page_token])
    with Client(transport=transport, token="tok-1") as cw:
        assert [e.id for e in cw.list_executions(type="email")] == ["e-1", "e-1"]
    # The Client reuses its request object for the next page; the records keep what was sent.
    assert [r.message.page_token for r in transport.requests] == ["", "p2"]
    first = transport.requests[0]
    assert (first.path, first.metadata) == ("/cronwheel.v1.SchedulerService/ListExecutions",
                                            (("authorization", "Bearer tok-1"),))


def test_values_are_checked_before_anything_is_sent() -> None:
    transport = MockTransport({})
    with Client(transport=transport) as cw, pytest.raises(InvalidArgument) as bad:
        cw.list_executions(page_size=0)
    assert bad.value.field == "page_size" and transport.requests == []


# ------------------------------------------------------------------------ the aid's own contract


def test_a_method_the_mapping_does_not_name_answers_unimplemented() -> None:
    with Client(transport=MockTransport({"SubmitJob": SUBMITTED})) as cw, pytest.raises(ApiError) as exc:
        cw.get_execution("e-1")
    assert exc.value.code == "UNIMPLEMENTED" and "GetExecution" in str(exc.value) and "SubmitJob" in str(exc.value)


def test_a_response_of_another_rpc_is_refused_naming_both() -> None:
    with Client(transport=MockTransport({"GetExecution": SUBMITTED})) as cw, pytest.raises(TypeError) as exc:
        cw.get_execution("e-1")
    assert "cronwheel.v1.GetExecutionResponse" in str(exc.value) and "SubmitJobResponse" in str(exc.value)


def test_an_async_handler_serves_the_async_client_only() -> None:
    async def handler(request: Request) -> Any:
        return SUBMITTED

    with Client(transport=MockTransport(handler)) as cw, pytest.raises(TypeError, match="AsyncClient only"):
        cw.submit("email")


def test_bad_status_codes_and_channel_settings_next_to_a_transport_are_refused_naming_the_field() -> None:
    for code in ("NOT_A_CODE", "OK"):
        with pytest.raises(InvalidArgument) as bad:
            RpcError(code)
        assert bad.value.field == "code"
    for keyword, value in (("tls", True), ("interceptors", [object()]), ("ca_file", str(ROOT / "README.md"))):
        with pytest.raises(InvalidArgument) as bad:
            Client(transport=MockTransport({}), **{keyword: value})
        assert bad.value.field == keyword
        with pytest.raises(InvalidArgument) as bad:
            AsyncClient(transport=MockTransport({}), **{keyword: value})
        assert bad.value.field == keyword
