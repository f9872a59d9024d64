"""What a new user trips over in the CLI, fixed and shown against real node processes: schedules
named by name, errors naming the flag typed, zone suggestions, help pointers, no ambiguous
--timeout, 0 refused like 1001, `| head`, TLS and address mistakes in one line with a hint, the
flags for backoff, the dead man's switch and the event log, and --json with the flags' words."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.devtools.harness import ProcessCluster

from .helpers import CRONWHEEL, ok_json, one_line_error, run_cli, wait_until

pytestmark = [pytest.mark.e2e]
JOBS = "tests.e2e.jobs_module"


@dataclass
class Nodes:
    cluster: ProcessCluster
    dev: str
    tls: str | None
    ca: Path | None
    other_ca: Path | None


def _cert(dir: Path, name: str, cn: str) -> Path:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={cn}",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(dir / f"{name}.key"),
                    "-out", str(dir / f"{name}.pem")], check=True, capture_output=True)
    return dir / f"{name}.pem"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    d = tmp_path_factory.mktemp("certs")
    ca = other = None
    if shutil.which("openssl"):
        ca, other = _cert(d, "node", "localhost"), _cert(d, "other", "other")
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        dev = c.start_node("dev")
        tls = c.start_node("tls", "--tls-cert", str(ca), "--tls-key", str(d / "node.key")).address if ca else None
        yield Nodes(c, dev.address, tls, ca, other)


def cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--address", address, env={"CRONWHEEL_TOKEN": ""})



def create(address: str, name: str, *extra: str) -> dict[str, Any]:
    return ok_json(cli(address, "schedule", "create", "--name", name, "--cron", "0 3 * * *", "--tz", "UTC",
                       "--job-type", "report", "--misfire-policy", "run_once", "--json", *extra))  # type: ignore[no-any-return]


def test_a_schedule_is_named_by_its_name_as_well_as_its_id(nodes: Nodes) -> None:
    a = nodes.dev
    sid = create(a, "by-name")["id"]
    assert ok_json(cli(a, "schedule", "get", "by-name", "--json"))["id"] == sid
    assert ok_json(cli(a, "schedule", "pause", "by-name", "--json"))["paused"] is True
    assert ok_json(cli(a, "schedule", "resume", "by-name", "--json"))["paused"] is False
    assert ok_json(cli(a, "schedule", "update", "by-name", "--cron", "0 4 * * *", "--json"))["cron"] == "0 4 * * *"
    run = ok_json(cli(a, "schedule", "trigger", "by-name", "--json"))
    assert run["schedule_id"] == sid and run["trigger"] == "manual"
    assert ok_json(cli(a, "explain", "by-name", "--json"))["schedule_id"] == sid
    assert len(ok_json(cli(a, "schedule", "preview", "by-name", "--count", "2", "--json"))) == 2
    assert [e["id"] for e in ok_json(cli(a, "exec", "list", "--schedule", "by-name", "--json"))] == [run["id"]]
    assert ok_json(cli(a, "schedule", "delete", "by-name", "--cancel-pending", "--json")) == {
        "id": sid, "cancelled_count": 1}
    one_line_error(cli(a, "schedule", "get", "by-name"), 1, "not_found", "'by-name'")
    # One name in two tenants (a dev-mode caller is an admin): --tenant says whose.
    ids = {t: create(a, "twice", "--tenant", t)["id"] for t in ("north", "south")}
    one_line_error(cli(a, "schedule", "pause", "twice"), 2, "--tenant", "north, south")
    assert ok_json(cli(a, "schedule", "get", "twice", "--tenant", "south", "--json"))["id"] == ids["south"]


def test_api_errors_name_the_flag_the_user_typed(nodes: Nodes) -> None:
    a = nodes.dev
    sid = create(a, "flags")["id"]
    now = datetime.now(UTC)
    line = one_line_error(cli(a, "schedule", "backfill", sid, "--start", (now - timedelta(days=1)).isoformat(),
                              "--end", (now + timedelta(days=1)).isoformat()), 2, "--end: must not be in the future")
    assert "range" not in line
    one_line_error(cli(a, "schedule", "backfill", sid, "--start", now.isoformat(), "--end",
                       (now - timedelta(days=1)).isoformat()), 2, "--start/--end: --start must be before --end")
    one_line_error(cli(a, "explain", sid, "--since", now.isoformat(), "--until",
                       (now - timedelta(hours=1)).isoformat()), 2, "--since/--until")
    one_line_error(cli(a, "schedule", "update", "flags", "--cron", "0 3 * *"), 2, "--cron: ")
    one_line_error(cli(a, "schedule", "update", "flags", "--max-attempts", "1001"), 2,
                   "--max-attempts: must be 1..1000, got 1001")
    one_line_error(cli(a, "schedule", "update", "flags", "--backoff-multiplier", "0.5"), 2, "--backoff-multiplier: ")
    one_line_error(cli(a, "job", "submit", "--type", "t", "--attempt-timeout", "8d"), 2, "--attempt-timeout: ")


def test_a_bad_zone_suggests_the_closest_one(nodes: Nodes) -> None:
    for typed in ("europe/london", "Europe/Londn"):
        r = cli(nodes.dev, "schedule", "create", "--name", "zone", "--cron", "0 3 * * *", "--tz", typed,
                "--job-type", "j", "--misfire-policy", "skip")
        one_line_error(r, 2, "--timezone: ", "did you mean Europe/London?")
    one_line_error(cli(nodes.dev, "schedule", "preview", "--cron", "@daily", "--tz", "america/new_york"), 2,
                   "did you mean America/New_York?")
    assert all(s["name"] != "zone" for s in ok_json(cli(nodes.dev, "schedule", "list", "--all", "--json")))


def test_usage_errors_point_to_the_subcommands_help() -> None:
    one_line_error(run_cli("schedule", "create", "--name", "x"), 2, "required",
                   "(see `cronwheel schedule create --help`)")
    one_line_error(run_cli("exec", "list", "--state", "sleeping"), 2, "--state", "(see `cronwheel exec list --help`)")
    one_line_error(run_cli("schedule", "frobnicate"), 2, "(see `cronwheel schedule --help`)")


def test_timeout_is_refused_as_ambiguous_and_attempt_timeout_is_the_jobs_limit(nodes: Nodes) -> None:
    one_line_error(cli(nodes.dev, "job", "submit", "--type", "t", "--timeout", "5m"), 2, "--timeout",
                   "ambiguous", "--attempt-timeout", "--call-timeout")
    one_line_error(cli(nodes.dev, "schedule", "list", "--timeout", "5"), 2, "ambiguous")
    job = ok_json(cli(nodes.dev, "job", "submit", "--type", "t", "--attempt-timeout", "5m", "--json"))
    assert job["attempt_timeout"] == 300
    assert ok_json(cli(nodes.dev, "schedule", "list", "--call-timeout", "30s", "--json")) is not None


def test_zero_attempts_and_zero_catch_up_are_refused_like_1001(nodes: Nodes) -> None:
    a = nodes.dev
    base = ["schedule", "create", "--name", "zero", "--cron", "0 3 * * *", "--tz", "UTC", "--job-type", "j",
            "--misfire-policy", "catch_up"]
    for flag in ("--max-attempts", "--max-catch-up"):
        for value in ("0", "1001"):
            one_line_error(cli(a, *base, flag, value), 2, f"{flag}: must be ", "1..1000", f"got {value}")
    one_line_error(cli(a, "job", "submit", "--type", "t", "--max-attempts", "0"), 2, "--max-attempts: must be 1..1000")
    assert all(s["name"] != "zero" for s in ok_json(cli(a, "schedule", "list", "--all", "--json")))  # nothing stored
    create(a, "zero-update")
    one_line_error(cli(a, "schedule", "update", "zero-update", "--max-catch-up", "0"), 2, "--max-catch-up")
    assert ok_json(cli(a, "schedule", "get", "zero-update", "--json"))["version"] == 1


def test_output_into_head_ends_quietly(nodes: Nodes) -> None:
    # ~150 KB of JSON: more than a pipe holds, so the CLI is still writing when the reader leaves.
    with subprocess.Popen([*CRONWHEEL, "schedule", "preview", "--cron", "* * * * *", "--tz", "UTC", "--count",
                           "1000", "--json", "--address", nodes.dev], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as p:
        assert p.stdout is not None and p.stderr is not None
        assert p.stdout.readline().strip() == b"["
        p.stdout.close()  # what `head -1` does after its line
        assert p.wait(60) == 0
        assert p.stderr.read() == b""


def test_a_tls_handshake_failure_is_one_line(nodes: Nodes) -> None:
    if nodes.tls is None:
        pytest.skip("needs openssl to make certificates")
    one_line_error(cli(nodes.tls, "schedule", "list", "--tls-ca", str(nodes.other_ca)), 3, "TLS handshake failed",
                   "--tls-ca")
    one_line_error(cli(nodes.tls, "schedule", "list"), 3, "add --tls-ca")
    assert ok_json(cli(nodes.tls, "schedule", "list", "--tls-ca", str(nodes.ca), "--json")) is not None


def test_address_mistakes_get_a_hint() -> None:
    one_line_error(run_cli("status", "--address", "127.0.0.1"), 2, "--address", "no port",
                   "did you mean 127.0.0.1:7070?")
    one_line_error(run_cli("status", "--address", "http://localhost:7070/"), 2, "--address", "not a URL",
                   "did you mean localhost:7070?")
    one_line_error(run_cli("status", "--address", "127.0.0.1:1"), 3, "unavailable", "start one with `cronwheel dev`")


def test_backoff_and_dead_mans_switch_flags_with_json_numbers_and_words(nodes: Nodes) -> None:
    s = create(nodes.dev, "backoff", "--backoff-initial", "10s", "--backoff-multiplier", "2", "--backoff-max", "1h",
               "--max-attempts", "7", "--alert-if-no-success-within", "2h", "--overlap-policy", "buffer_one",
               "--priority", "bulk", "--dst-gap", "skip")
    assert s["retry_policy"] == {"initial_backoff": 10, "backoff_multiplier": 2.0, "max_backoff": 3600,
                                 "max_attempts": 7}
    assert s["alert_if_no_success_within"] == 7200 and s["version"] == 1 and isinstance(s["partition"], int)
    assert (s["misfire_policy"], s["overlap_policy"], s["priority"], s["dst_policy"]["gap"]) == (
        "run_once", "buffer_one", "bulk", "skip")
    # Updating one field of the retry policy leaves the others as they were.
    u = ok_json(cli(nodes.dev, "schedule", "update", "backoff", "--backoff-max", "2h", "--json"))
    assert u["retry_policy"] == {**s["retry_policy"], "max_backoff": 7200} and u["version"] == 2
    job = ok_json(cli(nodes.dev, "job", "submit", "--type", "t", "--backoff-initial", "1m", "--max-attempts", "2",
                      "--priority", "critical", "--json"))
    assert job["retry_policy"]["initial_backoff"] == 60 and job["max_attempts"] == 2
    assert (job["priority"], job["state"], job["trigger"]) == ("critical", "queued", "submit")
    st = ok_json(cli(nodes.dev, "status", "--json"))
    assert st["partition_count"] == 4 and all(isinstance(p["epoch"], int) for p in st["partitions"])


def test_events_lists_follows_and_filters_alerts(nodes: Nodes) -> None:
    a = nodes.dev
    create(a, "not-an-alert")
    nodes.cluster.start_worker("events-worker", JOBS, node="dev")
    bad = ok_json(cli(a, "job", "submit", "--type", "fail", "--max-attempts", "1", "--json"))
    wait_until(lambda: ok_json(cli(a, "exec", "get", bad["id"], "--json"))["state"] == "dead", 60,
               "the failing job with one attempt to be dead-lettered")
    alerts = [json.loads(ln) for ln in cli(a, "events", "--alerts-only", "--json").stdout.splitlines()]
    assert alerts and all(ev["alert"] is True for ev in alerts)
    assert any(ev["kind"] == "dead_letter" and ev["execution_id"] == bad["id"] for ev in alerts)
    everything = [json.loads(ln) for ln in cli(a, "events", "--json").stdout.splitlines()]
    assert any(not ev["alert"] for ev in everything) and all(isinstance(ev["id"], int) for ev in everything)
    table = cli(a, "events", "--alerts-only")
    assert table.returncode == 0 and "ALERT dead_letter" in table.stdout

    last = everything[-1]["id"]
    with subprocess.Popen([*CRONWHEEL, "events", "--follow", "--json", "--poll", "100ms", "--since", str(last),
                           "--address", a], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            made = create(a, "followed")
            assert p.stdout is not None and p.stderr is not None
            ev = json.loads(p.stdout.readline())
            assert ev["kind"] == "schedule_created" and ev["schedule_id"] == made["id"] and ev["id"] > last
            p.send_signal(signal.SIGINT)
            assert p.wait(30) == 130
            assert p.stderr.read().strip() == "cronwheel: error: interrupted"
        finally:
            if p.poll() is None:
                p.kill()


def test_token_new_refuses_tenant_together_with_admin() -> None:
    one_line_error(run_cli("token", "new", "--tenant", "acme", "--admin"), 2, "--admin", "--tenant")
    one_line_error(run_cli("token", "new"), 2, "--tenant NAME or --admin")
    assert json.loads(run_cli("token", "new", "--offline", "--admin", "--json").stdout)["entry"]["admin"] is True
