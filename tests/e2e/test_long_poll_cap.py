"""Issue 48 item 7, against a real node process with an auth file: a tenant sending 5,000 waiting
LeaseExecutions calls at once, over 10 connections as bench.long_polls' flood does, gets
MAX_POLLS_PER_TENANT of them held and every other one refused by the node with
RESOURCE_EXHAUSTED naming the cap. Before, about half of the refusals came back CANCELLED: gRPC
itself ended the calls its queue held past its defaults (1,000 to 3,000 waiting to be taken by
the node's event loop), before the node saw them (limits.MAX_PENDING_CALLS)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.limits import MAX_POLLS_PER_TENANT
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

from .api_cluster import TOKENS, api_cluster

pytestmark = [pytest.mark.e2e]

POLLS = 5000
CHANNELS = 10


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as got:
        yield got


async def _flood(address: str) -> tuple[Counter[str], set[str], int]:
    """Send POLLS waiting calls at once; once the refused ones came back and a call sent after
    them on each connection was answered (the node took every call before it), the codes of the
    calls that ended, their messages, and how many calls are still held."""
    meta = (("authorization", f"Bearer {TOKENS['acme'][0]}"),)
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(CHANNELS)]
    stubs = [dispatch_pb2_grpc.DispatchServiceStub(ch) for ch in channels]
    codes: Counter[str] = Counter()
    messages: set[str] = set()

    async def poll(i: int) -> None:
        req = dispatch_pb2.LeaseExecutionsRequest(worker_id=f"flood-{i}", job_types=["cap.flood"], max_count=1,
                                                  wait_timeout=Duration(seconds=50))
        try:
            await stubs[i % CHANNELS].LeaseExecutions(req, metadata=meta, timeout=55)
            codes["OK"] += 1
        except grpc.aio.AioRpcError as exc:
            codes[exc.code().name] += 1
            messages.add((exc.details() or "").split(":")[0])

    try:
        calls = [asyncio.create_task(poll(i)) for i in range(POLLS)]
        ended = asyncio.as_completed(calls)
        for _ in range(POLLS - MAX_POLLS_PER_TENANT):  # the refusals, at once (nothing is queued)
            await asyncio.wait_for(next(ended), 60)
        probe = dispatch_pb2.LeaseExecutionsRequest(worker_id="flood-probe", job_types=["cap.flood"], max_count=1)
        await asyncio.gather(*(s.LeaseExecutions(probe, metadata=meta, timeout=30) for s in stubs))
        held = sum(1 for c in calls if not c.done())
        for c in calls:
            c.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        return codes, messages, held
    finally:
        for ch in channels:
            await ch.close()


def test_a_tenant_sending_5000_long_polls_at_once_gets_its_cap_held_and_every_other_refused_with_resource_exhausted(
        cluster: tuple[ProcessCluster, str]) -> None:
    _, address = cluster
    codes, messages, held = asyncio.run(_flood(address))
    assert codes == {"RESOURCE_EXHAUSTED": POLLS - MAX_POLLS_PER_TENANT}, codes
    assert messages == {"max_polls_per_tenant"}, messages
    assert held == MAX_POLLS_PER_TENANT
