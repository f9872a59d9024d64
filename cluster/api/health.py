"""gRPC health, per service, and the node's readiness.

Every cronwheel.v1 service the node serves has its own health entry (`cronwheel.v1.
SchedulerService`, `cronwheel.v1.AdminService`, `cronwheel.v1.DispatchService`, ...), as does
the overall server (""). All of them say NOT_SERVING until the node is ready, then SERVING, and
NOT_SERVING again from the moment it starts stopping. The health and reflection services
themselves answer SERVING throughout (they work from the start).

Ready ("has joined and owns its share of partitions"), judged on the node's own view:
  1. its member key is in its view of etcd (it has joined), and
  2. every partition the rendezvous assignment over that view gives it is owned: its key is
     held, its epoch recorded in PostgreSQL, and the firer has loaded it (acts for it).
A single node owns all P partitions; a node assigned none (more nodes than partitions) is ready
once it has joined. Readiness is a latch: once ready, the node stays SERVING until it stops (a
later rebalance or an etcd outage does not flip it: the API and dispatch keep working without
partitions, and the ownership metrics and alerts watch partitions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cronwheel.clock import Clock
from cronwheel.cluster.coordination.coordinator import Coordinator

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
READY_POLL_S = 0.05


class Health:
    """The health servicer with the node's service names; `set_ready` flips them together."""

    def __init__(self, gated: Iterable[str], always: Iterable[str] = ()) -> None:
        self.servicer = health.aio.HealthServicer()
        self.gated = ["", *gated]
        self.always = [health.SERVICE_NAME, *always]
        self.ready = False

    def register(self, server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    async def start(self) -> None:
        """Before the server starts: the gated services NOT_SERVING, the others SERVING."""
        for name in self.always:
            await self.servicer.set(name, SERVING)
        await self.set_ready(False)

    async def set_ready(self, ready: bool) -> None:
        self.ready = ready
        for name in self.gated:
            await self.servicer.set(name, SERVING if ready else NOT_SERVING)


def owns_its_share(coordinator: Coordinator, acting: Callable[[], Iterable[int]]) -> bool:
    """Conditions 1 and 2 of the module docstring; `acting`: the partitions the firer acts for."""
    if coordinator.node_id not in coordinator.view.members:
        return False
    mine = {p for p, node in coordinator.assignment().items() if node == coordinator.node_id}
    return mine <= set(coordinator.owned.epochs) and mine <= set(acting())


async def wait_ready(coordinator: Coordinator, acting: Callable[[], Iterable[int]], clock: Clock) -> None:
    """Return once `owns_its_share` holds (checked every READY_POLL_S of `clock`)."""
    while not owns_its_share(coordinator, acting):
        await clock.sleep(READY_POLL_S)
