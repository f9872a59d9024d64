"""docs/api.md is generated from the .proto comments (tools/apidoc.py) and kept in step with them.

The generator's hand-written parser is checked against the descriptors protoc compiled into the
generated stubs, so the reference can neither miss nor invent a service, RPC, message, field,
enum or value.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from cronwheel.v1 import admin_pb2, common_pb2, dispatch_pb2, scheduler_pb2

ROOT = Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"
FILES = (scheduler_pb2, dispatch_pb2, admin_pb2, common_pb2)


def _load_apidoc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cronwheel_apidoc", ROOT / "tools" / "apidoc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


apidoc = _load_apidoc()


@pytest.fixture(scope="module")
def parsed() -> list[Any]:
    return list(apidoc.parse_all())


@pytest.fixture(scope="module")
def api_md() -> str:
    assert API_MD.is_file(), "docs/api.md is missing: run `python tools/apidoc.py`"
    return API_MD.read_text(encoding="utf-8")


def _section(md: str, anchor: str) -> str:
    """The Markdown from an anchor to the next anchor."""
    start = md.index(f'<a id="{anchor}"></a>')
    end = md.find("<a id=", start + 1)
    return md[start:end if end != -1 else len(md)]


# ------------------------------------------------------------------------------ the generated file


def test_api_md_is_the_rendering_of_the_proto_comments(api_md: str) -> None:
    if api_md != apidoc.render():
        pytest.fail("docs/api.md is stale: run `python tools/apidoc.py` and commit docs/api.md")


def test_every_rpc_of_every_service_is_documented_with_its_errors(api_md: str) -> None:
    services = [s for f in FILES for s in f.DESCRIPTOR.services_by_name.values()]
    assert {s.name for s in services} == {"SchedulerService", "DispatchService", "AdminService", "WebhookService",
                                             "TenantService"}
    for svc in services:
        assert f'<a id="{svc.full_name}"></a>' in api_md, svc.full_name
        for method in svc.methods:
            assert f"\n#### {svc.name}.{method.name}\n" in api_md, f"{svc.name}.{method.name} is missing"
            section = _section(api_md, method.full_name)
            assert f"[{method.input_type.name}](#{method.input_type.full_name})" in section
            assert f"[{method.output_type.name}](#{method.output_type.full_name})" in section
            assert "**Errors:**" in section, f"{method.full_name}: its comment lists no status codes"


def test_every_message_field_enum_and_value_is_documented(api_md: str, parsed: list[Any]) -> None:
    for f in FILES:
        for msg in _messages(f.DESCRIPTOR.message_types_by_name.values()):
            section = _section(api_md, msg.full_name)
            for fl in msg.fields:
                assert f"\n- **`{fl.name}`** (" in section, f"{msg.full_name}.{fl.name} is missing"
        for en in _enums(f.DESCRIPTOR):
            section = _section(api_md, en.full_name)
            for v in en.values:
                assert f"\n- **`{v.name}`** = {v.number}" in section, f"{en.full_name}.{v.name} is missing"
    for p in parsed:  # proto/README.md: every field states its meaning
        for m in p.messages:
            for fl in m.fields:
                assert fl.doc, f"{p.name}: {m.name}.{fl.name} has no comment"
        for e in p.enums:
            assert e.doc, f"{p.name}: enum {e.name} has no comment"
            for v in e.values:
                assert v.doc, f"{p.name}: {e.name}.{v.name} has no comment"


def test_markdown_keeps_angle_brackets_and_asterisks_visible(api_md: str) -> None:
    outside_code = re.sub(r"```.*?```|`[^`\n]*`|<a id=\"[^\"]*\"></a>|<!--.*?-->", "", api_md, flags=re.S)
    assert "<" not in outside_code and ">" not in outside_code, "raw < or > would be read as HTML"
    assert not re.search(r"(?<!\\)(?<!\*)\*(?!\*)", outside_code), "a lone * would start emphasis"


# ------------------------------------------------------------------------------ the parser vs protoc


def _messages(descriptors: Any) -> list[Descriptor]:
    out = []
    for d in descriptors:
        if not d.GetOptions().map_entry:
            out.append(d)
            out.extend(_messages(d.nested_types))
    return out


def _enums(file: Any) -> list[EnumDescriptor]:
    out = list(file.enum_types_by_name.values())
    for m in _messages(file.message_types_by_name.values()):
        out.extend(m.enum_types)
    return out


_SCALAR = {getattr(FieldDescriptor, "TYPE_" + name.upper()): name for name in apidoc.SCALARS}


def _type_name(fl: FieldDescriptor) -> str:
    if fl.message_type is not None:
        if fl.message_type.GetOptions().map_entry:
            k, v = fl.message_type.fields_by_name["key"], fl.message_type.fields_by_name["value"]
            return f"map<{_type_name(k)}, {_type_name(v)}>"
        return fl.message_type.full_name
    if fl.enum_type is not None:
        return fl.enum_type.full_name
    return _SCALAR[fl.type]


def _label(fl: FieldDescriptor) -> tuple[str, str]:
    """(label, oneof) as the parser models them."""
    oneof = fl.containing_oneof
    if oneof is not None and oneof.name == "_" + fl.name and len(oneof.fields) == 1:
        return "optional", ""  # proto3 `optional`: a synthetic oneof
    if fl.message_type is not None and fl.message_type.GetOptions().map_entry:
        return "map", ""
    return ("repeated" if fl.is_repeated else ""), (oneof.name if oneof is not None else "")


def _qualify(package: str, name: str) -> str:
    """A type name as written in a .proto file, as protoc's full name (no nested-scope lookup: the
    contract references its types by package-level names)."""
    if name.startswith("map<"):
        k, v = name[4:-1].split(", ")
        return f"map<{_qualify(package, k)}, {_qualify(package, v)}>"
    if name in apidoc.SCALARS or name.startswith(("google.", package + ".")):
        return name
    return f"{package}.{name}"


def test_the_parser_reads_the_contract_exactly_as_protoc_did(parsed: list[Any]) -> None:
    by_name = {p.name: p for p in parsed}
    assert set(by_name) == {Path(f.DESCRIPTOR.name).name for f in FILES}
    for f in FILES:
        fd = f.DESCRIPTOR
        p = by_name[Path(fd.name).name]
        assert p.package == fd.package
        assert [(s.name, [(r.name, _qualify(p.package, r.request), _qualify(p.package, r.response),
                           r.client_streaming, r.server_streaming) for r in s.rpcs]) for s in p.services] == \
               [(s.name, [(m.name, m.input_type.full_name, m.output_type.full_name, m.client_streaming,
                           m.server_streaming) for m in s.methods]) for s in fd.services_by_name.values()]
        want_msgs = {m.full_name.removeprefix(fd.package + "."): [
            (fl.name, fl.number, _type_name(fl), *_label(fl)) for fl in m.fields]
            for m in _messages(fd.message_types_by_name.values())}
        got_msgs = {m.name: [(fl.name, fl.number, _qualify(p.package, fl.type), fl.label, fl.oneof)
                             for fl in m.fields] for m in p.messages}
        assert got_msgs == want_msgs
        want_enums = {e.full_name.removeprefix(fd.package + "."): [(v.name, v.number) for v in e.values]
                      for e in _enums(fd)}
        got_enums = {e.name: [(v.name, v.number) for v in e.values] for e in p.enums}
        assert got_enums == want_enums


def test_the_parser_attaches_comments_as_protoc_documents_them() -> None:
    f = apidoc.parse(
        "// The file.\n"
        "\n"
        'syntax = "proto3";\n'
        "package demo.v1;\n"
        'import "google/protobuf/timestamp.proto";\n'
        "\n"
        "// Detached: a blank line follows, so it documents nothing.\n"
        "\n"
        "// The service.\n"
        "service S {\n"
        "  // Does X.\n"
        "  //   a formula\n"
        "  // Errors: NOT_FOUND.\n"
        "  rpc X(A) returns (stream A);\n"
        "}\n"
        "message A {\n"
        "  // Kind of A.\n"
        "  enum Kind { KIND_UNSPECIFIED = 0; KIND_ONE = 1; }  // trailing\n"
        "  message B {}\n"
        '  map<string, B> bs = 1 [json_name = "bees"];\n'
        "  oneof which {\n"
        "    // First.\n"
        "    string first = 2;\n"
        "    Kind kind = 3;\n"
        "  }\n"
        "  optional bool maybe = 4;\n"
        "  reserved 5, 6;\n"
        "  repeated google.protobuf.Timestamp at = 7; // when\n"
        "}\n",
        "demo.proto",
    )
    assert f.doc == ["The file."]
    assert f.package == "demo.v1"
    (svc,) = f.services
    assert svc.doc == ["The service."]
    (rpc,) = svc.rpcs
    assert (rpc.request, rpc.response, rpc.server_streaming) == ("A", "A", True)
    assert rpc.doc == ["Does X.", "  a formula", "Errors: NOT_FOUND."]
    assert [m.name for m in f.messages] == ["A", "A.B"]
    (kind,) = f.enums
    assert kind.name == "A.Kind" and kind.doc == ["Kind of A.", "", "trailing"]
    fields = {fl.name: fl for fl in f.messages[0].fields}
    assert (fields["bs"].type, fields["bs"].label) == ("map<string, B>", "map")
    assert (fields["first"].oneof, fields["first"].doc) == ("which", ["First."])
    assert fields["maybe"].label == "optional"
    assert (fields["at"].label, fields["at"].doc) == ("repeated", ["when"])
    md = apidoc.render([f])
    assert "**Errors:** NOT\\_FOUND." not in md and "**Errors:** NOT_FOUND." in md
    assert "```text\na formula\n```" in md


def test_the_parser_refuses_what_it_does_not_read() -> None:
    with pytest.raises(apidoc.ProtoSyntaxError):
        apidoc.parse('syntax = "proto2";\n', "old.proto")
    with pytest.raises(apidoc.ProtoSyntaxError):
        apidoc.parse('syntax = "proto3";\n/* block */\n', "block.proto")
    with pytest.raises(apidoc.ProtoSyntaxError):
        apidoc.parse('syntax = "proto3";\nextend Foo { int32 x = 1; }\n', "extend.proto")
