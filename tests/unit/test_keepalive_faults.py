"""The coordinator's test-only keepalive fault hook (cluster/coordination/faults.py), on a FakeClock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cronwheel.clock import FakeClock
from cronwheel.cluster.coordination.faults import KEEPALIVE_FAULTS_ENV, KeepaliveFaults


def test_the_hook_is_off_without_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEEPALIVE_FAULTS_ENV, raising=False)
    faults = KeepaliveFaults.from_env()
    assert faults.path is None and faults.take() is None


def test_each_fault_is_taken_once_and_the_file_goes_when_none_is_left(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    path.write_text(json.dumps({"count": 2, "after_lapse_s": 0.4}))
    faults = KeepaliveFaults(path)
    assert faults.take() == 0.4
    assert faults.take() == 0.4
    assert not path.exists() and faults.take() is None


async def test_a_delayed_reply_lands_after_the_lapse_holding_the_watchdog_but_inside_the_new_window(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    path = tmp_path / "faults.json"
    path.write_text(json.dumps({"count": 1, "after_lapse_s": 0.5}))
    faults = KeepaliveFaults(path)
    lapse_at = clock.monotonic() + 1.4
    reply = asyncio.create_task(faults.delay_reply(clock, lapse_at, renewed_until=clock.monotonic() + 2.4))
    await asyncio.sleep(0)
    assert faults.holding
    clock.advance(1.89)
    await asyncio.sleep(0)
    assert not reply.done(), "0.49 s after the lapse: still held"
    clock.advance(0.02)
    await asyncio.wait_for(reply, 1)
    assert not faults.holding


async def test_a_delay_never_reaches_past_the_window_the_reply_opens(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "faults.json"
    path.write_text(json.dumps({"count": 1, "after_lapse_s": 5.0}))
    faults = KeepaliveFaults(path)
    start = clock.monotonic()
    reply = asyncio.create_task(faults.delay_reply(clock, start + 1.0, renewed_until=start + 2.0))
    await asyncio.sleep(0)
    clock.advance(1.96)
    await asyncio.wait_for(reply, 1)
