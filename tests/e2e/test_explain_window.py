"""`cronwheel explain` without --since against a node process (issue 49): the default window (the
last hour) starts at the schedule's creation when that is more recent, so a schedule created a
moment ago is not explained with an hour of not_yet_created lines before the ticks that matter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cronwheel.client import Client
from cronwheel.devtools.harness import ProcessCluster

from .helpers import run_cli, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=4, lease_ttl_s=3, workdir=tmp_path / "cluster") as c:
        c.start_node("n1")
        c.wait_converged(["n1"])
        yield c


def test_explain_of_a_new_schedule_starts_at_its_creation_not_an_hour_ago(cluster: ProcessCluster) -> None:
    c = cluster
    with Client(c.addresses()) as client:
        s = client.create_schedule("new", "* * * * * *", "x", timezone="UTC", misfire_policy="skip")
    assert s.created_at is not None
    wait_until(lambda: c.sql("SELECT count(*) FROM executions WHERE schedule_id = %s", s.id)[0][0] >= 2, 30,
               "two ticks fired")
    r = run_cli("explain", s.id, "--address", c.addresses()[0], "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    outcomes = [t["outcome"] for t in out["ticks"]]
    assert "not_yet_created" not in outcomes, f"{outcomes.count('not_yet_created')} not_yet_created lines"
    assert datetime.fromisoformat(out["since"].replace("Z", "+00:00")) == s.created_at
    assert outcomes.count("fired") >= 1 and len(outcomes) < 60, outcomes
    # A window asked for is kept as asked.
    since = s.created_at - timedelta(seconds=5)
    r = run_cli("explain", s.id, "--since", since.isoformat(), "--address", c.addresses()[0], "--json")
    assert r.returncode == 0, r.stderr
    assert [t["outcome"] for t in json.loads(r.stdout)["ticks"]][:4] == ["not_yet_created"] * 4
