"""The coordinator on a FakeClock with real etcd and PostgreSQL: the trust watchdog drops every
partition the moment the local window closes, before etcd says anything (DESIGN: "A node stops
firing for p as soon as its own monotonic clock says its lease may have expired")."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, cast

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.coordination.coordinator import Coordinator
from cronwheel.cluster.coordination.etcd import Etcd
from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.devtools.localservers import LocalEtcd
from cronwheel.storage import PgStore

from .conftest import TEST_PARTITIONS

pytestmark = pytest.mark.integration

# Long enough that a loop sleeping on the real clock could not take part in this test.
CONFIG = PartitionLeaseConfig(ttl_s=60, renew_every_s=20.0, safety_margin_s=1.0, resync_every_s=1.0)


class SilentKeepalive:
    """Real etcd, except that keepalives, once `silence()` is called, never answer."""

    def __init__(self, etcd: Etcd) -> None:
        self.etcd = etcd
        self.silent = False
        self.keepalive_asked = asyncio.Event()
        self._never = asyncio.Event()

    def silence(self) -> None:
        self.silent = True

    async def keepalive(self, lease_id: int) -> int:
        if not self.silent:
            return await self.etcd.keepalive(lease_id)
        self.keepalive_asked.set()
        await self._never.wait()
        raise AssertionError("unreachable")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.etcd, name)


class Lost:
    def __init__(self) -> None:
        self.lost: list[tuple[int, int, str]] = []

    async def partition_gained(self, partition: int, epoch: int) -> None:
        return None

    async def partition_releasing(self, partition: int, epoch: int) -> None:
        return None

    def partition_lost(self, partition: int, epoch: int, reason: str) -> None:
        self.lost.append((partition, epoch, reason))


@pytest.fixture
async def etcd(etcd_server: LocalEtcd) -> AsyncIterator[SilentKeepalive]:
    real = Etcd(etcd_server.endpoints)
    try:
        yield SilentKeepalive(real)
    finally:
        await real.close()


async def test_trust_lapse_drops_every_partition_before_etcd_answers(store: PgStore, etcd: SilentKeepalive) -> None:
    clock = FakeClock()
    listener = Lost()
    config = replace(CONFIG, cluster=f"fc{uuid.uuid4().hex[:8]}")
    coord = Coordinator("n1", "127.0.0.1:1", cast(Etcd, etcd), store.partitions, TEST_PARTITIONS, clock, config,
                        listener)
    run = asyncio.create_task(coord.run())
    try:
        while len(coord.owned.epochs) < TEST_PARTITIONS:  # converged also fires before our member is seen
            coord.signals.converged.clear()
            await asyncio.wait_for(coord.signals.converged.wait(), 20)
        owned = coord.owned.snapshot()
        assert sorted(owned) == list(range(TEST_PARTITIONS))
        trusted_until = coord.trust.trusted_until

        etcd.silence()
        clock.advance(config.renew_every_s)  # the lease task's next round: a keepalive nobody answers
        await asyncio.wait_for(etcd.keepalive_asked.wait(), 5)
        clock.advance(trusted_until - clock.monotonic() - 0.01)
        assert all(coord.epoch_if_trusted(p) == e for p, e in owned.items()), "still inside the window"

        clock.advance(0.02)  # the window closes; etcd has said nothing
        assert all(coord.epoch_if_trusted(p) is None for p in owned), "untrusted at once, no task needed"
        await asyncio.wait_for(coord.signals.partition_lost.wait(), 5)
        assert sorted((p, e) for p, e, _ in listener.lost) == sorted(owned.items())
        assert {r for _, _, r in listener.lost} == {"lease trust window closed"}
        assert coord.owned.epochs == {}
        assert not run.done(), "the keepalive is still unanswered"
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
