"""The tick path's holes (issue 47, items 1 and 2), from outside: real etcd, PostgreSQL, node and
worker processes, driven through the Client.

Item 1: ticks replayed or recorded by the misfire policy bypass the overlap policy (the "Misfires"
and "Overlap policies" sections of docs/semantics.md): catch_up replays every missed tick, run_once
runs only the latest, skip records them skipped, and the live ticks after an outage run.
Item 2: a jittered tick is late by its run time, not by its tick: a full load inside its jitter
window (an UpdateSchedule, an owner's SIGKILL) arms it for its run time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronwheel.client import Client, Schedule
from cronwheel.cluster.firing.firer import FiringConfig
from cronwheel.cron import jitter_offset_s
from cronwheel.devtools.harness import ProcessCluster, create_schedules

from .helpers import wait_until
from .test_dispatch import MODULE, wenv
from .test_firing import _outage, expected_ticks, fire_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = 8
GRACE_S = 1  # _outage restarts the nodes with --misfire-grace 1
EVERY_2S = "*/2 * * * * *"  # leaves a worker two seconds per run: live buffer_* ticks never queue up


@pytest.fixture
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=P, lease_ttl_s=3) as c:
        for n in ("n1", "n2"):
            c.start_node(n, "--misfire-grace", str(GRACE_S))
        c.wait_converged(["n1", "n2"])
        yield c


Row = tuple[datetime, str, str, str | None]  # scheduled_for, state, trigger, state_reason


def rows_of(cluster: ProcessCluster, s: Schedule) -> dict[datetime, Row]:
    got = [(r[0], r[1], r[2], r[3]) for r in cluster.sql(
        "SELECT scheduled_for, state, trigger, state_reason FROM executions WHERE schedule_id = %s"
        " ORDER BY scheduled_for", s.id)]
    by_tick = {r[0]: r for r in got}
    assert len(by_tick) == len(got), f"{s.name}: a tick has two rows"
    return by_tick


def spec(name: str, overlap: str, misfire: str, **kw: object) -> dict[str, object]:
    return dict(tenant="t", name=name, cron=EVERY_2S, timezone="UTC", job_type="ok", overlap_policy=overlap,
                misfire_policy=misfire, **kw)


def outage_missing_ticks(cluster: ProcessCluster, rows: list[Schedule], seconds: float,
                         worker: str | None = None) -> list[datetime]:
    """Every node (and `worker`, stopped gracefully first: it ends its runs) down for `seconds`;
    the ticks every schedule of `rows` missed (due after the last node's queue-ahead and overdue
    by more than the grace when the nodes were back)."""
    fire_until(cluster, rows, datetime.now(UTC) + timedelta(seconds=2), "ticks before the outage")
    if worker is not None:
        cluster.stop_node(worker)
    _down_at, gone_at, up_at = _outage(cluster, ["n1", "n2"], seconds)
    missed_from = gone_at + timedelta(seconds=FiringConfig().queue_ahead_s)
    fire_until(cluster, rows, up_at, "the misfire handling")
    missed = [t for t in expected_ticks(rows[0], up_at)
              if missed_from < t < up_at - timedelta(seconds=GRACE_S + 1)]
    assert len(missed) >= 3, (gone_at, up_at)
    return missed


def test_buffer_schedules_with_misfire_skip_run_their_live_ticks_after_an_outage(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    """Before the fix the skip records went through the overlap policy: one stayed skipped, the
    others became buffered runs nothing released, and no live tick ran again."""
    rows = create_schedules(cluster, [spec("all", "buffer_all", "skip"), spec("one", "buffer_one", "skip")])
    env = wenv(tmp_path / "history.jsonl")
    cluster.start_worker("w1", MODULE, env=env)
    missed = outage_missing_ticks(cluster, rows, 9, worker="w1")
    cluster.start_worker("w2", MODULE, env=env)  # the nodes listen on new addresses
    live = [t for t in expected_ticks(rows[0], datetime.now(UTC) + timedelta(seconds=60))
            if t > datetime.now(UTC) + timedelta(seconds=2)][:10]
    fire_until(cluster, rows, live[-1], "ten live ticks after the outage")

    def all_ran() -> bool:
        return all(rows_of(cluster, s).get(t, (t, "", "", None))[1] == "succeeded" for s in rows for t in live)

    wait_until(all_ran, 30, "the ten live ticks after the outage to run",
               detail=lambda: {s.name: [rows_of(cluster, s).get(t) for t in live] for s in rows})
    for s in rows:
        by_tick = rows_of(cluster, s)
        assert all(by_tick[t][1:] == ("skipped", "cron", "misfire:skip") for t in missed), (s.name, by_tick)
        assert not [r for r in by_tick.values() if r[3] == "buffered"], s.name


def test_forbid_with_catch_up_replays_every_missed_tick(cluster: ProcessCluster) -> None:
    """Before the fix 1 of the missed ticks was replayed, the others recorded `skipped` (overlap)."""
    [s] = create_schedules(cluster, [spec("forbid", "forbid", "catch_up", max_catch_up=100)])
    missed = outage_missing_ticks(cluster, [s], 9)
    fire_until(cluster, [s], datetime.now(UTC) + timedelta(seconds=3), "live ticks after the replays")
    by_tick = rows_of(cluster, s)
    assert [by_tick[t][1:3] for t in missed] == [("queued", "catch_up")] * len(missed), by_tick
    # No worker runs them: the first live tick after them meets unfinished runs, and forbid skips it.
    first_live = min(t for t, r in by_tick.items() if t > missed[-1] and r[2] == "cron")
    assert by_tick[first_live][1] == "skipped" and (by_tick[first_live][3] or "").startswith("overlap"), by_tick


@pytest.mark.parametrize("overlap", ["buffer_all", "buffer_one"])
def test_buffer_schedules_with_run_once_run_only_the_latest_missed_tick(
        cluster: ProcessCluster, overlap: str) -> None:
    """Before the fix the misfire records behind the replayed tick were buffered (and run later)."""
    [s] = create_schedules(cluster, [spec("once", overlap, "run_once")])
    missed = outage_missing_ticks(cluster, [s], 9)
    by_tick = rows_of(cluster, s)
    replayed = [r for r in by_tick.values() if r[2] == "catch_up"]
    assert len(replayed) == 1 and replayed[0][1] == "queued" and replayed[0][0] >= missed[-1], by_tick
    # Every other missed tick is a record, neither buffered nor run.
    assert all(by_tick[t][1:] == ("skipped", "cron", "misfire:run_once") for t in missed
               if t != replayed[0][0]), by_tick


def test_a_jittered_tick_survives_an_update_and_its_owners_sigkill_inside_its_jitter_window(
        cluster: ProcessCluster) -> None:
    """The tick is overdue by more than the grace while its run time is still ahead: an
    UpdateSchedule (a reload) and then its owner's SIGKILL (a full load by the next owner) must
    arm it for its run time. Before the fix each recorded it `skipped` (misfire:skip)."""
    cluster.start_node("n3", "--misfire-grace", str(GRACE_S))
    cluster.wait_converged(["n1", "n2", "n3"])
    jitter_s = 25.0

    def next_boundary() -> datetime:  # the schedule's first tick ("*/30") if created now
        now = datetime.now(UTC).replace(microsecond=0)
        return now + timedelta(seconds=30 - now.second % 30)

    tick = next_boundary()
    if tick - datetime.now(UTC) < timedelta(seconds=8):  # too close to create the schedule before it
        wait_until(lambda: datetime.now(UTC) >= tick, 10, "the boundary too close to use to pass")
        tick = next_boundary()
    sid = next(i for i in (str(uuid.uuid4()) for _ in range(10_000)) if 18 <= jitter_offset_s(i, tick, jitter_s) < 22)
    run_at = tick + timedelta(seconds=jitter_offset_s(sid, tick, jitter_s))
    [s] = create_schedules(cluster, [dict(tenant="t", name="jittered", id=sid, cron="*/30 * * * * *",
                                          timezone="UTC", job_type="ok", misfire_policy="skip",
                                          jitter=timedelta(seconds=jitter_s))])
    assert s.next_run_at == tick, (s.next_run_at, tick)
    wait_until(lambda: datetime.now(UTC) > tick + timedelta(seconds=GRACE_S + 1), 40,
               "the tick to be overdue by more than the grace")
    with Client(cluster.addresses()) as cw:
        cw.update_schedule(sid, payload={"edited": True})  # keeps the tick: the owner reloads it
    owner = cluster.owners()[s.partition][0]
    cluster.kill_node(owner)
    cluster.wait_owned_without(owner, timeout=15)
    assert datetime.now(UTC) < run_at - timedelta(seconds=2), "the take-over ended outside the jitter window"
    row = wait_until(lambda: cluster.sql(
        "SELECT state, trigger, state_reason, run_at, fired_at FROM executions WHERE schedule_id = %s"
        " AND scheduled_for = %s", sid, tick), (run_at - datetime.now(UTC)).total_seconds() + 15,
        "the jittered tick's execution")
    state, trigger, reason, got_run_at, fired_at = row[0]
    assert (state, trigger, reason) == ("queued", "cron", None), row
    assert got_run_at == run_at
    assert fired_at >= run_at - timedelta(seconds=FiringConfig().queue_ahead_s + 0.05), (fired_at, run_at)
