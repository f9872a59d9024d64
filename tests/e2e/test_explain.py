""""Why did or didn't it fire?" end to end: real nodes, a real worker, the real CLI.

Each outcome is produced on purpose by what a user or a failure does (pause, a long run under
`forbid`, the owner killed past its lease, the whole cluster down beyond max_catch_up, a backfill
over a DST day, a delete, a lost row), then read back with `cronwheel explain --json`, which must
list every tick the cron module defines for the window, each exactly once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.client import Schedule
from cronwheel.cluster.firing.firer import FiringConfig
from cronwheel.cron import parse_dst_policy, parse_schedule
from cronwheel.devtools.harness import ProcessCluster, create_schedules

from .helpers import cursors_past, observe_for, run_cli, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = 4
# The lease is renewed every TTL/3, so a killed owner's partition is taken over 2/3 TTL..TTL after
# the kill. "kill" is overlap-allow: its owner queued its ticks up to queue_ahead_s (1 s) past the
# kill, and the new owner still fires one up to --misfire-grace (1 s) late. The ticks it skips lie
# between, a window that holds a whole second for sure only if 2/3 TTL > 1 s + 1 s + 1 s: at TTL 3
# it could hold none (a flake in CI, stop 43).
TTL = 5
# A year of retention, so explain may look back at the spring-forward day of 2026.
NODE_ARGS = ("--misfire-grace", "1", "--retention-days", "400")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=P, lease_ttl_s=TTL, workdir=tmp_path / "cluster") as c:
        for n in ("n1", "n2"):
            c.start_node(n, *NODE_ARGS)
        c.wait_converged(["n1", "n2"])
        yield c


def cli(c: ProcessCluster, *args: str) -> Any:
    addr = next(n.address for n in c.nodes.values() if n.alive() and n.address)
    r = run_cli(*args, "--address", addr, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip().startswith(("{", "[")) else r.stdout


def explain(c: ProcessCluster, sid: str, since: datetime, until: datetime) -> list[dict[str, Any]]:
    out = cli(c, "explain", str(sid), "--since", since.isoformat(), "--until", until.isoformat())
    return list(out["ticks"])


def outcome_of(lines: list[dict[str, Any]]) -> dict[datetime, tuple[str, str]]:
    got: dict[datetime, tuple[str, str]] = {}
    for ln in lines:
        t = datetime.fromisoformat(ln["scheduled_for"].replace("Z", "+00:00"))
        assert t not in got, f"tick {t} listed twice"
        got[t] = (ln["outcome"].upper(), ln["reason"])  # --json prints the word: "skipped_misfire"
    return got


def defined_ticks(row: Schedule, since: datetime, until: datetime, permissive: bool = False) -> set[datetime]:
    pol = parse_dst_policy({"gap": "shift", "repeated": "both"} if permissive else
                           {"gap": row.dst_policy.gap, "repeated": row.dst_policy.repeated_hour})
    cron = parse_schedule(row.cron, row.timezone, dst_policy=pol, schedule_id=row.id)
    return set(cron.ticks_between(since - timedelta(microseconds=1), until - timedelta(microseconds=1)))


def sec(name: str, **kw: Any) -> dict[str, Any]:
    return dict(tenant="t", name=name, cron="* * * * * *", timezone="UTC", job_type=kw.pop("job_type", "x"),
                misfire_policy=kw.pop("misfire_policy", "skip"), id=str(uuid.uuid4()), **kw)


def fire_until(c: ProcessCluster, rows: list[Schedule], t: datetime, what: str) -> None:
    """Until every schedule in `rows` had its ticks up to `t` fired (its cursor is past `t`)."""
    left = (t - datetime.now(UTC)).total_seconds()
    wait_until(lambda: cursors_past(c, [r.id for r in rows], t), max(left, 0) + 30, what, interval_s=0.1)


def test_explain_names_every_outcome_produced_on_purpose(cluster: ProcessCluster, tmp_path: Path) -> None:
    c = cluster
    c.start_worker("w1", "tests.e2e.jobs_module", env={"CRONWHEEL_TEST_LOG": str(tmp_path / "h.jsonl")})
    t_created = datetime.now(UTC)
    rows = {r.name: r for r in create_schedules(c, [
        sec("pause"), sec("overlap", overlap_policy="forbid", job_type="long", payload={"steps": 30, "step_s": 0.1}),
        sec("kill"), sec("bounded", misfire_policy="catch_up", max_catch_up=2),
        dict(tenant="t", name="dst-spring", cron="30 2 * * *", timezone="America/New_York",
             job_type="x", misfire_policy="skip", id=str(uuid.uuid4())),
        dict(tenant="t", name="dst-autumn", cron="30 1 * * *", timezone="America/New_York",
             job_type="x", misfire_policy="skip", id=str(uuid.uuid4())),
    ])}
    sid = {k: v.id for k, v in rows.items()}
    plain = [rows[k] for k in ("pause", "kill", "bounded")]
    fire_until(c, plain, datetime.now(UTC) + timedelta(seconds=1), "the first ticks to fire")
    # PAUSED: paused for 3 s by a user, while the cluster fires its other schedules.
    cli(c, "schedule", "pause", sid["pause"], "--reason", "maintenance")
    paused_at = datetime.now(UTC)
    fire_until(c, [rows["kill"]], paused_at + timedelta(seconds=3), "3 s of ticks to come due while paused")
    cli(c, "schedule", "resume", sid["pause"])
    resumed_at = datetime.now(UTC)
    # Owner of "kill" killed past its lease: the ticks it would have fired get its misfire policy.
    p_kill = rows["kill"].partition
    owners = c.owners()
    victim = owners[p_kill][0]
    victims = {p for p, (o, _) in owners.items() if o == victim}
    killed_at = datetime.now(UTC)
    c.kill_node(victim)
    c.wait_owned_without(victim, timeout=TTL + 5)
    c.start_node(victim, *NODE_ARGS)
    c.wait_converged(["n1", "n2"])
    # The whole cluster down for longer than max_catch_up ticks of "bounded".
    down_at = datetime.now(UTC)
    for n in ("n1", "n2"):
        c.stop_node(n)
    rows_when_down = c.sql("SELECT count(*) FROM executions")

    def nothing_fires() -> None:
        assert c.sql("SELECT count(*) FROM executions") == rows_when_down, "a row was written with every node down"

    observe_for(5, nothing_fires, interval_s=0.5)  # the outage's own length: 5 ticks of "bounded" come due
    for n in ("n1", "n2"):
        c.start_node(n, *NODE_ARGS)
    c.wait_converged(["n1", "n2"])
    owned_again = datetime.now(UTC)
    # A lost write (a row gone without a trace): MISSED, with nothing to explain it.
    # (a tick whose owner provably went on firing after it, so no ownership change explains it)

    def a_tick_to_lose() -> datetime | None:
        found = c.sql("SELECT e.scheduled_for FROM executions e WHERE e.schedule_id = %s AND e.state <> 'skipped'"
                      " AND e.scheduled_for > %s AND EXISTS (SELECT 1 FROM executions l WHERE l.schedule_id ="
                      " e.schedule_id AND l.fired_epoch = e.fired_epoch AND l.scheduled_for > e.scheduled_for)"
                      " ORDER BY e.scheduled_for LIMIT 1", rows["pause"].id, owned_again)
        return found[0][0] if found else None

    lost = wait_until(a_tick_to_lose, 30, "a tick of 'pause' fired after the restart, with a later one in its epoch")
    c.sql("DELETE FROM executions WHERE schedule_id = %s AND scheduled_for = %s RETURNING 1", rows["pause"].id, lost)
    # DST: backfill the spring and autumn days of 2026 in New York.
    for name, start, end in (("dst-spring", "2026-03-07", "2026-03-10"), ("dst-autumn", "2026-10-31", "2026-11-03")):
        cli(c, "schedule", "backfill", sid[name], "--start", f"{start}T00:00:00Z", "--end", f"{end}T00:00:00Z")
    fire_until(c, [rows["pause"]], datetime.now(UTC) + timedelta(seconds=1), "'pause' to fire on until deleted")
    cli(c, "schedule", "delete", sid["pause"])
    deleted_at = datetime.now(UTC)
    fire_until(c, [rows["kill"]], deleted_at + timedelta(seconds=2), "ticks to come due after the delete")
    now = datetime.now(UTC)
    since, until = t_created - timedelta(seconds=5), now + timedelta(seconds=5)

    def check(name: str) -> dict[datetime, tuple[str, str]]:
        lines = explain(c, rows[name].id, since, until)
        got = outcome_of(lines)
        assert set(got) >= defined_ticks(rows[name], since, until), f"{name}: a tick is absent from explain"
        return got

    got = check("pause")
    kinds = {o for o, _ in got.values()}
    assert {"NOT_YET_CREATED", "FIRED", "PAUSED", "MISSED", "DELETED"} <= kinds, kinds
    paused = [(t, r) for t, (o, r) in got.items() if o == "PAUSED"]
    assert paused and all(paused_at - timedelta(seconds=1) <= t <= resumed_at for t, _ in paused)
    assert all("maintenance" in r for _, r in paused)
    assert got[lost][0] == "MISSED" and "no record explains it" in got[lost][1]
    assert all(o == "DELETED" for t, (o, _) in got.items() if deleted_at < t <= now)

    got = check("overlap")
    skipped = [r for o, r in got.values() if o == "SKIPPED_OVERLAP"]
    assert skipped and all("forbid" in r for r in skipped)

    got = check("kill")
    answered = datetime.now(UTC)  # explain's own `now` was earlier than this
    # A tick not due yet is pending, unless it was queued ahead (overlap allow: queue_ahead_s before it)
    ahead = timedelta(seconds=FiringConfig().queue_ahead_s)
    assert all(o == "PENDING" for t, (o, _) in got.items() if t > answered + ahead), "future ticks are pending"
    assert all(o in ("PENDING", "FIRED") for t, (o, _) in got.items() if t > answered)
    assert any(o == "PENDING" for o, _ in got.values())
    gap = [(t, o, r) for t, (o, r) in got.items() if killed_at < t < killed_at + timedelta(seconds=TTL)]
    assert any(o == "SKIPPED_MISFIRE" and "took it over" in r for _, o, r in gap), gap

    got = check("bounded")
    refused = [t for t, (o, _) in got.items() if o == "REFUSED_CATCH_UP"]
    # Refused ticks are those missed while "bounded"'s partition had no owner: from the stop (its
    # last tick before it may still be in flight) until the partition was owned again, which is
    # after the processes started, not at it.
    # Where its partition was the victim's, the kill's gap (up to TTL ticks missed) may refuse some too.
    assert len(refused) >= 3, refused
    for t in refused:
        in_outage = down_at - timedelta(seconds=1) <= t <= owned_again
        in_kill_gap = rows["bounded"].partition in victims and killed_at <= t <= killed_at + timedelta(seconds=TTL + 1)
        assert in_outage or in_kill_gap, (t, refused)

    spring = outcome_of(explain(c, rows["dst-spring"].id, datetime(2026, 3, 7, tzinfo=UTC),
                                datetime(2026, 3, 10, tzinfo=UTC)))
    assert spring[datetime(2026, 3, 8, 7, 0, tzinfo=UTC)][0] == "DST_SHIFTED"
    assert spring[datetime(2026, 3, 7, 7, 30, tzinfo=UTC)][0] == "FIRED"
    autumn = outcome_of(explain(c, rows["dst-autumn"].id, datetime(2026, 10, 31, tzinfo=UTC),
                                datetime(2026, 11, 3, tzinfo=UTC)))
    assert autumn[datetime(2026, 11, 1, 5, 30, tzinfo=UTC)][0] == "FIRED"  # 01:30 EDT, the first
    assert autumn[datetime(2026, 11, 1, 6, 30, tzinfo=UTC)][0] == "DST_REPEATED"  # 01:30 EST: not run


def test_explain_refuses_bad_windows_and_other_tenants_schedules(cluster: ProcessCluster) -> None:
    [row] = create_schedules(cluster, [sec("s")])
    addr = cluster.nodes["n1"].address
    now = datetime.now(UTC)
    bad = run_cli("explain", row.id, "--since", now.isoformat(), "--until",
                  (now - timedelta(hours=1)).isoformat(), "--address", addr)
    assert bad.returncode == 2 and "--since/--until" in bad.stderr
    too_long = run_cli("explain", row.id, "--since", (now - timedelta(days=500)).isoformat(), "--address", addr)
    assert too_long.returncode == 2 and "retention" in too_long.stderr
    unknown = run_cli("explain", str(uuid.uuid4()), "--address", addr)
    assert unknown.returncode == 1 and "not_found" in unknown.stderr
