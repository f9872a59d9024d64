"""A pause, edit or delete that answers before a tick's run_at applies to the tick, however the
fire is queued.

An overlap-`allow` tick is queued FiringConfig.queue_ahead_s (1 s) before its run_at. A
PauseSchedule or DeleteSchedule that commits in that last second must leave no run of the tick,
and after an UpdateSchedule the tick runs as edited, even when the owner's fire statement for a
herd of schedules due at the same instant is in flight as the change commits (issue 47, item 3:
before the fire statement and the change serialised on the schedule row, 7-8 of 28 such ticks
ran after their pause had answered, and a fire could insert the old payload). Black box: real
PostgreSQL, etcd and node processes, driven through the Client; the herd is the load that keeps
the fire statement in flight in the last second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.client import Client
from cronwheel.devtools.harness import ProcessCluster

from .helpers import cursors_past, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HERD = 2000  # schedules due at T besides the changed ones: their fire is in flight in T's last second
CHANGED = 28  # of each kind: paused, edited, deleted
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
                               overlap_policy="allow", tenant="t", payload={"v": 1}).id for n in names]


def _create_many(cluster: ProcessCluster, names: list[str]) -> list[str]:
    with Client(cluster.addresses()) as cw, ThreadPoolExecutor(8) as pool:
        chunks = [names[i::8] for i in range(8)]
        return [sid for ids in pool.map(lambda ch: _create(cw, ch), chunks) for sid in ids]


def test_a_change_answered_before_a_queued_ahead_tick_is_due_applies_to_it(cluster: ProcessCluster) -> None:
    herd = _create_many(cluster, [f"herd-{i}" for i in range(HERD)])
    kinds = {k: _create_many(cluster, [f"{k}-{i}" for i in range(CHANGED)]) for k in ("pause", "edit", "delete")}
    changed = [sid for ids in kinds.values() for sid in ids]
    now = datetime.now(UTC)
    t = datetime.fromtimestamp((int(now.timestamp()) // 20 + 1) * 20, UTC)
    if t - now < timedelta(seconds=4):  # time to line the changes up before T's last second
        t += timedelta(seconds=20)
    [(due,)] = cluster.sql("SELECT count(*) FROM schedule_due WHERE schedule_id = ANY(%s) AND next_run_at = %s",
                           [*herd, *changed], t)
    assert due == HERD + len(changed), f"only {due} schedules due at {t}"
    # Changes sent from just before T's last second into it, while the owners' fire of the herd
    # (from T - 1 s, a few hundred ms for 2,000 ticks here) is in flight; the kinds interleaved.
    order = [sid for trio in zip(*kinds.values(), strict=True) for sid in trio]
    sends = [t - timedelta(seconds=1.05 - 0.4 * i / len(order)) for i in range(len(order))]
    kind_of = {sid: k for k, ids in kinds.items() for sid in ids}
    answered: dict[str, datetime] = {}
    lock = threading.Lock()

    def change(sid: str, at: datetime) -> None:
        with Client(cluster.addresses()) as cw:
            cw.get_schedule(sid)  # channel open before the send instant
            time.sleep(max((at - datetime.now(UTC)).total_seconds(), 0.0))  # the workload's send instant
            if kind_of[sid] == "pause":
                cw.pause(sid, reason="last second")
            elif kind_of[sid] == "edit":
                cw.update_schedule(sid, payload={"v": 2})
            else:
                cw.delete(sid)
            with lock:
                answered[sid] = datetime.now(UTC)

    with ThreadPoolExecutor(len(order)) as pool:
        list(pool.map(change, order, sends))
    wait_until(lambda: cursors_past(cluster, [*herd, *kinds["edit"]], t), 60, "tick T to have fired")
    early = {sid: a for sid, a in answered.items() if a < t}
    for k, ids in kinds.items():
        n = sum(1 for sid in ids if sid in early)
        assert n >= CHANGED // 2, f"only {n} of {CHANGED} {k} calls answered before T (machine too slow)"
    [(herd_rows,)] = cluster.sql("SELECT count(*) FROM executions WHERE schedule_id = ANY(%s) AND scheduled_for = %s",
                                 herd, t)
    assert herd_rows == HERD, "the herd's tick T fired for every herd schedule"
    rows = cluster.sql("SELECT schedule_id::text, state, payload FROM executions"
                       " WHERE schedule_id = ANY(%s) AND scheduled_for = %s", list(early), t)
    wrong = [(sid, st, payload) for sid, st, payload in rows
             if kind_of[sid] != "edit" or payload != {"v": 2}]
    assert wrong == [], (f"{len(wrong)} ticks changed before T were left to run as before: "
                         + ", ".join(f"{kind_of[sid]} {sid} {st} {payload} (answered "
                                     f"{(t - early[sid]).total_seconds():.3f}s before T)"
                                     for sid, st, payload in wrong))
    edited = {sid for sid in kinds["edit"] if sid in early}
    assert {sid for sid, _, _ in rows if sid in edited} == edited, "every edited schedule's tick T ran, as edited"
