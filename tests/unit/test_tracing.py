"""cronwheel.tracing without an exporter (the default): nothing is set up, every helper returns at
once, and the standard OTEL_* variables decide when the OTLP exporter is installed. The traced
path itself is shown on a real cluster (tests/e2e/test_tracing.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cronwheel import tracing


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, False),
    ({"OTEL_TRACES_EXPORTER": "console"}, False),
])
def test_the_otlp_exporter_is_installed_only_when_the_otel_variables_ask_for_it(
        env: dict[str, str], wanted: bool) -> None:
    assert tracing._wants_otlp(env) is wanted


def test_without_an_exporter_tracing_stays_off_and_costs_nothing() -> None:
    assert tracing.setup_tracing("cronwheel-node", env={}) is False
    assert not tracing.enabled()
    with tracing.span("submit") as s:
        assert s is None
    assert tracing.start("fire", root=True) is None
    assert tracing.record_span("lease", 0, parent="00-" + "1" * 32 + "-" + "2" * 16 + "-01") is None


def test_a_traceparent_names_its_span_context_and_garbage_names_none() -> None:
    sc = tracing.span_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert sc is not None
    assert format(sc.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert format(sc.span_id, "016x") == "b7ad6b7169203331"
    assert sc.is_remote
    for bad in (None, "", "00-zz-yy-01", "00-" + "0" * 32 + "-" + "0" * 16 + "-01"):
        assert tracing.span_context(bad) is None
    assert tracing.traceparent(None) is None


def test_otel_traces_exporter_otlp_installs_the_sdk_with_the_otlp_exporter() -> None:
    # A process of its own: a tracer provider can be installed once per process.
    probe = (
        "from opentelemetry import trace\n"
        "from cronwheel import tracing\n"
        "assert tracing.setup_tracing('cronwheel-node')\n"
        "p = trace.get_tracer_provider()\n"
        "names = [type(sp.span_exporter).__name__ for sp in p._active_span_processor._span_processors]\n"
        "assert names == ['OTLPSpanExporter'], names\n"
        "assert p.resource.attributes['service.name'] == 'cronwheel-node'\n"
        "with tracing.span('submit') as s:\n"
        "    assert s is not None and tracing.traceparent(s).startswith('00-')\n"
    )
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "OTEL_BSP_EXPORT_TIMEOUT": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    env.pop("OTEL_SERVICE_NAME", None)
    got = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
