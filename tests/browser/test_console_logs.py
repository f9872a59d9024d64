"""The console's Log tab (issue 53) in a real headless Chromium against a real cluster and a real
worker process (tests/e2e/logs_jobs.py): a job that logs 3 lines per attempt and fails twice shows
its 3 attempts of 3 lines in order; a running job's lines appear as its handler writes them, with
no reload, until the tab says the log ended."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cronwheel.v1 import common_pb2
from cronwheel.v1 import scheduler_pb2 as S
from tests.browser.conftest import Browser
from tests.e2e.api_cluster import TOKENS, Api
from tests.e2e.helpers import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
THREE = [(a, f"attempt {a}: line {i}") for a in (1, 2, 3) for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def logs_worker(cluster: tuple[Any, str]) -> Any:
    c, _ = cluster
    if "logs-worker" not in c.nodes or not c.nodes["logs-worker"].alive():
        c.start_worker("logs-worker", "tests.e2e.logs_jobs", env={"CRONWHEEL_TOKEN": TOKENS["admin"][0]})
    return c.nodes["logs-worker"]


def shown(browser: Browser) -> list[tuple[int, str]]:
    """(attempt, message) of each line the tab shows; read again if htmx swapped a part meanwhile."""
    for _ in range(5):
        try:
            return [(int(el.get_attribute("data-attempt")), el.find_element("css selector", ".msg").text)
                    for el in browser.all("#log .line")]
        except Exception:  # a stale element: the poller was being replaced
            continue
    return []


def test_the_log_tab_shows_three_attempts_of_three_lines_in_order(cluster: tuple[Any, str], logs_worker: Any,
                                                                   browser: Browser) -> None:
    acme = Api(cluster[1], "acme")
    retry = common_pb2.RetryPolicy(max_attempts=3, backoff_multiplier=1.0)
    retry.initial_backoff.FromMilliseconds(200)
    eid = acme.submit(type="logs.three", retry_policy=retry).id
    browser.login("acme")
    browser.go(f"/executions/{eid}")
    browser.click("#log-tab")
    browser.wait_text("End of the log", selector="#log", timeout=60)  # followed to the end, no reload
    assert shown(browser) == THREE
    heads = [el.text for el in browser.all("#log .attempt-head")]
    assert heads == ["Attempt 1", "Attempt 2", "Attempt 3"]
    assert "succeeded" in browser.text("#log-end")
    browser.shot("log-three-attempts")


def test_the_log_tab_follows_a_running_jobs_lines_as_they_are_written(cluster: tuple[Any, str], logs_worker: Any,
                                                                     browser: Browser) -> None:
    acme = Api(cluster[1], "acme")
    gate = Path(tempfile.mkdtemp(prefix="log-tab-")) / "gate"  # the handler waits for it after one line
    eid = acme.submit(type="logs.slow", payload_json=json.dumps({"lines": 6, "every_s": 0.7, "gate": str(gate)})).id
    browser.login("acme")
    browser.go(f"/executions/{eid}/log")
    browser.wait_text("waiting for the gate", selector="#log", timeout=60)  # followed: no reload
    gate.touch()

    def written() -> list[int]:
        return [int(m.split()[1]) for _, m in shown(browser) if m.startswith("line ")]

    wait_until(lambda: 0 < len(written()) < 6, 30, "the first lines, while the job still runs", interval_s=0.1,
               detail=lambda: (shown(browser), [(ln.seq, ln.message) for ln in acme.call(
                   "GetExecutionLogs", S.GetExecutionLogsRequest(execution_id=eid)).lines]))
    browser.shot("log-following")
    browser.wait_text("End of the log", selector="#log", timeout=60)
    assert written() == [1, 2, 3, 4, 5, 6]  # the same page, never reloaded
    assert "succeeded" in browser.text("#log-end")
