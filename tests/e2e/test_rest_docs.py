"""Every curl example of docs/rest.md runs as written, in order, against `cronwheel rest` in
front of a cluster with an auth file (issue 51: the REST page's examples are run by a test)."""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronwheel.cli import rest as cli_rest
from cronwheel.cli.flags import check_address
from cronwheel.cluster.api.rest_server import RestConfig
from cronwheel.devtools.harness import ProcessCluster

from .api_cluster import TOKENS, api_cluster
from .rest_helpers import Http, rest_process

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
REST_MD = ROOT / "docs" / "rest.md"
_SH = re.compile(r"^```sh\n(?P<body>.*?)^```$", re.M | re.S)
LAUNCH = "cronwheel rest "  # the block that starts the server: the fixture starts its own (rest_process)


def blocks() -> list[str]:
    return [m["body"] for m in _SH.finditer(REST_MD.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[ProcessCluster, str, str]]:
    with api_cluster() as (cluster, address), rest_process(address) as url:
        yield cluster, address, url


def test_every_curl_example_of_the_rest_page_runs(stack: tuple[ProcessCluster, str, str]) -> None:
    _, _, url = stack
    run = [b for b in blocks() if not b.startswith(LAUNCH)]
    assert len(run) == len(blocks()) - 1 and len(run) >= 8
    script = "set -euo pipefail\n" + "".join(f"echo '--- block {i}'\n{b}" for i, b in enumerate(run))
    r = subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "CRONWHEEL_REST": url,
                                                    "TOKEN": TOKENS["admin"][0]},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = r.stdout
    assert out.count("--- block") == len(run)
    assert "30 0 * * *" in out and "EXECUTION_STATE_CANCELLED" in out and "cronwheel API" in out
    assert out.rstrip().endswith("schedule.misfire"), out[-500:]
    # What the examples made is there, through the API: the schedule (resumed, its new cron, one
    # manual run) and the cancelled job.
    admin = Http(url, "admin")
    (sched,) = [s for s in admin.ok("GET", "/v1/schedules?tenant=billing")["schedules"]
                if s["name"] == "nightly-demurrage-ROTTERDAM"]
    assert (sched["paused"], sched["cron"], sched["job_type"]) == (False, "30 0 * * *", "billing.demurrage.v2")
    runs = admin.ok("GET", f"/v1/executions?schedule_id={sched['id']}")["executions"]
    assert [x["trigger"] for x in runs] == ["TRIGGER_MANUAL"], runs


def test_the_launch_example_is_the_command_the_tests_run() -> None:
    (launch,) = [b for b in blocks() if b.startswith(LAUNCH)]
    assert launch.split()[:2] == ["cronwheel", "rest"] and "--address" in launch and "--listen" in launch
    # The flags are the command's own (argparse exits on an unknown or malformed one), and its
    # addresses are ones `cronwheel rest` accepts: the example is runnable as written.
    parser = argparse.ArgumentParser(prog="cronwheel rest", exit_on_error=False)
    cli_rest.configure(parser)
    args = parser.parse_args(launch.split()[2:])
    check_address(args.address)
    RestConfig(listen=args.listen, addresses=tuple(args.address.split(","))).validate()
