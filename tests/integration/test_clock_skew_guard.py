"""A node whose clock is off PostgreSQL's beyond --max-clock-skew stands down (issue 47, item 6).

Any node's clock decides when a queued-ahead run may start (the claim's `run_at <= now`), so a
node running ahead would start such a run early by its skew. The node measures its clock against
PostgreSQL's; beyond the bound it releases its partitions (its member key goes) and claims
nothing, and it takes them back once its clock is within the bound again. Real PostgreSQL and
etcd; the node runs in-process on a clock whose wall time the test shifts, as chaos/skewed.py
shifts a process's. Fails without the guard (the node keeps its partitions and claims the run
queued ahead 2 s before its run_at).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta

import pytest

from cronwheel.clock import SystemClock
from cronwheel.cluster.coordination.clock_skew import ClockSkewConfig
from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.cluster.node import Node, NodeConfig
from cronwheel.devtools.localservers import LocalEtcd
from cronwheel.storage import PgStore
from tests.e2e.helpers import wait_until_async

pytestmark = pytest.mark.integration


class ShiftedClock(SystemClock):
    """The real clocks, wall time shifted by `skew_s` (monotonic time untouched, as NTP leaves it)."""

    def __init__(self) -> None:
        self.skew_s = 0.0

    def now(self) -> datetime:
        return super().now() + timedelta(seconds=self.skew_s)

    def now_ts(self) -> float:
        return super().now_ts() + self.skew_s

    def now_ms(self) -> int:
        return super().now_ms() + int(self.skew_s * 1000)

    async def sleep_until_ts(self, deadline_ts: float) -> None:
        await super().sleep_until_ts(deadline_ts - self.skew_s)


async def test_a_node_beyond_the_skew_bound_releases_its_partitions_and_claims_nothing_until_it_is_back(
    dsn: str, etcd_server: LocalEtcd, store: PgStore
) -> None:
    clock = ShiftedClock()
    config = NodeConfig(node_id=f"n-skew-{uuid.uuid4().hex[:6]}", dsn=dsn, etcd_endpoints=tuple(etcd_server.endpoints),
                        lease=PartitionLeaseConfig(cluster="cronwheel"), metrics_listen="",
                        clock_skew=ClockSkewConfig(max_skew_s=2.0, check_every_s=0.1, recover_samples=3))
    node = Node(config, clock=clock)
    run = asyncio.create_task(node.run(), name="node-skew")

    async def owns(n: int) -> bool:
        return hasattr(node, "coordinator") and len(node.coordinator.owned.epochs) == n

    def exceeded() -> float:
        return float(node.metrics.clock_skew_exceeded._value.get())

    try:
        partitions = await store.partitions.partition_count()
        await wait_until_async(lambda: owns(partitions), 30, "the node to own every partition")
        assert exceeded() == 0
        async with store.connection() as conn:  # a run queued ahead: due 3 s from now, PostgreSQL's time
            await conn.execute(
                "INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
                " VALUES (%s, 't1', 'noop', 0, now() + interval '3 s', now() + interval '3 s', 'queued', 'submit')",
                (uuid.uuid4(),))
        clock.skew_s = 5.0  # the node's clock jumps 5 s ahead: the run looks 2 s overdue to it
        await wait_until_async(lambda: owns(0), 10, "the skewed node to release every partition")
        assert exceeded() == 1
        assert float(node.metrics.clock_skew._value.get()) == pytest.approx(5.0, abs=0.25)
        kvs, _ = await node.etcd.get_prefix("/cronwheel/")
        held = [kv.key for kv in kvs if kv.value.decode(errors="replace") == config.node_id
                or kv.key.endswith(f"/members/{config.node_id}")]
        assert held == [], f"the skewed node still holds {held}"
        assert await node.dispatcher.lease("w1", [], 10, 30.0, 0.0) == [], "a skewed node claimed a run early"
        clock.skew_s = 0.0
        await wait_until_async(lambda: owns(partitions), 30, "the node to take its partitions back")
        assert exceeded() == 0 and node.dispatcher.claims_held is None
        async with store.connection() as conn:
            rows = await (await conn.execute("SELECT state, attempt FROM executions WHERE tenant = 't1'")).fetchall()
        assert [tuple(r) for r in rows] == [("queued", 0)], "the run queued ahead was left for its run_at"
    finally:
        node.request_stop()
        await asyncio.wait_for(run, 30)
