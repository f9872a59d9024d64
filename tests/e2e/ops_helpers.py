"""Shared by the ops tests (metrics, health, readiness, reflection): read a real node's /metrics,
wait for its health, without any cronwheel client code in between."""

from __future__ import annotations

import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from cronwheel.devtools.harness import NodeProc

from .helpers import wait_until

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CRONWHEEL_SERVICES = ("cronwheel.v1.SchedulerService", "cronwheel.v1.AdminService", "cronwheel.v1.DispatchService")


def metrics_url(node: NodeProc) -> str:
    line = wait_until(lambda: next((ln for ln in node.lines if " metrics on " in ln), None), 30,
                      f"{node.name}'s metrics line")
    return line.rsplit(" ", 1)[1].strip()


def scrape(node: NodeProc) -> str:
    with urllib.request.urlopen(metrics_url(node), timeout=10) as resp:
        return resp.read().decode()


def samples(node: NodeProc) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the node's /metrics."""
    out = {}
    for fam in text_string_to_metric_families(scrape(node)):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(node: NodeProc, name: str, **labels: str) -> float:
    return samples(node).get((name, tuple(sorted(labels.items()))), 0.0)


def health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service),
                                                         timeout=5).status
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return -1
            raise


def wait_serving(address: str, timeout_s: float = 30) -> None:
    wait_until(lambda: health(address) == SERVING, timeout_s, f"{address} to report SERVING")
