"""Server reflection, `grpc.reflection.v1` as well as `v1alpha`, from the same descriptors.

grpcio-reflection (1.85) ships only `grpc.reflection.v1alpha.ServerReflection`; grpcurl and
Postman ask for `grpc.reflection.v1` first. The two protocols are the same messages under
another package name (same fields, same numbers: the wire bytes are identical), so v1 is served
by grpcio-reflection's own servicer, reading and writing its v1alpha messages on the v1 method
path. The v1 file descriptor (v1alpha's, renamed) is added to the default descriptor pool, so
reflection can describe `grpc.reflection.v1.ServerReflection` too, and `v1_messages()` gives
the genuine v1 message classes (what a v1 client, such as the tests', uses).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA = "grpc.reflection.v1alpha"
V1 = "grpc.reflection.v1"
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_SERVICE = f"{V1}.ServerReflection"
V1_METHOD = f"/{V1_SERVICE}/ServerReflectionInfo"
SERVICE_NAMES = (reflection.SERVICE_NAME, V1_SERVICE)


def _renamed(type_name: str) -> str:
    return type_name.replace(f".{V1ALPHA}.", f".{V1}.", 1)


def _rename_message(msg: descriptor_pb2.DescriptorProto) -> None:
    for f in msg.field:
        if f.type_name:
            f.type_name = _renamed(f.type_name)
    for nested in msg.nested_type:
        _rename_message(nested)


def v1_file() -> Any:
    """The v1 reflection FileDescriptor, added to the default pool on first use."""
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE)
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(fdp)
    fdp.name, fdp.package = V1_FILE, V1
    fdp.options.Clear()
    for msg in fdp.message_type:
        _rename_message(msg)
    for svc in fdp.service:
        for m in svc.method:
            m.input_type, m.output_type = _renamed(m.input_type), _renamed(m.output_type)
    pool.AddSerializedFile(fdp.SerializeToString())
    return pool.FindFileByName(V1_FILE)


def v1_messages() -> tuple[Any, Any]:
    """(ServerReflectionRequest, ServerReflectionResponse) of grpc.reflection.v1."""
    fd = v1_file()
    return (message_factory.GetMessageClass(fd.message_types_by_name["ServerReflectionRequest"]),
            message_factory.GetMessageClass(fd.message_types_by_name["ServerReflectionResponse"]))


def enable(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection v1alpha and v1 for `service_names` (plus the two reflection services)."""
    v1_file()
    names = [*service_names, *(n for n in SERVICE_NAMES if n not in service_names)]
    servicer = reflection.aio.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)  # v1alpha
    handler = grpc.method_handlers_generic_handler(V1_SERVICE, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString),
    })
    server.add_generic_rpc_handlers((handler,))
