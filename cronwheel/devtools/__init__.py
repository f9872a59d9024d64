"""The dev tools: what runs cronwheel on one machine for a person, the tests, bench and chaos.

    localservers.py  real PostgreSQL and etcd on loopback
    dev.py           `cronwheel dev`: a whole local cluster (servers, nodes, a worker, the console)
    demo.py          the demo worker `cronwheel dev` and docker-compose run
    harness.py       the process harness (ProcessCluster, NodeProc) the tests, bench and chaos share

No product room imports this package (cluster, storage, client, wheel, cron, the console, the
shared leaves, and cli/ but its server commands, which start `cronwheel dev`):
tests/unit/test_architecture.py, rule `devtools`.
"""

# Before anything here imports gRPC: the harness and dev start servers, nodes and workers as
# children with a parent-death signal, so gRPC's fork handlers must be off (see localservers).
import cronwheel.devtools.localservers  # noqa: F401
