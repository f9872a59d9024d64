"""The proto3 JSON mapping, fast: JSON documents to messages and back for the REST transcoder
(cluster/api/rest.py), with google.protobuf.json_format as the reference and the fallback.

Why not json_format alone: it is pure Python and rebuilds per-message lookup tables on every
message; a SubmitJobs of 1,000 jobs took 135 ms to parse there, more than the node took to store
it. This module walks the descriptors with cached tables and sets fields directly; what it does
not read itself (maps, Any, Struct, wrappers, and bytes and 32-bit floats, which the contract
does not use) goes to json_format, field by field, so the result is the mapping's.
tests/unit/test_rest_transcoding.py checks both directions against json_format.

Reading refuses a key that names no field (the API's names, or lowerCamelCase as the mapping
allows), a value of the wrong JSON type, and two fields of one oneof, with `JsonError(path, why)`.
"""

from __future__ import annotations

import calendar
import math
import re
import time
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

from google.protobuf import descriptor, json_format

FD = descriptor.FieldDescriptor
_INTS = {FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32, FD.TYPE_UINT32, FD.TYPE_FIXED32}
_LONGS = {FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64, FD.TYPE_UINT64, FD.TYPE_FIXED64}
_TO_JSON_FORMAT = {FD.TYPE_BYTES, FD.TYPE_FLOAT}  # scalar types no field of cronwheel.v1 has
_TEXT_WKT = {"google.protobuf.Timestamp", "google.protobuf.Duration"}
_MASK = "google.protobuf.FieldMask"
_RFC3339_UTC = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$")
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class JsonError(ValueError):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


@cache
def fields_by_key(desc: descriptor.Descriptor) -> dict[str, FD]:
    """Every field by its proto name and by its JSON (lowerCamelCase) name (the names a body's
    key or a query parameter may use)."""
    out = {f.json_name: f for f in desc.fields}
    out.update(desc.fields_by_name)
    return out


@cache  # asked for every key of every object read: SubmitJobs reads thousands
def _delegated(f: FD) -> bool:
    """Whether json_format reads and writes the field (see the module's docstring)."""
    if f.type in _TO_JSON_FORMAT:
        return True
    mt = f.message_type
    return mt is not None and (mt.GetOptions().map_entry or
                               (mt.full_name.startswith("google.protobuf.") and mt.full_name not in _TEXT_WKT
                                and mt.full_name != _MASK))


def parse(doc: Any, msg: Any, path: str = "") -> None:
    """Fill `msg` from a JSON object (a dict); JsonError naming the field on anything wrong."""
    if not isinstance(doc, dict):
        raise JsonError(path.rstrip(".") or "body", "expected a JSON object")
    fields = fields_by_key(msg.DESCRIPTOR)
    oneofs: dict[str, str] = {}
    for key, value in doc.items():
        f = fields.get(key)
        where = f"{path}{key}"
        if f is None:
            raise JsonError(where, f"unknown field {key!r} of {msg.DESCRIPTOR.name}")
        if value is None:
            continue  # null: the field's default
        if f.containing_oneof is not None and not f.containing_oneof.name.startswith("_"):
            seen = oneofs.setdefault(f.containing_oneof.name, key)
            if seen != key:
                raise JsonError(where, f"{seen} and {key} are of one oneof: give one")
        if _delegated(f):
            try:
                json_format.ParseDict({f.name: value}, msg)
            except json_format.ParseError as exc:
                raise JsonError(where, str(exc)) from None
        elif f.is_repeated:
            if not isinstance(value, list):
                raise JsonError(where, "expected a JSON array")
            target = getattr(msg, f.name)
            for i, item in enumerate(value):
                if f.message_type is not None and f.message_type.full_name not in _TEXT_WKT:
                    parse(item, target.add(), f"{where}[{i}].")
                else:
                    scalar = _scalar(f, item, f"{where}[{i}]")
                    try:
                        target.append(scalar)
                    except ValueError as exc:  # out of the field's range, as json_format says
                        raise JsonError(f"{where}[{i}]", str(exc)) from None
        elif f.message_type is not None:
            _message(f, value, getattr(msg, f.name), where)
        else:
            scalar = _scalar(f, value, where)
            try:
                setattr(msg, f.name, scalar)
            except ValueError as exc:  # out of the field's range (an int32 of 2**40), as json_format says
                raise JsonError(where, str(exc)) from None


def _message(f: FD, value: Any, sub: Any, where: str) -> None:
    name = f.message_type.full_name
    if name in _TEXT_WKT:
        if not isinstance(value, str):
            raise JsonError(where, "expected a string")
        m = _RFC3339_UTC.match(value) if name == "google.protobuf.Timestamp" else None
        try:
            if m is None:
                sub.FromJsonString(value)
            else:  # the common form, without strptime (json_format's way, 10x slower)
                sub.seconds = calendar.timegm(datetime.fromisoformat(m[1]).timetuple())  # no such day: ValueError
                sub.nanos = int((m[2] or "0").ljust(9, "0"))
        except ValueError as exc:
            raise JsonError(where, str(exc)) from None
    elif name == _MASK:
        if not isinstance(value, str):
            raise JsonError(where, "expected a string of comma-separated paths")
        sub.paths.extend(re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), p.strip())
                         for p in value.split(",") if p.strip())  # the API's names or lowerCamelCase
    else:
        sub.SetInParent()
        parse(value, sub, f"{where}.")


def _scalar(f: FD, v: Any, where: str) -> Any:
    t = f.type
    if t == FD.TYPE_STRING:
        if not isinstance(v, str):
            raise JsonError(where, f"expected a string, got {type(v).__name__}")
        return v
    if t == FD.TYPE_BOOL:
        if not isinstance(v, bool):
            raise JsonError(where, f"expected true or false, got {v!r}")
        return v
    if t == FD.TYPE_ENUM:
        if isinstance(v, str):
            ev = f.enum_type.values_by_name.get(v)
            if ev is None:
                raise JsonError(where, f"unknown value {v!r} of {f.enum_type.name}")
            return ev.number
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        raise JsonError(where, f"expected a value name of {f.enum_type.name}")
    if t in _INTS or t in _LONGS:
        return _integer(v, where)
    if t == FD.TYPE_DOUBLE:
        if isinstance(v, str) and v in _SPECIAL:
            return _SPECIAL[v]
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise JsonError(where, f"expected a number, got {v!r}")
        try:
            return float(v)
        except ValueError:
            raise JsonError(where, f"expected a number, got {v!r}") from None
    raise JsonError(where, f"unsupported field type {t}")  # pragma: no cover (the others are _delegated)


def _integer(v: Any, where: str) -> int:
    if isinstance(v, bool):
        raise JsonError(where, f"expected an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    raise JsonError(where, f"expected an integer, got {v!r}")


# ------------------------------------------------------------------------------ answers


def render(msg: Any) -> dict[str, Any]:
    """The message as the mapping writes it with the API's names, fields without presence
    printed with their defaults (json_format's always_print_fields_with_no_presence)."""
    plan = _plan(msg.DESCRIPTOR)
    if plan is None:
        return dict(json_format.MessageToDict(msg, always_print_fields_with_no_presence=True,
                                              preserving_proto_field_name=True))
    out: dict[str, Any] = {}
    for name, presence, repeated, write in plan:
        if presence and not msg.HasField(name):
            continue
        value = getattr(msg, name)
        out[name] = [write(v) for v in value] if repeated else write(value)
    return out


Plan = tuple[tuple[str, bool, bool, Callable[[Any], Any]], ...]


@cache
def _plan(desc: descriptor.Descriptor) -> Plan | None:
    """(name, has presence, repeated, writer) per field; None: json_format writes this message."""
    if any(_delegated(f) for f in desc.fields):
        return None
    return tuple((f.name, f.has_presence and not f.is_repeated, f.is_repeated, _writer(f)) for f in desc.fields)


def _writer(f: FD) -> Callable[[Any], Any]:
    if f.message_type is not None:
        name = f.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return _timestamp
        if name in _TEXT_WKT or name == _MASK:
            return lambda v: v.ToJsonString()
        return render
    t = f.type
    if t == FD.TYPE_ENUM:
        names = {v.number: v.name for v in f.enum_type.values}
        return lambda v: names.get(v, v)
    if t in _LONGS:
        return str
    if t == FD.TYPE_DOUBLE:
        return _double
    return _same


def _same(v: Any) -> Any:
    return v


def _double(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _timestamp(ts: Any) -> str:
    """RFC 3339 in UTC with 0, 3, 6 or 9 fraction digits, as Timestamp.ToJsonString writes it."""
    g = time.gmtime(ts.seconds)
    head = f"{g.tm_year:04d}-{g.tm_mon:02d}-{g.tm_mday:02d}T{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d}"
    n = ts.nanos
    if n == 0:
        return head + "Z"
    if n % 1_000_000 == 0:
        return f"{head}.{n // 1_000_000:03d}Z"
    if n % 1000 == 0:
        return f"{head}.{n // 1000:06d}Z"
    return f"{head}.{n:09d}Z"
