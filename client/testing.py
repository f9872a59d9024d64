"""cronwheel.client.testing: test application code that uses the Client without a cluster.

    from cronwheel.client import Client
    from cronwheel.client.testing import MockTransport, Request, RpcError
    from cronwheel.v1 import common_pb2, scheduler_pb2

    def handler(request: Request) -> object:
        if request.method == "SubmitJob":
            return scheduler_pb2.SubmitJobResponse(execution=common_pb2.Execution(id="e-1"))
        raise RpcError("NOT_FOUND", f"execution {request.message.execution_id} not found")

    cw = Client(transport=MockTransport(handler))

A `MockTransport` answers each attempt of each RPC the Client makes from the handler the test
gives (httpx's `MockTransport`): it is not a fake scheduler, and it re-implements none of the
server's rules. The handler receives a `Request` (the RPC's service and method, the protobuf
request the Client built, the address of this attempt) and returns the protobuf response, or
raises or returns an `RpcError`, a grpc.RpcError that the Client maps exactly as a real node's
status (cronwheel.client.errors). Everything the Client does around an attempt still runs:
fail-over to the next address and retries of calls safe to repeat on UNAVAILABLE, idempotency
keys, values checked before sending, paging. The same transport serves `Client` and
`AsyncClient` (whose handler may be async). docs/testing.md has the worked example.

The handler may be a mapping instead: RPC method name -> a response, an RpcError, or a
function of the Request. A method it does not name answers UNIMPLEMENTED, as a node does.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from .errors import InvalidArgument
from .transport import SERVICES_BY_NAME, Request

__all__ = ["Handler", "MockTransport", "Request", "RpcError"]

Handler = Callable[[Request], Any] | Mapping[str, Any]


class RpcError(grpc.RpcError):
    """A gRPC status for a handler to raise (or return): `RpcError("NOT_FOUND", "execution e-1 not
    found")`. `code` is a grpc.StatusCode or its name; `details` is the server's message (an
    INVALID_ARGUMENT's starts with the field path: "schedule.cron: expected 5 or 6 fields").
    UNAVAILABLE with details "failed to connect to all addresses" is a call that never left
    the client (even a call unsafe to repeat is sent to the next address)."""

    def __init__(self, code: grpc.StatusCode | str, details: str = "") -> None:
        if isinstance(code, str):
            found = grpc.StatusCode.__members__.get(code.upper())
            if found is None:
                raise InvalidArgument("INVALID_ARGUMENT", f"code: {code!r} is not a gRPC status code name "
                                                          f"(e.g. NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE)")
            code = found
        if code is grpc.StatusCode.OK:
            raise InvalidArgument("INVALID_ARGUMENT", "code: OK is not an error: return the response instead")
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def __repr__(self) -> str:
        return f"RpcError({self._code.name!r}, {self._details!r})"


class MockTransport:
    """A transport for `Client(transport=...)` and `AsyncClient(transport=...)` that answers each
    attempt from `handler` (a function of the Request, or a mapping method -> answer).

    The handler sees a copy of the request as the server would (parsed from its bytes), and the
    Client gets a copy of the response: neither side can change the other's message later.
    `requests` lists every attempt answered, in order (a retried call appears once per attempt).
    A response of the wrong message type for the RPC raises TypeError naming both.
    Thread-safe as far as the handler is.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._lock = threading.Lock()

    def _answer(self, request: Request) -> Any:
        if not isinstance(self.handler, Mapping):
            return self.handler(request)
        if request.method not in self.handler:
            named = ", ".join(sorted(self.handler)) or "none"
            raise RpcError("UNIMPLEMENTED", f"MockTransport: no answer for {request.method} (it answers: {named})")
        answer = self.handler[request.method]
        return answer(request) if callable(answer) else answer

    def _received(self, request: Request) -> Request:
        message = type(request.message).FromString(request.message.SerializeToString())
        seen = Request(request.service, request.method, message, request.address, request.metadata,
                       request.timeout_s)
        with self._lock:
            self.requests.append(seen)
        return seen

    def _sent(self, request: Request, answer: Any) -> Any:
        if isinstance(answer, grpc.RpcError):
            raise answer
        expected = SERVICES_BY_NAME[request.service].methods_by_name[request.method].output_type.full_name
        got = getattr(getattr(answer, "DESCRIPTOR", None), "full_name", type(answer).__name__)
        if got != expected:
            raise TypeError(f"MockTransport: {request.method} answers a {expected}, the handler gave {got}")
        return type(answer).FromString(answer.SerializeToString())

    def handle_request(self, request: Request) -> Any:
        seen = self._received(request)
        answer = self._answer(seen)
        if inspect.isawaitable(answer):
            if inspect.iscoroutine(answer):
                answer.close()  # never awaited: say so here, not in a RuntimeWarning
            raise TypeError(f"MockTransport: the handler answered {request.method} with an awaitable; "
                            f"an async handler serves AsyncClient only")
        return self._sent(seen, answer)

    async def handle_async_request(self, request: Request) -> Any:
        seen = self._received(request)
        answer = self._answer(seen)
        if inspect.isawaitable(answer):
            answer = await answer
        return self._sent(seen, answer)

    def close(self) -> None:
        """Nothing to release."""

    async def aclose(self) -> None:
        """Nothing to release."""
