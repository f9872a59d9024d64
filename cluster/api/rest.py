"""The REST/JSON API (issue 51): HTTP requests transcoded to the node's gRPC calls and back,
driven by the `google.api.http` routes of the protos and their descriptors (no handler per
route, as grpc-gateway and Envoy's gRPC-JSON transcoder do it).

    POST /v1/schedules/{schedule_id}:pause  {"reason": "maintenance"}
      -> /cronwheel.v1.SchedulerService/PauseSchedule  PauseScheduleRequest(schedule_id=..., reason=...)

- Bodies and answers use the proto3 JSON mapping (rest_json.py, checked against json_format) with the API's own
  field names (`misfire_policy`, `page_token`); lowerCamelCase is read too, as the mapping says.
  Unknown fields are refused (INVALID_ARGUMENT naming the field: no aliases). Answers print every
  field, defaults included.
- Path variables (`{schedule_id}`, `{schedule.id}`) and query parameters (`?page_token=...&states=
  EXECUTION_STATE_FAILED&range.start=...`) fill the request's fields, typed by the descriptor.
- The call goes to a node over gRPC with the caller's `Authorization` header as metadata, so every
  interceptor (auth and its tenant rules, limits, the one error table) applies unchanged: the HTTP
  side authenticates nothing itself.
- A gRPC status becomes the HTTP status grpc-gateway gives it (`HTTP_STATUS`) and a JSON body
  `{"code": 3, "message": "...", "details": [...]}`: the `google.rpc.Status` of the call's
  `grpc-status-details-bin` trailer (cluster/api/grpc_errors.py puts a BadRequest naming the field
  there) in the JSON mapping, `details` empty when there is none.

Concurrency: `Routes` is immutable after construction; `Transcoder.handle` is task-safe (one
shared grpc.aio channel, whose calls are independent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import grpc
from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor, message_factory
from google.rpc import error_details_pb2, status_pb2  # noqa: F401  (error_details: registers BadRequest for Any)

from cronwheel.cluster.api import rest_json
from cronwheel.cluster.api.grpc_errors import invalid_argument_status
from cronwheel.v1 import admin_pb2, dispatch_pb2, scheduler_pb2

MODULES = (scheduler_pb2, dispatch_pb2, admin_pb2)
VERBS = ("get", "put", "post", "delete", "patch")
DETAILS_KEY = "grpc-status-details-bin"

# gRPC code -> HTTP status, as grpc-gateway's runtime.HTTPStatusFromCode maps them.
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}

_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")


class BadRequest(Exception):
    """A request the HTTP side cannot turn into a message: INVALID_ARGUMENT naming `field`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Route:
    """One RPC's HTTP route: `verb` `template` (a google.api.http pattern), `body` ("*", a field
    of the request, or "" for none: then every field not in the path comes from the query)."""

    verb: str
    template: str
    body: str
    method: str  # the gRPC full method name: /cronwheel.v1.SchedulerService/PauseSchedule
    request: descriptor.Descriptor
    response: descriptor.Descriptor
    pattern: re.Pattern[str]
    variables: tuple[str, ...]

    @property
    def rpc(self) -> str:
        return self.method.rsplit("/", 1)[-1]


def rule_of(method: descriptor.MethodDescriptor) -> http_pb2.HttpRule | None:
    """The method's google.api.http option, None when it has none."""
    opts = method.GetOptions()
    if not opts.HasExtension(annotations_pb2.http):
        return None
    return opts.Extensions[annotations_pb2.http]


def route_of(method: descriptor.MethodDescriptor) -> Route | None:
    rule = rule_of(method)
    if rule is None:
        return None
    verb = rule.WhichOneof("pattern")
    if verb not in VERBS:
        raise ValueError(f"{method.full_name}: unsupported google.api.http pattern {verb!r}")
    template: str = getattr(rule, verb)
    variables = tuple(_VARIABLE.findall(template))
    pieces, n = [], 0
    for m in re.finditer(r"\{[A-Za-z_][A-Za-z0-9_.]*\}|[^{]+", template):
        if m.group(0).startswith("{"):
            pieces.append(f"(?P<v{n}>[^/:]+)")
            n += 1
        else:
            pieces.append(re.escape(m.group(0)))
    regex = "".join(pieces)
    return Route(verb.upper(), template, rule.body, f"/{method.containing_service.full_name}/{method.name}",
                 method.input_type, method.output_type, re.compile(f"^{regex}$"), variables)


class Routes:
    """Every annotated RPC of the contract, matched by verb and path."""

    def __init__(self, modules: Iterable[Any] = MODULES) -> None:
        self.all: list[Route] = []
        self.missing: list[str] = []  # RPCs without a route (a test requires none)
        for mod in modules:
            for svc in mod.DESCRIPTOR.services_by_name.values():
                for m in svc.methods:
                    r = route_of(m)
                    if r is None:
                        self.missing.append(f"{svc.full_name}.{m.name}")
                    else:
                        self.all.append(r)
        # Literal paths before templated ones (`/v1/executions:lease` vs `/v1/executions/{id}`).
        self.all.sort(key=lambda r: (len(r.variables), -len(r.template)))

    def match(self, verb: str, path: str) -> tuple[Route, dict[str, str]] | tuple[None, bool]:
        """(route, path variables), or (None, whether another verb has this path: 405 vs 404)."""
        other = False
        for r in self.all:
            m = r.pattern.match(path)
            if m is None:
                continue
            if r.verb != verb:
                other = True
                continue
            return r, {name: unquote(m.group(f"v{i}")) for i, name in enumerate(r.variables)}
        return None, other


# ------------------------------------------------------------------------------ requests


def request_message(route: Route, variables: Mapping[str, str], query: str, body: bytes) -> Any:
    """The gRPC request of an HTTP request; BadRequest naming the field when it cannot be built."""
    doc: dict[str, Any] = {}
    if route.body:
        try:
            parsed = json.loads(body or b"{}")
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json reads
            raise BadRequest("", f"the body is not JSON: {exc}") from None
        if route.body == "*":
            if not isinstance(parsed, dict):
                raise BadRequest("", "the body must be a JSON object")
            doc = parsed
        else:
            if not isinstance(parsed, dict):
                raise BadRequest(route.body, "the body must be a JSON object")
            doc = {route.body: parsed}
    elif body.strip():
        raise BadRequest("", f"{route.verb} {route.template} takes no body: give the fields as query parameters")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if route.body == "*":
            raise BadRequest(name, "this route takes its fields in the JSON body, not the query")
        _put(doc, route.request, name, value, query=True)
    for name, value in variables.items():
        _put(doc, route.request, name, value, query=False)
    msg = message_factory.GetMessageClass(route.request)()
    try:
        rest_json.parse(doc, msg)
    except rest_json.JsonError as exc:
        raise BadRequest(exc.path, exc.why) from None
    return msg


def _put(doc: dict[str, Any], desc: descriptor.Descriptor, path: str, value: str, *, query: bool) -> None:
    """Set a dotted field path of `doc` from text. The text stays text but for a bool: rest_json
    reads numbers, enums and well-known types from strings, as the JSON mapping allows."""
    parts = path.split(".")
    node = doc
    for i, part in enumerate(parts):
        field = rest_json.fields_by_key(desc).get(part)
        if field is None:
            raise BadRequest(path, f"unknown field {part!r} of {desc.name}")
        last = i == len(parts) - 1
        wkt = field.message_type is not None and field.message_type.full_name.startswith("google.protobuf.")
        if not last:
            if field.message_type is None or field.is_repeated or wkt:
                raise BadRequest(path, f"{part!r} has no fields")
            child = node.setdefault(field.name, {})
            if not isinstance(child, dict):
                raise BadRequest(path, "given twice")
            node, desc = child, field.message_type
            continue
        if field.message_type is not None and not wkt:
            raise BadRequest(path, "a message: give its fields (`name.field=...`)")
        typed: str | bool = value
        if field.type == descriptor.FieldDescriptor.TYPE_BOOL:
            if value not in ("true", "false"):
                raise BadRequest(path, f"expected true or false, got {value!r}")
            typed = value == "true"
        if field.is_repeated and query:
            node.setdefault(field.name, []).append(typed)
        else:
            node[field.name] = typed


# ------------------------------------------------------------------------------ answers


def answer_json(message: Any) -> bytes:
    return json.dumps(rest_json.render(message)).encode()


def error_json(code: grpc.StatusCode, message: str, status: status_pb2.Status | None = None) -> bytes:
    """The JSON error body: the google.rpc.Status of the call (its details included), or one
    made of the code and message."""
    return answer_json(status_pb2.Status(code=code.value[0], message=message) if status is None else status)


def bad_request_status(exc: BadRequest) -> status_pb2.Status:
    """The Status of a request refused before any call: INVALID_ARGUMENT with a BadRequest
    detail naming the field, as the node's own refusals carry one."""
    return invalid_argument_status(exc.field, str(exc))


def status_of_call(err: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    for key, value in err.trailing_metadata() or ():
        if key == DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None
