"""The console's Executions pages in a real headless Chromium against a real cluster and a real
worker process: a running execution's detail (lease owner, fencing token, checkpoint) and its
cancellation; the bulk retry of 100 dead-lettered executions matching a filter; bad filter input
shown next to its field."""

from __future__ import annotations

from typing import Any

import pytest

from cronwheel.v1 import common_pb2
from cronwheel.v1 import scheduler_pb2 as S
from tests.browser.conftest import Browser
from tests.e2e.api_cluster import TOKENS, Api
from tests.e2e.helpers import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
RUNNING = common_pb2.EXECUTION_STATE_RUNNING
DEAD = common_pb2.EXECUTION_STATE_DEAD


@pytest.fixture(scope="module")
def worker(cluster: tuple[Any, str]) -> Any:
    c, _ = cluster
    if "browser-worker" not in c.nodes or not c.nodes["browser-worker"].alive():
        c.start_worker("browser-worker", "tests.browser.workers", env={"CRONWHEEL_TOKEN": TOKENS["admin"][0]})
    return c.nodes["browser-worker"]


def _state(api: Api, eid: str) -> int:
    return int(api.call("GetExecution", S.GetExecutionRequest(execution_id=eid)).execution.state)


def test_cancelling_a_running_execution_shows_its_lease_then_cancels_it(
        cluster: tuple[Any, str], worker: Any, browser: Browser) -> None:
    _, address = cluster
    acme = Api(address, "acme")
    eid = acme.submit(type="browser.block").id
    wait_until(lambda: _state(acme, eid) == RUNNING, 30, "the job to run")
    browser.login("acme")
    browser.go(f"/executions/{eid}")
    browser.wait_text("step", selector="#checkpoint", reload=True)  # the checkpoint the handler saved
    assert "running" in browser.text("#state")
    assert "browser-worker" in browser.text("#lease-owner")
    assert int(browser.text("#fencing-token")) > 0
    browser.shot("execution-running")
    browser.click("#cancel")
    assert "Cancel requested" in browser.text(".flash") or "Cancelled" in browser.text(".flash")
    browser.wait_text("cancelled", selector="#state", reload=True, timeout=30)
    assert _state(acme, eid) == common_pb2.EXECUTION_STATE_CANCELLED
    browser.shot("execution-cancelled")


def test_bulk_retry_brings_back_100_dead_lettered_executions_matching_the_filter(
        cluster: tuple[Any, str], worker: Any, browser: Browser) -> None:
    _, address = cluster
    globex = Api(address, "globex")
    one = common_pb2.RetryPolicy(max_attempts=1)
    ids = [globex.submit(type="browser.fail", retry_policy=one).id for _ in range(100)]
    wait_until(lambda: all(_state(globex, i) == DEAD for i in ids), 90, "100 dead-lettered executions")
    browser.login("globex")
    browser.go("/executions?state=dead&type=browser.fail")
    assert len(browser.all("#executions tbody tr[data-id]")) == 50  # one page of 50, more behind next
    assert browser.has("#next-page")
    browser.shot("executions-dead")
    old = browser.css("html")
    browser.css("#bulk-retry").click()
    browser.d.switch_to.alert.accept()  # "Retry every dead-lettered execution matching these filters?"
    wait_until(lambda: browser.has(".flash") and old.id != browser.css("html").id, 60, "the bulk retry's answer")
    assert "Retried 100 dead-lettered executions." in browser.text(".flash")
    browser.shot("bulk-retried")

    def retried() -> bool:  # each ran once more (and failed again: the job always fails)
        return all(globex.call("GetExecution", S.GetExecutionRequest(execution_id=i)).execution.max_attempts == 2
                   for i in ids)

    wait_until(retried, 30, "every execution to have a second attempt")


def test_bad_filter_input_shows_a_message_next_to_the_field(browser: Browser) -> None:
    browser.login("acme")
    browser.go("/executions?schedule=not-a-uuid")
    assert "schedule_id" in browser.text("#schedule-error")
    browser.go("/executions?from=yesterday")
    assert "2026-03-29T01:30" in browser.text("#from-error")


def test_the_overview_alerts_feed_shows_a_dead_letter(cluster: tuple[Any, str], worker: Any,
                                                       browser: Browser) -> None:
    _, address = cluster
    acme = Api(address, "acme")
    eid = acme.submit(type="browser.fail", retry_policy=common_pb2.RetryPolicy(max_attempts=1)).id
    wait_until(lambda: _state(acme, eid) == DEAD, 60, "a dead-lettered execution")
    browser.login("admin")
    browser.go("/overview")
    # the console samples alerts every few seconds; the page refreshes itself
    links = "return Array.from(document.querySelectorAll('#alerts a')).map(a => a.href).join(' ')"
    wait_until(lambda: eid in browser.d.execute_script(links), 30, "the dead letter in the alerts feed",
               interval_s=0.5)
    assert "dead_letter" in browser.text("#alerts")
    browser.shot("overview-alerts")


def test_a_waiting_execution_shows_what_it_waits_for(cluster: tuple[Any, str], worker: Any, browser: Browser) -> None:
    """Issue 52: the console's execution page lists a waiting job's upstreams, their states now and
    the outcome each resolved the wait with; an upstream cancelled cancels it, naming it."""
    _, address = cluster
    acme = Api(address, "acme")
    up = acme.submit(type="browser.block", idempotency_key="browser-deps-up").id
    down = acme.submit(type="browser.block", depends_on=["browser-deps-up"]).id
    wait_until(lambda: _state(acme, up) == RUNNING, 30, "the upstream to run")
    assert _state(acme, down) == common_pb2.EXECUTION_STATE_WAITING
    browser.login("acme")
    browser.go(f"/executions/{down}")
    assert "waiting" in browser.text("#state")
    assert "1 not finished" in browser.text("#waits-summary")
    [row] = browser.all("#upstreams tr.upstream")
    assert up in row.text and "running" in row.text and "browser-deps-up" in row.text
    browser.shot("execution-waiting")
    acme.call("CancelExecution", S.CancelExecutionRequest(execution_id=up))
    wait_until(lambda: _state(acme, down) == common_pb2.EXECUTION_STATE_CANCELLED, 30, "the dependent cancelled")
    browser.wait_text("cancelled", selector="#state", reload=True, timeout=30)
    assert f"upstream {up} ended cancelled" in browser.text("#run")
    assert "cancelled" in browser.text("#upstreams .outcome")
    browser.shot("execution-upstream-cancelled")
