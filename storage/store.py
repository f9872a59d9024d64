"""PgStore: the one PostgreSQL implementation of cronwheel's storage port.

Concurrency contract: a PgStore is shared by every task of a node; it holds an async connection
pool and no other mutable state. Each method borrows a connection for one transaction.

Fencing. Writes made on behalf of a partition owner run inside `fenced(partition, epoch)`: the
transaction's first statement share-locks the partition row and checks it still carries the
caller's epoch (else `StaleEpoch`, nothing written). `record_epoch()` (the acquisition update)
conflicts with that lock, so a new owner's epoch cannot land in the middle of an old owner's
batch, and once it has landed every later fenced transaction of the old owner fails its check.
Each fenced statement also names the epoch in its own WHERE clause (defence in depth, and a test
checks every fenced query does). This, not the etcd lease, is what stops a paused node from
firing a tick twice; the unique index on
(schedule_id, scheduled_for) is the second wall.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

from cronwheel.storage.api import Event, EventsPort, ExplainPort
from cronwheel.storage.db import Database, StoreConfig
from cronwheel.storage.dependencies import DependenciesPort
from cronwheel.storage.dispatch import DispatchPort
from cronwheel.storage.executions import ExecutionsPort
from cronwheel.storage.firing import FiringPort
from cronwheel.storage.logs import LogsPort
from cronwheel.storage.partitions import PartitionsPort
from cronwheel.storage.retention import RetentionPort
from cronwheel.storage.schedules import SchedulesPort
from cronwheel.storage.secrets import SealReport, SecretsPort
from cronwheel.storage.tenants import TenantsPort
from cronwheel.storage.tokens import TokensPort
from cronwheel.storage.webhooks import WebhooksPort


class PgStore(Database):
    """PostgreSQL via psycopg 3 and psycopg_pool. See storage/db.py for fencing. Composes the
    domain ports: `firing` (storage/firing.py), `dispatch` (storage/dispatch.py), and the API's
    `schedules`, `executions`, `events`, `explain` (storage/schedules.py, executions.py, api.py),
    `partitions` (storage/partitions.py), `retention` (storage/retention.py)."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.firing = FiringPort(self)
        self.dispatch = DispatchPort(self)
        self.schedules = SchedulesPort(self)
        self.executions = ExecutionsPort(self)
        self.events = EventsPort(self)
        self.explain = ExplainPort(self)
        self.partitions = PartitionsPort(self)
        self.webhooks = WebhooksPort(self, config.secrets)  # storage/webhooks.py
        self.secrets = SecretsPort(self, config.secrets)  # storage/secrets.py: named secrets, a SecretProvider
        self.retention = RetentionPort(self)
        self.tenants = TenantsPort(self)  # storage/tenants.py
        self.tokens = TokensPort(self)  # storage/tokens.py
        self.dependencies = DependenciesPort(self)  # storage/dependencies.py: job B after job A
        self.logs = LogsPort(self)  # storage/logs.py: execution logs, scaling signals

    async def seal_at_rest(self) -> dict[str, SealReport]:
        """Every stored secret, of every table that keeps some (storage/secrets.py `seal_rows`):
        refuse (SecretUnavailable) when this store lacks a key one needs, else re-seal under the
        first key what it did not seal. By what the secrets are (as the refusal names them)."""
        return {"webhook secrets": await self.webhooks.seal_at_rest(),
                "named secrets": await self.secrets.seal_at_rest()}

    async def insert_event(
        self,
        kind: str,
        *,
        tenant: str | None = None,
        schedule_id: uuid.UUID | None = None,
        execution_id: uuid.UUID | None = None,
        partition: int | None = None,
        actor: str | None = None,
        alert: bool = False,
        data: dict[str, Any] | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> None:
        """`events.insert` for the dispatch path's callers (kept until they use the port)."""
        await self.events.insert(Event(kind, tenant, schedule_id, execution_id, partition, actor, alert, data),
                                 conn=conn)
