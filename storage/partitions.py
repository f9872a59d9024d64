"""The partitions port: fencing records, ownership history, and the cluster's meta settings.

    record_epoch            take a partition's fencing record (only with a strictly greater epoch)
    record_partition_change append acquired / released / lost to the ownership history
    current_epoch           the recorded (epoch, owner) of one partition
    list_partitions         every partition's fencing record
    partition_count         P, fixed at migrate time
    claim_cluster           which cluster (name and etcd cluster id) this database serves (recorded once,
                            then enforced)
    report_unowned          the partition_unowned alert event, once per gap (any node may report)
    database_ts             PostgreSQL's wall clock (each node's clock-skew guard measures against it)

One database serves one cluster: `cluster_meta.cluster` is written by the first `migrate` (or, on
a database migrated before the name was recorded, by the first node) and a node of another
cluster is refused (`check_cluster_owner`), because two clusters would take each other's fencing
records and both stall. A name is not an identity (every cluster is `cronwheel` by default), so
the first node also records its etcd cluster's id (`cluster_meta.etcd_cluster_id`, etcd's own,
from a response header): a node of a second etcd cluster of the same name is refused too
(`check_etcd_cluster`). A database recorded before the id was (issue 48) adopts the id of the
first node that starts on it. A database that was never migrated is reported as such (`NotMigrated`,
an `Unavailable`: the CLI exits 3), not as a driver error.

Task-safe: shares the node's `Database` pool; holds no state of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.types.json import Jsonb

from cronwheel.errors import FailedPrecondition, Unavailable
from cronwheel.storage.api import Conn
from cronwheel.storage.db import Database
from cronwheel.storage.errors import NotMigrated
from cronwheel.storage.queries import q

DEFAULT_CLUSTER = "cronwheel"  # the cluster name of `cronwheel migrate` and `cronwheel node` alike
META_PARTITIONS = "partitions"
META_CLUSTER = "cluster"
META_ETCD_CLUSTER = "etcd_cluster_id"


@dataclass(frozen=True, slots=True)
class FencingRecord:
    """A partition's row: the epoch writes are fenced with, who recorded it, and when."""

    partition: int
    epoch: int
    owner: str | None
    acquired_at: datetime | None


def check_cluster_owner(stored: str, wanted: str) -> None:
    """The one rule for a database shared by two clusters: refuse, naming both."""
    if stored != wanted:
        raise FailedPrecondition(
            f"cluster: this database belongs to cluster {stored!r}, not {wanted!r} "
            f"(one database serves one cluster; start the node with --cluster {stored} "
            f"or give cluster {wanted!r} its own database)"
        )


def check_etcd_cluster(cluster: str, stored: str, wanted: str) -> None:
    """Two etcd clusters of one name on one database: refuse, naming both ids."""
    if stored != wanted:
        raise FailedPrecondition(
            f"cluster: this database belongs to cluster {cluster!r} of etcd cluster {stored}, not of etcd cluster "
            f"{wanted} (two etcd clusters both named {cluster!r} must not share a database: point this node at "
            f"etcd cluster {stored}, or give the other etcd cluster its own database)"
        )


class PartitionsPort:
    """One typed method per query of partitions.sql and cluster_meta.sql."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def record_epoch(self, partition: int, epoch: int, owner: str) -> bool:
        """Record a new owner's epoch; False if the row already has this or a newer epoch."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(q("record_epoch"), {"partition": partition, "epoch": epoch, "owner": owner})
            won = cur.rowcount == 1
            if won:
                await conn.execute(
                    q("record_partition_history"),
                    {"partition": partition, "epoch": epoch, "owner": owner, "kind": "acquired"},
                )
            return won

    async def record_partition_change(self, partition: int, epoch: int, owner: str, kind: str) -> None:
        async with self.db.connection() as conn:
            await conn.execute(
                q("record_partition_history"), {"partition": partition, "epoch": epoch, "owner": owner, "kind": kind}
            )

    async def current_epoch(self, partition: int) -> tuple[int, str | None]:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("current_epoch"), {"partition": partition})
            row = await cur.fetchone()
        if row is None:
            raise Unavailable("postgres", f"partition {partition} has no row (run migrate)")
        return int(row[0]), row[1]

    async def list_partitions(self) -> list[FencingRecord]:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("list_partitions"), {})
            return [FencingRecord(int(r[0]), int(r[1]), r[2], r[3]) for r in await cur.fetchall()]

    async def report_unowned(self, partition: int, unowned_for_s: float, threshold_s: float, actor: str,
                             at: datetime) -> bool:
        """Append the `partition_unowned` alert of this gap; False when another node (or this one)
        already reported the gap."""
        async with self.db.transaction() as conn:
            await conn.execute(q("lock_unowned_report"), {"partition": partition})
            cur = await conn.execute(q("insert_unowned_event"), {
                "partition": partition, "unowned_for_s": round(unowned_for_s, 3), "threshold_s": threshold_s,
                "actor": actor, "at": at})
            return await cur.fetchone() is not None  # its webhook deliveries: from the outbox, later

    async def database_ts(self) -> float:
        """PostgreSQL's wall clock now, as Unix seconds (the clock-skew guard's reference)."""
        async with self.db.connection() as conn:
            cur = await conn.execute(q("database_ts"), {})
            row = await cur.fetchone()
        assert row is not None
        return float(row[0])

    async def partition_count(self) -> int:
        async with self.db.connection() as conn:
            cur = await conn.execute(q("get_meta"), {"key": META_PARTITIONS})
            row = await cur.fetchone()
        if row is None:
            raise NotMigrated()
        return int(row[0])

    async def claim_cluster(self, cluster: str, etcd_cluster_id: str) -> None:
        """Refuse (FailedPrecondition) unless this database serves `cluster` on the etcd cluster
        `etcd_cluster_id`. What is not recorded yet (a database migrated before the name, or
        before the etcd id, was) is claimed by the first node that asks, atomically per key: of
        two clusters starting at once, one wins and the other is refused."""
        async with self.db.connection() as conn:
            name = await self._meta_if_absent(conn, META_CLUSTER, cluster)
            check_cluster_owner(name, cluster)
            check_etcd_cluster(cluster, await self._meta_if_absent(conn, META_ETCD_CLUSTER, etcd_cluster_id),
                               etcd_cluster_id)

    @staticmethod
    async def _meta_if_absent(conn: Conn, key: str, value: str) -> str:
        cur = await conn.execute(q("put_meta_if_absent"), {"key": key, "value": Jsonb(value)})
        row = await cur.fetchone()
        assert row is not None, "put_meta_if_absent returns the stored value"
        return str(row[0])
