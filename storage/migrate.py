"""Versioned migrations: `sql/migrations/NNNN_<what>.sql`, applied in order, each in its own
transaction, under a cluster-wide advisory lock so several nodes may run `migrate` at once.
`sql/schema.sql` is the current truth; a test checks that the migrations produce exactly it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString, cast

import psycopg
from psycopg.types.json import Jsonb

from cronwheel.errors import FailedPrecondition, InvalidArgument, Unavailable
from cronwheel.storage.partitions import DEFAULT_CLUSTER, META_CLUSTER, META_PARTITIONS, check_cluster_owner
from cronwheel.storage.queries import q

# Any constant works as long as every migrator uses the same one.
MIGRATION_LOCK_KEY = 0x63726F6E  # "cron"
DEFAULT_PARTITIONS = 64
MAX_PARTITIONS = 4096

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    folder = resources.files("cronwheel.storage").joinpath("sql", "migrations")
    out = []
    for entry in folder.iterdir():
        m = _FILE.match(entry.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    out.sort(key=lambda mg: mg.version)
    versions = [mg.version for mg in out]
    # Unique and increasing; a gap is allowed: numbers are handed out to branches developed in
    # parallel (0026 to execution logs while 0023..0025 are other branches'), and a branch alone
    # must still migrate. Applied versions are recorded by number, so a later-merged lower number
    # is still applied on a database that has a higher one.
    if len(set(versions)) != len(versions) or versions[:1] not in ([], [1]):
        raise RuntimeError(f"migration versions must be unique, from 1, found {versions}")
    return out


def schema_sql() -> str:
    return resources.files("cronwheel.storage").joinpath("sql", "schema.sql").read_text()


@dataclass(frozen=True, slots=True)
class MigrateResult:
    applied: tuple[str, ...]
    current_version: int
    partitions: int
    cluster: str = DEFAULT_CLUSTER


def migrate(
    dsn: str,
    partitions: int = DEFAULT_PARTITIONS,
    progress: Callable[[str], None] | None = None,
    cluster: str = DEFAULT_CLUSTER,
) -> MigrateResult:
    """Bring the database to the newest schema and create the partition rows. Idempotent.

    The partition count and the cluster the database serves are fixed when the cluster is
    created: migrating an existing cluster with a different count or name raises
    FailedPrecondition and changes nothing (the meta rows are written in one transaction, after
    the schema migrations).
    """
    if not cluster or "/" in cluster:
        raise InvalidArgument("cluster", f"must be non-empty without '/', got {cluster!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidArgument("partitions", f"must be between 1 and {MAX_PARTITIONS}, got {partitions}")
    applied: list[str] = []
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise Unavailable("postgres", f"cannot connect to {redact(dsn)}: {first_line(exc)}") from exc
    with conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for mg in migrations():
                if mg.version in done:
                    continue
                if progress:
                    progress(f"applying {mg.version:04d}_{mg.name}")
                with conn.transaction():
                    conn.execute(cast(LiteralString, mg.sql))
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (mg.version, mg.name),
                    )
                applied.append(f"{mg.version:04d}_{mg.name}")
            with conn.transaction():
                row = conn.execute(
                    q("put_meta_if_absent"), {"key": META_PARTITIONS, "value": Jsonb(partitions)}
                ).fetchone()
                assert row is not None
                existing = int(row[0])
                if existing != partitions:
                    raise FailedPrecondition(
                        f"partitions: this cluster was created with {existing} partitions, "
                        f"not {partitions} (the count is fixed at creation)"
                    )
                owner = conn.execute(
                    q("put_meta_if_absent"), {"key": META_CLUSTER, "value": Jsonb(cluster)}
                ).fetchone()
                assert owner is not None
                check_cluster_owner(str(owner[0]), cluster)
                conn.execute(q("ensure_partitions"), {"count": partitions})
            version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return MigrateResult(tuple(applied), int(version[0]) if version else 0, partitions, cluster)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def redact(dsn: str) -> str:
    """A DSN safe to print: the password, if any, is replaced."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)
