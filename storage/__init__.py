"""cronwheel.storage: PostgreSQL, the durable truth of cronwheel.

What lives here: the schema (`sql/schema.sql`, built by `sql/migrations/NNNN_*.sql`), every query
(`sql/queries/<table>.sql`, loaded by name), and `PgStore`, the one implementation of the storage
port. Nothing above this package writes SQL.

Invariants kept here, whoever calls:

- **Fencing.** `partitions.epoch` only increases (`record_epoch` updates `WHERE epoch < new`).
  Every write on behalf of a partition runs in `PgStore.fenced(p, epoch)`, whose first statement
  share-locks the partition row and checks the epoch; the acquisition update conflicts with that
  lock. A node that lost p (paused past its lease, partitioned away) gets `StaleEpoch` and writes
  nothing.
- **Fire once.** `UNIQUE (schedule_id, scheduled_for)`: a tick has at most one execution, even if
  two owners somehow fired it. Fire batches insert `ON CONFLICT DO NOTHING` and report duplicates.
- **Submit once.** `UNIQUE (tenant, idempotency_key)`.
- **One cluster per database.** `cluster_meta.cluster`, recorded by `migrate` (or the first node),
  is checked by every node at start (`PartitionsPort.claim_cluster`).

How it fails: driver errors are mapped once, here: unique violations become `AlreadyExists`, lost
connections `Unavailable`; fencing failures are `StaleEpoch`. Callers never see psycopg errors.
"""

from cronwheel.storage.db import Database, StoreConfig
from cronwheel.storage.migrate import MigrateResult, migrate
from cronwheel.storage.partitions import FencingRecord, NotMigrated, PartitionsPort
from cronwheel.storage.store import (
    FireBatchParams,
    FireBatchResult,
    Fired,
    PartitionEvent,
    PgStore,
    PlainTicks,
    ScheduleAdvance,
    Tick,
)

__all__ = [
    "Database",
    "FencingRecord",
    "FireBatchParams",
    "FireBatchResult",
    "Fired",
    "PartitionEvent",
    "MigrateResult",
    "NotMigrated",
    "PartitionsPort",
    "PgStore",
    "PlainTicks",
    "ScheduleAdvance",
    "StoreConfig",
    "Tick",
    "migrate",
]
