"""cronwheel: a distributed job scheduler that fires one-off, delayed and cron jobs on time and
never twice.

The package is laid out as the architecture (see DESIGN.md and the README):

    cronwheel.wheel     hierarchical timing wheel (pure)
    cronwheel.cron      cron semantics: parsing, zones, DST, H fields, jitter, misfire, overlap (pure)
    cronwheel.storage   PostgreSQL schema, migrations, named queries; fencing is enforced here
    cronwheel.cluster   the node: etcd membership, partition leases, preload, fire, dispatch, API
    cronwheel.client    what users import: Client and Worker
    cronwheel.v1        generated gRPC stubs of proto/cronwheel/v1

Dependencies point one way (checked by import-linter): cli -> client -> cluster -> storage ->
cron | wheel. `clock` and `errors` are leaves everyone may use.
"""

__version__ = "0.1.0"
