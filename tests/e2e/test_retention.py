"""Retention on a real cluster (node processes, PostgreSQL, etcd): a schedule with keep_last=3
keeps exactly its last 3 finished runs; a pruned tick never fires again, across a node restart
and a partition move (a database trigger records every execution ever inserted, so a re-fired
tick could not hide behind being pruned again); explain says "pruned by retention".

The schedule fires every second under overlap FORBID with no worker: its first run stays
queued, so every later tick is recorded as a finished SKIPPED run for the pruner to work on.
Age windows driven by a controlled clock are shown in tests/integration/test_retention.py (the
same Pruner on a FakeClock).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from cronwheel.client import Client
from cronwheel.client.errors import InvalidArgument
from cronwheel.devtools.harness import ProcessCluster

from .helpers import observe_for, run_cli, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = 4
NODE_ARGS = ("--misfire-grace", "30", "--retention-pause", "0.01", "--retention-idle", "0.2")
AUDIT = """
CREATE TABLE test_inserted (schedule_id uuid, scheduled_for timestamptz, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION test_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO test_inserted (schedule_id, scheduled_for) VALUES (NEW.schedule_id, NEW.scheduled_for);
RETURN NEW; END $$;
CREATE TRIGGER test_audit AFTER INSERT ON executions FOR EACH ROW EXECUTE FUNCTION test_audit();
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=P, lease_ttl_s=3, workdir=tmp_path / "cluster") as c:
        with psycopg.connect(c.dsn, autocommit=True) as conn:
            conn.execute(AUDIT)
        c.start_node("n1", *NODE_ARGS)
        c.wait_converged(["n1"])
        yield c


def address(c: ProcessCluster) -> str:
    return next(n.address for n in c.nodes.values() if n.alive() and n.address)


def finished(c: ProcessCluster, sid: str) -> list[datetime]:
    return [r[0] for r in c.sql("SELECT scheduled_for FROM executions WHERE schedule_id = %s AND state IN "
                                "('succeeded','failed','dead','cancelled','skipped') ORDER BY 1", sid)]


def pruned(c: ProcessCluster, sid: str) -> int:
    rows = c.sql("SELECT pruned FROM execution_pruned WHERE schedule_id = %s", sid)
    return int(rows[0][0]) if rows else 0


def last_fired(c: ProcessCluster, sid: str) -> datetime | None:
    [(t,)] = c.sql("SELECT last_scheduled_for FROM schedule_due WHERE schedule_id = %s", sid)
    return t  # type: ignore[no-any-return]


def fires_more(c: ProcessCluster, sid: str, ticks: int, what: str) -> None:
    start = last_fired(c, sid)
    assert start is not None
    wait_until(lambda: (lambda t: t is not None and t >= start + timedelta(seconds=ticks))(last_fired(c, sid)),
               ticks + 30, what, interval_s=0.1)


def test_retention_field_validation_names_the_field(cluster: ProcessCluster) -> None:
    with Client([address(cluster)]) as client:
        for kw, field in [({"keep_last": -1}, "keep_last"), ({"keep_succeeded_for": timedelta(seconds=5)},
                                                              "keep_succeeded_for"),
                          ({"keep_failed_for": timedelta(days=4000)}, "keep_failed_for")]:
            with pytest.raises(InvalidArgument) as err:
                client.create_schedule("bad", "* * * * *", "x", timezone="UTC", misfire_policy="skip", **kw)
            assert err.value.field == f"schedule.{field}", err.value
        s = client.create_schedule("good", "* * * * *", "x", timezone="UTC", misfire_policy="skip", keep_last=0,
                                   keep_succeeded_for=timedelta(hours=2))
        assert (s.keep_last, s.keep_succeeded_for, s.keep_failed_for) == (0, timedelta(hours=2), None)
        s = client.update_schedule(s.id, keep_last=7, keep_succeeded_for=None, keep_failed_for=timedelta(days=3))
        assert (s.keep_last, s.keep_succeeded_for, s.keep_failed_for) == (7, None, timedelta(days=3))
        with pytest.raises(InvalidArgument) as err:
            client.update_schedule(s.id, keep_last=100_001)
        assert err.value.field == "schedule.keep_last"
    assert cluster.sql("SELECT count(*) FROM schedules")[0][0] == 1  # nothing stored for the refused ones


def test_keep_last_prunes_and_a_pruned_tick_never_fires_again_across_restart_and_move(
        cluster: ProcessCluster) -> None:
    c = cluster
    t_created = datetime.now(UTC)
    with Client([address(c)]) as client:
        s = client.create_schedule("every-second", "* * * * * *", "nobody-runs-this", timezone="UTC",
                                   misfire_policy="catch_up", max_catch_up=100, overlap_policy="forbid", keep_last=3)
    sid = s.id
    wait_until(lambda: pruned(c, sid) >= 5, 60, "the pruner to prune 5 runs beyond keep_last")
    # A restart of the owner: it reloads the schedule from its due cursor.
    c.stop_node("n1")
    c.start_node("n1", *NODE_ARGS)
    fires_more(c, sid, 3, "3 more ticks after the restart")
    # A partition move: n2 joins (rendezvous moves some partitions), then n1 leaves (all move).
    c.start_node("n2", *NODE_ARGS)
    c.wait_converged(["n1", "n2"])
    c.stop_node("n1")
    c.wait_owned_without("n1")
    fires_more(c, sid, 3, "3 more ticks on the new owner")
    # Quiesce: paused, the pruner's next passes leave exactly the newest 3 finished runs.
    with Client([address(c)]) as client:
        client.pause(sid)
    fired = [r[0] for r in c.sql("SELECT scheduled_for FROM test_inserted WHERE schedule_id = %s "
                                 "ORDER BY scheduled_for", sid)]
    wait_until(lambda: len(finished(c, sid)) == 3, 10, "exactly 3 finished runs kept")
    observe_for(1.0, lambda: len(finished(c, sid)) == 3 or pytest.fail("keep_last=3 did not stay at 3"))
    kept = finished(c, sid)
    assert kept == sorted(fired)[-3:], "the 3 kept are the newest finished ticks"
    # Every tick was inserted once, however many runs were pruned and nodes came and went.
    assert len(fired) == len(set(fired)), "a pruned tick fired again"
    assert pruned(c, sid) == len(fired) - 4  # all but the queued first run and the 3 kept
    assert pruned(c, sid) >= 10
    # explain: the pruned ticks say so; the kept ones and the first (queued) say what happened.
    r = run_cli("explain", sid, "--since", t_created.isoformat(), "--until", (kept[-1] + timedelta(seconds=1))
                .isoformat(), "--address", address(c), "--json")
    assert r.returncode == 0, r.stderr
    got = {datetime.fromisoformat(t["scheduled_for"].replace("Z", "+00:00")):
           (t["outcome"], t["reason"]) for t in json.loads(r.stdout)["ticks"]}  # --json prints the word
    first = fired[0]
    prunedticks = [t for t in fired if t != first and t not in kept]
    assert {got[t][0] for t in prunedticks} == {"pruned_by_retention"}, {t: got[t] for t in prunedticks}
    assert "pruned by retention" in got[prunedticks[0]][1]
    assert {got[t][0] for t in kept} == {"skipped_overlap"}
    assert got[first][0] == "fired"

