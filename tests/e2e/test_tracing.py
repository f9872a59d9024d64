"""Tracing on a real cluster (PostgreSQL, etcd, a node process and a worker process, both writing
finished spans to one CRONWHEEL_TRACE_FILE): a submitted job is one trace of submit -> fire ->
lease -> run -> complete, a cron tick one trace of fire -> lease -> run -> complete, each span
the child of the one before, and a handler's own span joins the trace under "run"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cronwheel.client import Client
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.tracing import TRACE_FILE_ENV

from .helpers import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
Span = dict[str, Any]


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[ProcessCluster, Client, Path]]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        spans = c.workdir / "spans.jsonl"
        node = c.start_node_with("n1", env={TRACE_FILE_ENV: str(spans)})
        wait_until(lambda: any(" ready (" in ln for ln in node.lines), 30, "n1 to be ready")
        c.start_worker("w1", "tests.e2e.tracing_jobs", env={TRACE_FILE_ENV: str(spans)})
        with Client(node.address) as client:
            yield c, client, spans


def read_spans(path: Path) -> list[Span]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def trace_of(spans: list[Span], trace_id: str) -> list[Span]:
    return sorted((s for s in spans if s["trace_id"] == trace_id), key=lambda s: s["start_ns"])


def finished_trace(path: Path, first: Any) -> list[Span] | None:
    """The trace (spans by start time) whose root span satisfies `first`, once its complete span is in."""
    spans = read_spans(path)
    for root in spans:
        if root["parent_id"] is None and first(root):
            got = trace_of(spans, root["trace_id"])
            if any(s["name"] == "complete" for s in got):
                return got
    return None


def names(traceparent: str) -> tuple[str, str]:
    """(trace id, span id) of a W3C traceparent "00-<trace>-<span>-<flags>"."""
    version, trace_id, span_id, _flags = traceparent.split("-")
    assert version == "00"
    return trace_id, span_id


def assert_chain(spans: list[Span], names: list[str]) -> None:
    """`spans` are exactly `names` in start order (the handler's span aside), each the child of the
    one before, on the node or the worker that did it."""
    handler = [s for s in spans if s["name"] == "handler-work"]
    chain = [s for s in spans if s["name"] != "handler-work"]
    assert [s["name"] for s in chain] == names
    assert chain[0]["parent_id"] is None
    for parent, child in zip(chain, chain[1:], strict=False):
        assert child["parent_id"] == parent["span_id"], (parent["name"], child["name"])
    service = {s["name"]: s["service"] for s in chain}
    assert service["run"] == "cronwheel-worker"
    assert {service[n] for n in names if n != "run"} == {"cronwheel-node"}
    run = next(s for s in chain if s["name"] == "run")
    assert len(handler) == 1 and handler[0]["parent_id"] == run["span_id"]  # the handler's own span joined


def test_a_submitted_job_is_one_trace_submit_fire_lease_run_complete(
        traced: tuple[ProcessCluster, Client, Path]) -> None:
    c, client, path = traced
    ex = client.submit("trace-job", {"n": 1}, tenant="t")
    spans = wait_until(lambda: finished_trace(path, lambda s: s["name"] == "submit" and any(
        x["attributes"].get("cronwheel.execution_id") == ex.id for x in trace_of(read_spans(path), s["trace_id"]))),
        30, "the submitted job's trace to finish")
    assert_chain(spans, ["submit", "fire", "lease", "run", "complete"])
    assert all(s["attributes"]["cronwheel.execution_id"] == ex.id for s in spans if s["name"] != "submit"
               and s["name"] != "handler-work")
    # The worker's ctx.trace was the lease span's context, and the execution keeps its fire span's.
    lease = next(s for s in spans if s["name"] == "lease")
    fire = next(s for s in spans if s["name"] == "fire")
    got = wait_until(lambda: (e := client.get_execution(ex.id)).state == "succeeded" and e, 30, "success")
    assert names(got.result["trace"]) == (lease["trace_id"], lease["span_id"])
    (stored,) = c.sql("SELECT trace_context FROM executions WHERE id = %s", ex.id)
    assert names(stored[0]) == (fire["trace_id"], fire["span_id"])


def test_a_cron_tick_is_one_trace_fire_lease_run_complete(traced: tuple[ProcessCluster, Client, Path]) -> None:
    c, client, path = traced
    s = client.create_schedule("every-second", "* * * * * *", "trace-job", timezone="UTC",
                               misfire_policy="skip", tenant="t")
    try:
        spans = wait_until(lambda: finished_trace(
            path, lambda x: x["name"] == "fire" and x["attributes"].get("cronwheel.schedule_id") == s.id),
            30, "a tick's trace to finish")
    finally:
        client.delete(s.id)
    assert_chain(spans, ["fire", "lease", "run", "complete"])
    fire = spans[0]
    ids = {x["attributes"]["cronwheel.execution_id"] for x in spans if x["name"] in ("lease", "run", "complete")}
    assert len(ids) == 1
    (eid,) = ids
    row = c.sql("SELECT schedule_id::text, scheduled_for, trace_context FROM executions WHERE id = %s", eid)
    assert row[0][0] == s.id and names(row[0][2]) == (fire["trace_id"], fire["span_id"])
    assert fire["attributes"]["cronwheel.scheduled_for"] == row[0][1].isoformat()


def test_without_an_exporter_nothing_is_traced_or_stored() -> None:
    with ProcessCluster(partitions=2, lease_ttl_s=3) as c:
        node = c.start_node("n1")
        wait_until(lambda: any(" ready (" in ln for ln in node.lines), 30, "n1 to be ready")
        c.start_worker("w1", "tests.e2e.tracing_jobs")
        with Client(node.address) as client:
            ex = client.submit("trace-job", {"n": 2}, tenant="t")
            s = client.create_schedule("untraced", "* * * * * *", "trace-job", timezone="UTC",
                                       misfire_policy="skip", tenant="t")
            got = wait_until(lambda: (e := client.get_execution(ex.id)).state == "succeeded" and e, 30, "success")
            assert got.result == {"trace": None}  # the handler's ctx.trace
            wait_until(lambda: c.sql("SELECT count(*) FROM executions WHERE schedule_id = %s AND state = 'succeeded'",
                                     s.id)[0][0] > 0, 30, "a tick to succeed")
            client.delete(s.id)
        assert c.sql("SELECT count(*) FROM executions WHERE trace_context IS NOT NULL") == [(0,)]
