"""The gRPC services a node serves and the interceptors in front of them, in one place.

Interceptors: `auth.AuthInterceptor` authenticates every call to a cronwheel.v1 service (bearer
token -> tenant or admin; dev mode without an auth file), refuses tenants on admin-only RPCs,
and maps domain errors to status codes; API-made tokens are checked against `node.tokens`
(cluster/api/tokens.py, refreshed by the node's `token-cache` task). Health and reflection are served without a token.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import grpc

from cronwheel.cluster.api.admin_service import AdminService
from cronwheel.cluster.api.auth import AuthInterceptor, load_auth, server_credentials
from cronwheel.cluster.api.scheduler_service import SchedulerService
from cronwheel.cluster.api.status import NodeStatus
from cronwheel.cluster.api.tenant_service import TenantService
from cronwheel.cluster.api.webhook_service import WebhookService
from cronwheel.cluster.metrics import RpcMetricsInterceptor
from cronwheel.v1 import admin_pb2, admin_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

if TYPE_CHECKING:
    from cronwheel.cluster.node import Node

Registrar = Callable[[Any, grpc.aio.Server], None]


def grpc_services(node: Node) -> list[tuple[Registrar, Any, str]]:
    """(add_XServicer_to_server, servicer, full service name) for every service of a node. The
    one place that knows the Node: each servicer gets only what it uses."""
    retention = timedelta(days=node.config.retention_days)
    return [
        (
            admin_pb2_grpc.add_AdminServiceServicer_to_server,
            AdminService(node.store, node.clock, NodeStatus(node)),
            admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        ),
        (
            scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server,
            SchedulerService(node.store, node.clock, lambda: node.partitions, retention, node.metrics,
                             node.config.webhooks.egress),
            scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name,
        ),
        (
            admin_pb2_grpc.add_WebhookServiceServicer_to_server,
            WebhookService(node.store, node.clock, node.config.webhooks.egress),
            admin_pb2.DESCRIPTOR.services_by_name["WebhookService"].full_name,
        ),
        (
            admin_pb2_grpc.add_TenantServiceServicer_to_server,
            TenantService(node.store, node.clock, node.tokens),
            admin_pb2.DESCRIPTOR.services_by_name["TenantService"].full_name,
        ),
    ]


def interceptors(node: Node) -> list[grpc.aio.ServerInterceptor]:
    return [RpcMetricsInterceptor(node.metrics, node.clock),  # outermost: sees every code
            AuthInterceptor(load_auth(getattr(node.config, "auth_file", "")), node.tokens, node.clock)]


def credentials(node: Node) -> grpc.ServerCredentials | None:
    """TLS server credentials when the node has a certificate and key, else None (plaintext)."""
    return server_credentials(getattr(node.config, "tls_cert", ""), getattr(node.config, "tls_key", ""))
