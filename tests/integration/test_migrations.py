from __future__ import annotations

from typing import Any, LiteralString, cast

import psycopg
import pytest

from cronwheel.errors import FailedPrecondition, InvalidArgument
from cronwheel.storage.migrate import migrate, schema_sql

pytestmark = pytest.mark.integration

CATALOG: dict[str, LiteralString] = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default
          FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name <> 'schema_migrations'
         ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
         ORDER BY 1, 2""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
          FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace
           AND conrelid::regclass::text <> 'schema_migrations'
         ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace
         ORDER BY 1""",
}


def catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as c:
        return {k: c.execute(v).fetchall() for k, v in CATALOG.items()}


def test_migrations_apply_twice_without_error(empty_dsn: str) -> None:
    first = migrate(empty_dsn, partitions=16)
    assert first.applied and first.current_version == int(first.applied[-1][:4])  # every one, the last last
    second = migrate(empty_dsn, partitions=16)
    assert second.applied == ()
    assert second.current_version == first.current_version
    with psycopg.connect(empty_dsn) as c:
        assert c.execute("SELECT count(*) FROM partitions").fetchone() == (16,)


def test_migrations_produce_exactly_schema_sql(empty_dsn: str, pg_server: Any) -> None:
    migrate(empty_dsn)
    other = pg_server.create_database("cw_schema_truth")
    with psycopg.connect(other, autocommit=True) as c:
        c.execute(cast(LiteralString, schema_sql()))
    assert catalog(empty_dsn) == catalog(other)


def test_concurrent_migrations_from_several_nodes_are_safe(empty_dsn: str) -> None:
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda _: migrate(empty_dsn, partitions=8), range(4)))
    applied = [r.applied for r in results if r.applied]
    assert len(applied) == 1, "exactly one migrator applies the migrations"


def test_partition_count_is_fixed_at_creation(empty_dsn: str) -> None:
    migrate(empty_dsn, partitions=8)
    with pytest.raises(FailedPrecondition, match="created with 8 partitions"):
        migrate(empty_dsn, partitions=16)


def test_partition_count_out_of_range_names_the_field(empty_dsn: str) -> None:
    with pytest.raises(InvalidArgument) as ei:
        migrate(empty_dsn, partitions=0)
    assert ei.value.field == "partitions"


def test_0022_owes_nothing_twice_and_scrubs_the_errors_tenants_saw(empty_dsn: str) -> None:
    """Upgrading to the webhook outbox: events that had their deliveries enqueued in their own
    transaction are not fanned out again, new events are, and the connection errors and reason
    phrases stored before are replaced by what a tenant may see."""
    from cronwheel.storage.migrate import migrations

    with psycopg.connect(empty_dsn, autocommit=True) as c:
        c.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                  " applied_at timestamptz NOT NULL DEFAULT now())")
        for mg in migrations():
            if mg.version < 22:
                c.execute(cast(LiteralString, mg.sql))
                c.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (mg.version, mg.name))
        c.execute("INSERT INTO events (kind, tenant) VALUES ('dead_letter', 'acme')")
        c.execute("INSERT INTO webhooks (id, url, secret, kinds, created_at) VALUES "
                  "('00000000-0000-0000-0000-000000000001', 'http://h/', 'x', '{dead_letter}', now())")
        c.execute("INSERT INTO webhook_deliveries (id, webhook_id, event_id, next_attempt_at, created_at, last_error)"
                  " SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000001', id, now(), now(), e FROM events,"
                  " unnest(ARRAY['URLError: [Errno 111] Connection refused', 'HTTP 500 db-7 is down',"
                  " 'the event is no longer in the log (retention): nothing to send']) AS e")
    assert migrate(empty_dsn, partitions=16).applied[0] == "0022_webhook_outbox"  # and any later ones
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM events WHERE webhooks_pending").fetchone() == (0,)
        c.execute("INSERT INTO events (kind, tenant) VALUES ('dead_letter', 'acme')")
        assert c.execute("SELECT count(*) FROM events WHERE webhooks_pending").fetchone() == (1,)
        errors = sorted(r[0] for r in c.execute("SELECT last_error FROM webhook_deliveries"))
    assert errors == ["delivery failed", "delivery failed",
                      "the event is no longer in the log (retention): nothing to send"]
