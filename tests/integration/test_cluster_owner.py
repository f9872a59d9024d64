"""One database serves one cluster, and a database never migrated says so (issue 14, holes 5-6),
at the storage port."""

from __future__ import annotations

import psycopg
import pytest

from cronwheel.errors import FailedPrecondition, Unavailable
from cronwheel.storage import PgStore, StoreConfig, migrate
from cronwheel.storage.errors import NotMigrated

pytestmark = pytest.mark.integration


def test_migrate_records_the_cluster_and_refuses_another_naming_both(empty_dsn: str) -> None:
    assert migrate(empty_dsn, partitions=4, cluster="blue").cluster == "blue"
    with pytest.raises(FailedPrecondition) as ei:
        migrate(empty_dsn, partitions=4, cluster="green")
    assert "'blue'" in ei.value.message and "'green'" in ei.value.message
    assert migrate(empty_dsn, partitions=4, cluster="blue").applied == ()


ETCD_A, ETCD_B = "cdf818194e3a8c32", "8e9e05c52164694d"  # etcd cluster ids, as etcdctl prints them


async def test_a_node_of_another_cluster_is_refused(store: PgStore) -> None:
    await store.partitions.claim_cluster("cronwheel", ETCD_A)  # the fixtures migrate with the default name
    with pytest.raises(FailedPrecondition, match="belongs to cluster 'cronwheel', not 'other'"):
        await store.partitions.claim_cluster("other", ETCD_A)


async def test_a_second_etcd_cluster_of_the_same_name_is_refused_naming_both_ids(store: PgStore) -> None:
    await store.partitions.claim_cluster("cronwheel", ETCD_A)
    await store.partitions.claim_cluster("cronwheel", ETCD_A)  # the same cluster again: fine
    with pytest.raises(FailedPrecondition) as ei:
        await store.partitions.claim_cluster("cronwheel", ETCD_B)
    assert ETCD_A in ei.value.message and ETCD_B in ei.value.message and "'cronwheel'" in ei.value.message


async def test_a_database_recorded_without_an_etcd_id_adopts_the_first_nodes(dsn: str, store: PgStore) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:  # as every database recorded before issue 48
        assert c.execute("SELECT count(*) FROM cluster_meta WHERE key = 'etcd_cluster_id'").fetchone() == (0,)
    await store.partitions.claim_cluster("cronwheel", ETCD_B)
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT value FROM cluster_meta WHERE key = 'etcd_cluster_id'").fetchone() == (ETCD_B,)
    with pytest.raises(FailedPrecondition, match=ETCD_B):
        await store.partitions.claim_cluster("cronwheel", ETCD_A)


async def test_a_database_migrated_before_the_name_was_recorded_is_claimed_by_its_first_node(
    dsn: str, store: PgStore
) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DELETE FROM cluster_meta WHERE key = 'cluster'")
    await store.partitions.claim_cluster("first", ETCD_A)
    await store.partitions.claim_cluster("first", ETCD_A)
    with pytest.raises(FailedPrecondition, match="'first'"):
        await store.partitions.claim_cluster("second", ETCD_A)


async def test_a_database_never_migrated_is_reported_as_not_migrated(empty_dsn: str) -> None:
    async with PgStore(StoreConfig(dsn=empty_dsn, min_connections=1, max_connections=2)) as s:
        with pytest.raises(NotMigrated) as ei:
            await s.partitions.partition_count()
        with pytest.raises(NotMigrated):
            await s.partitions.claim_cluster("cronwheel", ETCD_A)
    assert isinstance(ei.value, Unavailable) and "database is not migrated" in ei.value.message
