"""cronwheel.storage: PostgreSQL, the durable truth of cronwheel.

What lives here: the schema (`sql/schema.sql`, built by `sql/migrations/NNNN_*.sql`), every query
(`sql/queries/<table>.sql`, loaded by name), and `PgStore`, the one implementation of the storage
port. Nothing above this package writes SQL. The port is split by domain, one typed method per
query: `db.Database` (pool, transactions, the fence), and on a PgStore `store.firing`
(firing.py), `store.dispatch` (dispatch.py), `store.schedules`, `store.executions` (the API's
commands), `store.events`, `store.explain` (schedules.py, executions.py, api.py; `api.rows` is
their one row decoder).

Invariants kept here, whoever calls:

- **Fencing.** `partitions.epoch` only increases (`record_epoch` updates `WHERE epoch < new`).
  Every write on behalf of a partition runs in `PgStore.fenced(p, epoch)`, whose first statement
  share-locks the partition row and checks the epoch; the acquisition update conflicts with that
  lock. A node that lost p (paused past its lease, partitioned away) gets `StaleEpoch` and writes
  nothing.
- **Fire once.** The unique index `executions_schedule_tick (schedule_id, scheduled_for)`, over the
  rows of a schedule (partial: one-offs have none): a tick has at most one execution, even if
  two owners somehow fired it. Fire batches insert `ON CONFLICT DO NOTHING` and report duplicates.
- **Never lost.** A schedule's cursor (`schedule_due.next_run_at`) moves only by compare-and-set
  from the tick the same transaction recorded, and never for a paused, deleted or edited
  schedule (the fire guard, storage/firing.py).
- **Submit once.** `UNIQUE (tenant, idempotency_key)`.
- **Unique jobs.** `executions_unique`: one row per `unique_key` among the rows whose state is in
  their own `unique_states` (`cronwheel_unique_holds`, migration 0015); a group holding a unique
  job inserts with a bare `ON CONFLICT DO NOTHING` and reads the holders back (`by_unique_keys`).
- **One cluster per database.** `cluster_meta.cluster`, recorded by `migrate` (or the first node),
  and `cluster_meta.etcd_cluster_id`, recorded by the first node, are checked by every node at
  start (`PartitionsPort.claim_cluster`): a second etcd cluster of the same name is refused.
- **Secrets sealed at rest.** `webhooks.secret` and `secrets.value` hold values sealed by the
  store's `SecretStore` (cronwheel/secret_store.py); no read of the API selects them, and
  `PgStore.seal_at_rest` (every node start) refuses a key ring that lacks a key in use and
  re-seals under its first key what it did not seal (secrets.py `seal_rows`).

How it fails: driver errors are mapped once (`errors.map_error`): unique violations become
`AlreadyExists` naming the object and key (constraint name -> kind), lost connections
`Unavailable`, anything unexpected `Internal`; fencing failures are `StaleEpoch`. Callers never
see psycopg errors.
"""

from cronwheel.storage.db import Database, SessionLimits, StoreConfig
from cronwheel.storage.errors import NotMigrated
from cronwheel.storage.firing import (
    DueOneoff,
    DueSchedule,
    FireBatchParams,
    FireBatchResult,
    Fired,
    FiringPort,
    PartitionEvent,
    PlainTicks,
    ScheduleAdvance,
    Tick,
)
from cronwheel.storage.migrate import MigrateResult, migrate
from cronwheel.storage.partitions import FencingRecord, PartitionsPort
from cronwheel.storage.store import PgStore

__all__ = [
    "Database",
    "DueOneoff",
    "DueSchedule",
    "FencingRecord",
    "FireBatchParams",
    "FireBatchResult",
    "Fired",
    "FiringPort",
    "PartitionEvent",
    "MigrateResult",
    "NotMigrated",
    "PartitionsPort",
    "PgStore",
    "PlainTicks",
    "ScheduleAdvance",
    "SessionLimits",
    "StoreConfig",
    "Tick",
    "migrate",
]
