"""Ownership-history writes run in the coordinator's TaskGroup: PostgreSQL away skips a row,
anything else is seen (it ends the task, hence the node) instead of vanishing in a loose task."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.coordination.coordinator import Coordinator
from cronwheel.cluster.coordination.etcd import Etcd
from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.errors import Unavailable
from cronwheel.storage.partitions import PartitionsPort


class Port:
    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.written: list[tuple[int, int, str, str]] = []

    async def record_partition_change(self, partition: int, epoch: int, owner: str, kind: str) -> None:
        exc = self.outcomes.pop(0)
        if exc is not None:
            raise exc
        self.written.append((partition, epoch, owner, kind))


def coordinator(port: Port) -> Coordinator:
    return Coordinator("n1", "127.0.0.1:1", cast(Etcd, object()), cast(PartitionsPort, port), 4, FakeClock(),
                       PartitionLeaseConfig())


async def test_history_rows_are_written_in_order_and_postgres_away_skips_one() -> None:
    port = Port(None, Unavailable("postgres", "down"), None)
    c = coordinator(port)
    for row in ((1, 10, "lost"), (2, 11, "lost"), (3, 12, "released")):
        c._history.put_nowait(row)
    task = asyncio.create_task(c._history_loop())
    await asyncio.wait_for(c._history.join(), 5)
    assert port.written == [(1, 10, "n1", "lost"), (3, 12, "n1", "released")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_unexpected_history_failure_ends_the_task_instead_of_vanishing() -> None:
    c = coordinator(Port(RuntimeError("bug")))
    c._history.put_nowait((1, 10, "lost"))
    with pytest.raises(RuntimeError, match="bug"):
        await asyncio.wait_for(c._history_loop(), 5)


