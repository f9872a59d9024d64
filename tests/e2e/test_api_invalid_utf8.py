"""A request whose string field holds invalid UTF-8 is INVALID_ARGUMENT from every
SchedulerService RPC (protobuf refuses to decode it; the edge must say so, not UNKNOWN with the
text of the decoder's exception). Raw bytes go through a real channel to a real node process."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import scheduler_pb2

from .api_cluster import TOKENS, api_cluster

pytestmark = [pytest.mark.e2e]
SERVICE = scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"]
BAD = b"\xff\xfe not utf-8 \xc3"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def bad_string(message: Descriptor, depth: int = 0) -> bytes | None:
    """The wire bytes of `message` with one string field (top level first, else nested) set to
    invalid UTF-8; None if it has no string field within 3 levels."""
    for f in message.fields:
        if f.type == FieldDescriptor.TYPE_STRING:
            return _length_delimited(f.number, BAD)
    if depth < 3:
        for f in message.fields:
            if f.type == FieldDescriptor.TYPE_MESSAGE and (inner := bad_string(f.message_type, depth + 1)):
                return _length_delimited(f.number, inner)
    return None


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as got:
        yield got


@pytest.mark.parametrize("method", [m.name for m in SERVICE.methods])
def test_invalid_utf8_in_a_string_field_is_invalid_argument(node: tuple[ProcessCluster, str], method: str) -> None:
    m = SERVICE.methods_by_name[method]
    raw = bad_string(m.input_type)
    assert raw is not None, f"{m.input_type.full_name} has no string field to corrupt"
    with grpc.insecure_channel(node[1]) as ch:
        call = ch.unary_unary(f"/{SERVICE.full_name}/{method}", request_serializer=None,
                              response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            call(raw, metadata=(("authorization", f"Bearer {TOKENS['acme'][0]}"),), timeout=20)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    details = err.value.details() or ""
    assert "UTF-8" in details and "DecodeError" not in details
