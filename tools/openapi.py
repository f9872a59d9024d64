"""Generate the OpenAPI 3 document of the REST/JSON API from the protos and their `google.api.http`
routes: proto/cronwheel/v1/openapi.json (package data of `cronwheel.v1`: `cronwheel rest` serves
it as GET /openapi.json).

    python tools/openapi.py            # (re)write proto/cronwheel/v1/openapi.json
    python tools/openapi.py --check    # exit 1 when the committed document differs

`render(root) -> str` compiles the .proto files under `root` (PROTO_ROOT, or a copy of it: a test
build) with protoc (generate.descriptor_set, with source info for the comments) and writes:

- one path per route, one operation per RPC (`operationId` Service_Rpc, tagged with the service,
  described by the RPC's comment); path variables as path parameters; without a body, the other
  fields of the request as query parameters (message fields flattened: `scheduled_for.start_time`);
  `body: "*"` as a request body of the request's fields but the path's, `body: "<field>"` as that
  field's schema;
- `200` with the response message, `default` with the error body (`Status`: code, message,
  details, as cluster/api/rest.py writes it);
- a schema per message and enum of cronwheel.v1, in the proto3 JSON mapping with the API's field
  names (64-bit integers are strings, Timestamp an RFC 3339 string, Duration "1.5s", FieldMask
  "a,b", enums their value names);
- a bearer security scheme (the tokens of gRPC, `Authorization: Bearer <token>`).

tests/unit/test_openapi.py checks freshness, validity (openapi-spec-validator) and that a field
added in a test build appears. Needs grpcio-tools (the dev extra), as generate.py does.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

TOOLS = Path(__file__).resolve().parent
PROTO_ROOT = TOOLS.parent / "proto"
OUTPUT = PROTO_ROOT / "cronwheel" / "v1" / "openapi.json"
PACKAGE = "cronwheel.v1"
VERBS = ("get", "put", "post", "delete", "patch")
# FieldDescriptorProto.Type -> JSON schema (proto3 JSON mapping).
SCALAR: dict[int, dict[str, str]] = {
    1: {"type": "number", "format": "double"}, 2: {"type": "number", "format": "float"},
    3: {"type": "string", "format": "int64"}, 4: {"type": "string", "format": "uint64"},
    5: {"type": "integer", "format": "int32"}, 6: {"type": "string", "format": "uint64"},
    7: {"type": "integer", "format": "int64"}, 8: {"type": "boolean"}, 9: {"type": "string"},
    12: {"type": "string", "format": "byte"}, 13: {"type": "integer", "format": "int64"},
    15: {"type": "integer", "format": "int32"}, 16: {"type": "string", "format": "int64"},
    17: {"type": "integer", "format": "int32"}, 18: {"type": "string", "format": "int64"},
}
WELL_KNOWN: dict[str, dict[str, Any]] = {
    ".google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    ".google.protobuf.Duration": {"type": "string", "description": "seconds with an `s` suffix, e.g. \"1.5s\""},
    ".google.protobuf.FieldMask": {"type": "string", "description": "comma-separated field paths"},
    ".google.protobuf.Struct": {"type": "object"},
    ".google.protobuf.Empty": {"type": "object"},
}
TYPE_MESSAGE, TYPE_ENUM, REPEATED = 11, 14, 3
STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An error: the gRPC status (google.rpc.Status) in the JSON mapping. `code` is the gRPC code; "
                   "an INVALID_ARGUMENT carries a google.rpc.BadRequest in `details` naming the field.",
    "properties": {
        "code": {"type": "integer", "format": "int32"},
        "message": {"type": "string"},
        "details": {"type": "array", "items": {"type": "object", "properties": {"@type": {"type": "string"}},
                                               "additionalProperties": True}},
    },
}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cronwheel_proto_generate", TOOLS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Builder:
    """Reads a FileDescriptorSet (with source info) of the contract; `document()` is the result."""

    def __init__(self, fds: Any) -> None:
        self.comments: dict[tuple[str, tuple[int, ...]], str] = {}
        self.messages: dict[str, tuple[Any, tuple[str, tuple[int, ...]]]] = {}  # .full.name -> (proto, loc)
        self.enums: dict[str, tuple[Any, tuple[str, tuple[int, ...]]]] = {}
        self.files = [f for f in fds.file if f.package == PACKAGE]
        for f in self.files:
            for loc in f.source_code_info.location:
                text = (loc.leading_comments or loc.trailing_comments).strip()
                if text:
                    self.comments[(f.name, tuple(loc.path))] = " ".join(line.strip() for line in text.splitlines())
            for i, m in enumerate(f.message_type):
                self._index(f.name, f".{PACKAGE}.{m.name}", m, (4, i))
            for i, en in enumerate(f.enum_type):
                self.enums[f".{PACKAGE}.{en.name}"] = (en, (f.name, (5, i)))

    def _index(self, file: str, name: str, m: Any, path: tuple[int, ...]) -> None:
        self.messages[name] = (m, (file, path))
        for k, nested in enumerate(m.nested_type):
            self._index(file, f"{name}.{nested.name}", nested, (*path, 3, k))
        for k, en in enumerate(m.enum_type):
            self.enums[f"{name}.{en.name}"] = (en, (file, (*path, 4, k)))

    def doc(self, where: tuple[str, tuple[int, ...]]) -> str:
        return self.comments.get(where, "")

    @staticmethod
    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name.removeprefix('.' + PACKAGE + '.')}"}

    def field_schema(self, fld: Any) -> dict[str, Any]:
        if fld.type == TYPE_MESSAGE:
            entry = self.messages.get(fld.type_name)
            if entry is not None and entry[0].options.map_entry:
                value = entry[0].field[1]
                return {"type": "object", "additionalProperties": self.field_schema(value)}
            one = dict(WELL_KNOWN.get(fld.type_name) or self.ref(fld.type_name))
        elif fld.type == TYPE_ENUM:
            one = self.ref(fld.type_name)
        else:
            one = dict(SCALAR[fld.type])
        return {"type": "array", "items": one} if fld.label == REPEATED else one

    def described(self, schema: dict[str, Any], text: str) -> dict[str, Any]:
        if not text:
            return schema
        if "$ref" in schema:
            return {"allOf": [schema], "description": text}
        return {**schema, "description": text}

    def message_schema(self, name: str, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        m, (file, path) = self.messages[name]
        props = {f.name: self.described(self.field_schema(f), self.doc((file, (*path, 2, i))))
                 for i, f in enumerate(m.field) if f.name not in skip}
        return self.described({"type": "object", "properties": props}, self.doc((file, path)))

    def enum_schema(self, name: str) -> dict[str, Any]:
        en, where = self.enums[name]
        return self.described({"type": "string", "enum": [v.name for v in en.value]}, self.doc(where))

    def query_parameters(self, name: str, prefix: str, skip: set[str], depth: int = 0) -> list[dict[str, Any]]:
        m, (file, path) = self.messages[name]
        out: list[dict[str, Any]] = []
        for i, f in enumerate(m.field):
            key = prefix + f.name
            if key in skip:
                continue
            nested = f.type == TYPE_MESSAGE and f.type_name not in WELL_KNOWN
            if nested and f.label != REPEATED and depth < 2:
                out += self.query_parameters(f.type_name, key + ".", skip, depth + 1)
            elif not nested:
                out.append(self.described({"name": key, "in": "query", "schema": self.field_schema(f)},
                                           self.doc((file, (*path, 2, i)))))
        return out

    def operation(self, svc: Any, s_idx: int, file: str, method: Any, m_idx: int,
                  rule: Any, verb: str) -> dict[str, Any]:
        template: str = getattr(rule, verb)
        variables = [seg.split("}")[0] for seg in template.split("{")[1:]]
        text = self.doc((file, (6, s_idx, 2, m_idx)))
        op: dict[str, Any] = {"operationId": f"{svc.name}_{method.name}", "tags": [svc.name],
                              "summary": text.split(". ")[0][:120] if text else method.name}
        if text:
            op["description"] = text
        params = [{"name": v, "in": "path", "required": True, "schema": {"type": "string"}} for v in variables]
        if not rule.body:
            params += self.query_parameters(method.input_type, "", set(variables))
        elif rule.body == "*":
            schema = self.message_schema(method.input_type, frozenset(variables))
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
        else:
            req, _ = self.messages[method.input_type]
            fld = next(f for f in req.field if f.name == rule.body)
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": self.field_schema(fld)}}}
        if params:
            op["parameters"] = params
        op["responses"] = {
            "200": {"description": "OK", "content": {"application/json": {"schema": self.ref(method.output_type)}}},
            "default": {"description": "an error", "content": {"application/json": {"schema": self.ref("Status")}}},
        }
        return op

    def document(self) -> dict[str, Any]:
        from google.api import annotations_pb2  # registers the google.api.http extension

        paths: dict[str, dict[str, Any]] = {}
        tags = []
        for f in self.files:
            for s_idx, svc in enumerate(f.service):
                tags.append({"name": svc.name, "description": self.doc((f.name, (6, s_idx)))})
                for m_idx, method in enumerate(svc.method):
                    if not method.options.HasExtension(annotations_pb2.http):
                        raise ValueError(f"{svc.name}.{method.name} has no google.api.http route")
                    rule = method.options.Extensions[annotations_pb2.http]
                    verb = rule.WhichOneof("pattern")
                    if verb not in VERBS:
                        raise ValueError(f"{svc.name}.{method.name}: unsupported pattern {verb!r}")
                    op = self.operation(svc, s_idx, f.name, method, m_idx, rule, verb)
                    paths.setdefault(getattr(rule, verb), {})[verb] = op
        schemas: dict[str, Any] = {n.removeprefix(f".{PACKAGE}."): self.message_schema(n)
                                   for n, (m, _) in sorted(self.messages.items()) if not m.options.map_entry}
        schemas.update({n.removeprefix(f".{PACKAGE}."): self.enum_schema(n) for n in sorted(self.enums)})
        schemas["Status"] = STATUS_SCHEMA
        return {
            "openapi": "3.0.3",
            "info": {"title": "cronwheel API", "version": "v1",
                     "description": "The cronwheel.v1 gRPC API over HTTP/JSON (docs/rest.md), generated from the "
                                    "protos by tools/openapi.py: do not edit."},
            "security": [{"bearer": []}],
            "tags": tags,
            "paths": dict(sorted(paths.items())),
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": schemas},
        }


def render(root: Path = PROTO_ROOT) -> str:
    fds = _generator().descriptor_set(root, "--include_source_info", "--include_imports")
    return json.dumps(Builder(fds).document(), indent=2, ensure_ascii=False) + "\n"


def is_fresh(root: Path = PROTO_ROOT, output: Path = OUTPUT) -> bool:
    """Whether `output` is exactly the document of the protos under `root`."""
    return output.exists() and output.read_text() == render(root)


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if not is_fresh():
            print(f"{OUTPUT} is stale: run `python tools/openapi.py` and commit the result", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(PROTO_ROOT.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
