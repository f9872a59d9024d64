"""The API commands of the CLI as a user runs them, against real node processes: one in dev mode
(no auth file) and one with an auth file made by `cronwheel token new`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.devtools.harness import ProcessCluster

from .helpers import ok_json, one_line_error, run_cli

pytestmark = [pytest.mark.e2e]


@dataclass
class Nodes:
    cluster: ProcessCluster
    dev: str
    secured: str
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def nodes() -> Iterator[Nodes]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        tokens, entries = {}, []
        for who, flags in (("acme", ["--tenant", "acme"]), ("ops", ["--admin"])):
            r = run_cli("token", "new", "--offline", *flags, "--name", who, "--json")
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            tokens[who] = out["token"]
            entries.append(out["entry"])
        auth = c.workdir / "auth.json"
        auth.write_text(json.dumps({"tokens": entries}))
        dev = c.start_node("dev")
        secured = c.start_node("secured", "--auth-file", str(auth))
        yield Nodes(c, dev.address, secured.address, tokens)


def cli(address: str, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"CRONWHEEL_TOKEN": token} if token else {"CRONWHEEL_TOKEN": ""}
    return run_cli(*args, "--address", address, env=env)



def test_schedule_commands_with_json_output(nodes: Nodes) -> None:
    a = nodes.dev
    made = ok_json(cli(a, "schedule", "create", "--name", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin",
                       "--job-type", "report", "--misfire-policy", "catch_up", "--payload", '{"x": 1}',
                       "--jitter", "30s", "--max-attempts", "3", "--json"))
    s = made
    sid = s["id"]
    assert s["tenant"] == "default" and s["version"] == 1 and s["misfire_policy"] == "catch_up"
    assert s["retry_policy"]["max_attempts"] == 3 and s["jitter"] == 30 and s["payload"] == {"x": 1}
    got = ok_json(cli(a, "schedule", "get", sid, "--json"))
    assert got["name"] == "nightly"
    upd = ok_json(cli(a, "schedule", "update", sid, "--cron", "15 4 * * *", "--expected-version", "1", "--json"))
    assert upd["cron"] == "15 4 * * *" and upd["version"] == 2
    listed = ok_json(cli(a, "schedule", "list", "--json"))
    assert sid in [x["id"] for x in listed]
    table = cli(a, "schedule", "list")
    assert table.returncode == 0 and "nightly" in table.stdout and table.stdout.startswith("ID")
    assert ok_json(cli(a, "schedule", "pause", sid, "--reason", "maintenance", "--json"))["paused"] is True
    assert ok_json(cli(a, "schedule", "resume", sid, "--json"))["paused"] is False
    run = ok_json(cli(a, "schedule", "trigger", sid, "--json"))
    assert run["state"] == "queued" and run["trigger"] == "manual" and run["attempt"] == 0
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    bf = ok_json(cli(a, "schedule", "backfill", sid, "--start", (end - timedelta(days=3)).isoformat(),
                     "--end", end.isoformat(), "--json"))
    assert bf["created_count"] == 3 and len(bf["execution_ids"]) == 3
    text = cli(a, "schedule", "backfill", sid, "--start", (end - timedelta(days=3)).isoformat(), "--end",
               end.isoformat())
    assert text.returncode == 0 and "created 0" in text.stdout and "3 tick(s) already had one" in text.stdout
    pv = ok_json(cli(a, "schedule", "preview", sid, "--count", "4", "--json"))
    assert len(pv) == 4
    pv2 = ok_json(cli(a, "schedule", "preview", "--cron", "@daily", "--tz", "UTC", "--count", "2", "--json"))
    assert [t["scheduled_for"][11:] for t in pv2] == ["00:00:00Z", "00:00:00Z"]
    gone = cli(a, "schedule", "delete", sid, "--cancel-pending", "--json")
    assert ok_json(gone)["cancelled_count"] == 4  # the manual run and the three backfilled ones
    one_line_error(cli(a, "schedule", "get", sid), 1, "not_found")


def test_job_and_exec_commands(nodes: Nodes) -> None:
    a = nodes.dev
    sub = ok_json(cli(a, "job", "submit", "--type", "email", "--payload", '{"to": "x"}', "--idempotency-key",
                      "welcome-1", "--priority", "critical", "--json"))
    eid = sub["id"]
    assert sub["deduplicated"] is False and sub["priority"] == "critical"
    assert ok_json(cli(a, "job", "submit", "--type", "email", "--idempotency-key", "welcome-1",
                       "--json"))["deduplicated"] is True
    later = ok_json(cli(a, "job", "submit", "--type", "email", "--run-at",
                        (datetime.now(UTC) + timedelta(hours=1)).isoformat(), "--json"))
    assert later["state"] == "scheduled"
    listed = ok_json(cli(a, "exec", "list", "--type", "email", "--json"))
    assert {e["id"] for e in listed} >= {eid, later["id"]}
    assert ok_json(cli(a, "exec", "get", eid, "--json"))["payload"] == {"to": "x"}
    c = ok_json(cli(a, "exec", "cancel", eid, "--reason", "duplicate", "--json"))
    assert c["state"] == "cancelled"
    states = ok_json(cli(a, "exec", "list", "--state", "cancelled", "--type", "email", "--json"))
    assert [e["id"] for e in states] == [eid]
    r = ok_json(cli(a, "exec", "retry", eid, "--attempts", "2", "--json"))
    assert r["state"] == "queued"
    one_line_error(cli(a, "exec", "retry", eid), 1, "failed_precondition")
    table = cli(a, "exec", "list", "--type", "email")
    assert table.returncode == 0 and eid in table.stdout and "queued" in table.stdout
    details = cli(a, "exec", "get", eid)
    assert details.returncode == 0 and "state" in details.stdout and "queued" in details.stdout


def test_status_shows_members_and_queues(nodes: Nodes) -> None:
    st = ok_json(cli(nodes.dev, "status", "--json"))
    assert sorted(m["node_id"] for m in st["members"]) == ["dev", "secured"]
    assert st["partition_count"] == 4
    table = cli(nodes.dev, "status")
    assert table.returncode == 0 and "PRIORITY" in table.stdout and "dev" in table.stdout


def test_exit_codes_and_one_line_errors(nodes: Nodes) -> None:
    a = nodes.dev
    one_line_error(cli(a, "schedule", "create", "--name", "x", "--cron", "0 3 * *", "--tz", "UTC", "--job-type",
                       "j", "--misfire-policy", "skip"), 2, "--cron")
    one_line_error(cli(a, "schedule", "create", "--name", "x"), 2, "required")
    one_line_error(cli(a, "schedule", "create", "--name", "x", "--cron", "* * * * *", "--tz", "UTC", "--job-type",
                       "j", "--misfire-policy", "sometimes"), 2, "--misfire-policy")
    one_line_error(cli(a, "exec", "get", "not-a-uuid"), 2, "EXECUTION_ID")
    one_line_error(cli(a, "exec", "get", "3f2b8a3e-5d1c-4b8e-9a77-0c2e4f6a1b90"), 1, "not_found")
    one_line_error(cli("127.0.0.1:1", "schedule", "list"), 3, "unavailable")
    one_line_error(cli(a, "schedule", "backfill", "3f2b8a3e-5d1c-4b8e-9a77-0c2e4f6a1b90", "--start", "yesterday",
                       "--end", "now"), 2, "--start")


def test_tokens_on_a_node_with_an_auth_file(nodes: Nodes) -> None:
    s = nodes.secured
    one_line_error(cli(s, "schedule", "list"), 1, "unauthenticated")
    one_line_error(cli(s, "schedule", "list", token="not-a-token"), 1, "unauthenticated")
    made = ok_json(cli(s, "schedule", "create", "--name", "secure", "--cron", "0 0 1 1 *", "--tz", "UTC",
                       "--job-type", "j", "--misfire-policy", "skip", "--json", token=nodes.tokens["acme"]))
    assert made["tenant"] == "acme"
    r = run_cli("schedule", "get", made["id"], "--address", s, "--token", nodes.tokens["acme"], "--json")
    assert ok_json(r)["name"] == "secure"
    one_line_error(cli(s, "status", token=nodes.tokens["acme"]), 1, "permission_denied")
    assert ok_json(cli(s, "status", "--json", token=nodes.tokens["ops"]))["members"]
    one_line_error(cli(s, "job", "submit", "--type", "t", "--tenant", "globex", token=nodes.tokens["acme"]), 1,
                   "permission_denied")
    one_line_error(cli(s, "job", "submit", "--type", "t", token=nodes.tokens["ops"]), 2, "tenant")
    events = nodes.cluster.sql("SELECT actor FROM events WHERE schedule_id = %s", made["id"])
    assert events == [("acme",)]


def test_a_node_refuses_a_bad_auth_file_at_start(tmp_path: Any) -> None:
    bad = tmp_path / "auth.json"
    bad.write_text('{"tokens": [{"sha256": "abc", "tenant": "x"}]}')
    for path, needle in [(str(tmp_path / "missing.json"), "cannot read"), (str(bad), "sha256")]:
        r = run_cli("node", "--dsn", "postgresql://127.0.0.1:1/x", "--etcd", "127.0.0.1:1", "--auth-file", path)
        one_line_error(r, 2, "--auth-file", needle)
    r = run_cli("node", "--dsn", "postgresql://127.0.0.1:1/x", "--etcd", "127.0.0.1:1", "--tls-cert", "c.pem")
    one_line_error(r, 2, "--tls-key")
