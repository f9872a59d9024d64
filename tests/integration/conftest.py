"""Real PostgreSQL and etcd for integration tests: started once per session by the project
itself (cronwheel.devtools.localservers), one fresh database per test cloned from a migrated template."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest

from cronwheel.devtools.localservers import LocalEtcd, LocalPostgres
from cronwheel.storage import PgStore, StoreConfig, migrate
from tests.conftest import require_pg15

TEST_PARTITIONS = 8
_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalPostgres]:
    with LocalPostgres() as pg:
        yield pg


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[LocalEtcd]:
    with LocalEtcd() as etcd:
        yield etcd


@pytest.fixture(scope="session")
def template_db(pg_server: LocalPostgres) -> str:
    dsn = pg_server.create_database("cw_template")
    migrate(dsn, partitions=TEST_PARTITIONS)
    return "cw_template"


@pytest.fixture(scope="session")
def pg15_server() -> Iterator[LocalPostgres]:
    # The second server: tests/conftest.py PG15_BIN
    with LocalPostgres(bin_dir=require_pg15()) as pg:
        pg.create_database("cw_template")
        migrate(pg.dsn("cw_template"), partitions=TEST_PARTITIONS)
        yield pg


@pytest.fixture(params=["default", "postgres15"])
def plan_dsn(request: pytest.FixtureRequest, pg_server: LocalPostgres, template_db: str) -> str:
    """A fresh, migrated database on the tests' PostgreSQL, then on PostgreSQL 15 (pg15_server): for
    a module whose tests are about plans, override `dsn` with it."""
    pg = pg_server if request.param == "default" else request.getfixturevalue("pg15_server")
    return pg.create_database(f"cw_test_{next(_counter)}", template="cw_template")


@pytest.fixture
def dsn(pg_server: LocalPostgres, template_db: str) -> str:
    """A fresh, migrated database for this test alone."""
    return pg_server.create_database(f"cw_test_{next(_counter)}", template=template_db)


@pytest.fixture
def empty_dsn(pg_server: LocalPostgres) -> str:
    """A fresh database with nothing in it."""
    return pg_server.create_database(f"cw_empty_{next(_counter)}")


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PgStore]:
    s = PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=8))
    await s.open()
    try:
        yield s
    finally:
        await s.close()
