"""A pause that answers before a tick's run_at takes the tick back, however the fire is queued.

An overlap-`allow` tick is queued FiringConfig.queue_ahead_s (1 s) before its run_at. A
PauseSchedule that commits in that last second must leave no run of the tick, even when the
owner's fire statement for a herd of schedules due at the same instant is in flight as the pause
commits (issue 47, item 3: before the fire statement and the pause serialised on the schedule
row, 7-8 of 28 such ticks ran after their pause had answered). Black box: real PostgreSQL, etcd
and node processes, driven through the Client; the herd is the load that keeps the fire
statement in flight for the last second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from chaos.harness import ProcessCluster
from cronwheel.client import Client

from .helpers import cursors_past, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HERD = 2000  # schedules due at T besides the paused ones: their fire is in flight in T's last second
PAUSED = 28
CRON = "*/20 * * * * *"  # every 20 s: T is the next boundary once the herd exists


@pytest.fixture
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        for n in ("n1", "n2"):
            c.start_node(n)
        c.wait_converged(["n1", "n2"])
        yield c


def _create(cw: Client, names: list[str]) -> list[str]:
    return [cw.create_schedule(name=n, cron=CRON, job_type="herd", timezone="UTC", misfire_policy="skip",
                               overlap_policy="allow", tenant="t").id for n in names]


def _create_many(cluster: ProcessCluster, names: list[str]) -> list[str]:
    with Client(cluster.addresses()) as cw, ThreadPoolExecutor(8) as pool:
        chunks = [names[i::8] for i in range(8)]
        return [sid for ids in pool.map(lambda ch: _create(cw, ch), chunks) for sid in ids]


def test_a_pause_answered_before_a_queued_ahead_tick_is_due_leaves_no_run_of_it(cluster: ProcessCluster) -> None:
    herd = _create_many(cluster, [f"herd-{i}" for i in range(HERD)])
    paused = _create_many(cluster, [f"paused-{i}" for i in range(PAUSED)])
    now = datetime.now(UTC)
    t = datetime.fromtimestamp((int(now.timestamp()) // 20 + 1) * 20, UTC)
    if t - now < timedelta(seconds=4):  # time to line the pauses up before T's last second
        t += timedelta(seconds=20)
    [(due,)] = cluster.sql("SELECT count(*) FROM schedule_due WHERE schedule_id = ANY(%s) AND next_run_at = %s",
                           [*herd, *paused], t)
    assert due == HERD + PAUSED, f"only {due} schedules due at {t}"
    # Pauses sent from just before T's last second into it, while the owners' fire of the herd (from
    # T - 1 s, a few hundred ms for 2,000 ticks here) is in flight.
    sends = [t - timedelta(seconds=1.05 - 0.4 * i / PAUSED) for i in range(PAUSED)]
    answered: dict[str, datetime] = {}
    lock = threading.Lock()

    def pause(sid: str, at: datetime) -> None:
        with Client(cluster.addresses()) as cw:
            cw.get_schedule(sid)  # channel open before the send instant
            time.sleep(max((at - datetime.now(UTC)).total_seconds(), 0.0))  # the workload's send instant
            cw.pause(sid, reason="last second")
            with lock:
                answered[sid] = datetime.now(UTC)

    with ThreadPoolExecutor(PAUSED) as pool:
        list(pool.map(pause, paused, sends))
    wait_until(lambda: cursors_past(cluster, herd, t), 60, "the herd's tick T to have fired")
    early = {sid: a for sid, a in answered.items() if a < t}
    assert len(early) >= PAUSED // 2, f"only {len(early)} of {PAUSED} pauses answered before T (machine too slow)"
    rows = cluster.sql("SELECT schedule_id::text, state, started_at FROM executions"
                       " WHERE schedule_id = ANY(%s) AND scheduled_for = %s", list(early), t)
    [(herd_rows,)] = cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = ANY(%s) AND scheduled_for = %s",
                                 herd, t)
    assert herd_rows == HERD, "the herd's tick T fired for every herd schedule"
    assert rows == [], (f"{len(rows)} of {len(early)} ticks paused before T were left to run: "
                        + ", ".join(f"{sid} {st} (pause answered {(t - early[sid]).total_seconds():.3f}s before T)"
                                    for sid, st, _ in rows))
