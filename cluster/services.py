"""The gRPC services a node serves and the interceptors in front of them, in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from cronwheel.cluster.admin_service import AdminService
from cronwheel.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from cronwheel.cluster.node import Node

Registrar = Callable[[Any, grpc.aio.Server], None]


def grpc_services(node: Node) -> list[tuple[Registrar, Any, str]]:
    """(add_XServicer_to_server, servicer, full service name) for every service of a node."""
    return [
        (
            admin_pb2_grpc.add_AdminServiceServicer_to_server,
            AdminService(node),
            admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        ),
    ]


def interceptors(node: Node) -> list[grpc.aio.ServerInterceptor]:
    return []
