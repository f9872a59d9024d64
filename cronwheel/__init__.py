"""cronwheel: a distributed job scheduler that fires one-off, delayed and cron jobs on time and
never twice.

The package is laid out as the architecture (docs/design.md draws it room by room):

    cronwheel.wheel     hierarchical timing wheel (pure)
    cronwheel.cron      cron semantics: parsing, zones, DST, H fields, jitter, misfire, overlap (pure)
    cronwheel.storage   PostgreSQL schema, migrations, named queries; fencing is enforced here
    cronwheel.cluster   the node: etcd membership, partition leases, preload, fire, dispatch, API
    cronwheel.client    what users import: Client and Worker
    cronwheel.v1        generated gRPC stubs of proto/cronwheel/v1

Dependencies point one way (checked from the source by tests/unit/test_architecture.py, since
import-linter cannot see packages mapped from top-level folders): cli -> cluster -> storage ->
cron | wheel | v1; `client` is a peer of `cluster` that imports only `v1`, so an application never
pulls in the server. `backoff`, `clock`, `egress`, `entropy`, `errors`, `failpoints`, `heap`,
`http_target`, `jitter`, `limits`, `logs`, `secret_store`, `times`, `token_format` and `tracing` are
leaves everyone may use (the list is tests/unit/test_architecture.py's LEAVES).
"""

__version__ = "0.1.0"
