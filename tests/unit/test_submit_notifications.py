"""A submit group's coalesced notification: payloads stay under NOTIFY's limit, carry each job's
partition, id and run_at, and reach the partition owner's `on_oneoffs` with no lookup per job."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta

from cronwheel.clock import FakeClock
from cronwheel.cluster.notifications import ChangeListener
from cronwheel.storage.notifications import (
    DUE_CHANNEL,
    QUEUED_CHANNEL,
    Notification,
    oneoff_batch_payloads,
    parse_oneoff_batch,
    parse_queued_at,
    queued_at_payload,
)

from .test_change_listener import Script

T = datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)


def entries(n: int) -> list[tuple[int, uuid.UUID, datetime]]:
    return [(i % 64, uuid.uuid4(), T + timedelta(seconds=i)) for i in range(n)]


def test_payloads_round_trip_and_stay_under_the_notify_limit() -> None:
    due = entries(1000)
    payloads = oneoff_batch_payloads(due)
    assert len(payloads) > 1 and all(len(p.encode()) < 8000 for p in payloads)
    got = [e for p in payloads for e in parse_oneoff_batch(p) or []]
    assert got == [(p, i, ts.timestamp()) for p, i, ts in due]


def test_a_malformed_batch_is_refused() -> None:
    assert parse_oneoff_batch("n:1,not-a-uuid,3") is None
    assert parse_oneoff_batch("3:o:" + str(uuid.uuid4())) is None


async def test_a_batch_goes_to_on_oneoffs_and_not_to_one_reload_per_job() -> None:
    due = entries(5)
    script = Script([Notification(DUE_CHANNEL, p) for p in oneoff_batch_payloads(due)])
    changes: list[object] = []
    batches: list[list[tuple[int, uuid.UUID, float]]] = []

    async def on_change(p: int, kind: str, ident: uuid.UUID) -> None:
        changes.append((p, kind, ident))

    async def on_oneoffs(got: list[tuple[int, uuid.UUID, float]]) -> None:
        batches.append(got)

    async def on_resync() -> None:
        return None

    listener = ChangeListener("dsn", on_change, on_resync, clock=FakeClock(), listener=script,
                              on_oneoffs=on_oneoffs)
    task = asyncio.create_task(listener.run())
    try:
        await script.idle.wait()
        assert changes == []
        assert batches == [[(p, i, ts.timestamp()) for p, i, ts in due]]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_queued_payload_says_when_its_runs_are_claimable() -> None:
    """Runs queued ahead of their run_at are announced with it ('at:'); any other payload is now."""
    at = T.timestamp()
    assert parse_queued_at(queued_at_payload(at)) == at
    assert parse_queued_at("fired") is None and parse_queued_at("default") is None
    assert parse_queued_at("at:soon") is None  # malformed: now (a wake too early costs one claim)


async def test_the_queued_channel_hands_its_payload_to_on_queued() -> None:
    script = Script([Notification(QUEUED_CHANNEL, queued_at_payload(T.timestamp())),
                     Notification(QUEUED_CHANNEL, "fired")])
    got: list[float | None] = []

    async def on_change(p: int, kind: str, ident: uuid.UUID) -> None:
        raise AssertionError("no change notification was sent")

    async def on_resync() -> None:
        return None

    listener = ChangeListener("dsn", on_change, on_resync, lambda payload: got.append(parse_queued_at(payload)),
                              clock=FakeClock(), listener=script)
    task = asyncio.create_task(listener.run())
    try:
        await script.idle.wait()
        assert got == [T.timestamp(), None]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
