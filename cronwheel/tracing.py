"""OpenTelemetry tracing of an execution's life: submit -> fire -> lease -> run -> complete.

One trace per execution, linked by a W3C `traceparent` string: stored with the execution
(executions.trace_context), handed to the worker in LeaseExecutions (LeasedExecution.trace_context)
and sent back with the completion (CompleteExecutionRequest/FailExecutionRequest.trace_context).

Off unless asked for: `setup_tracing` (called once at start by the node and the worker) installs
an SDK TracerProvider only when the standard OTEL_* variables ask for an exporter
(OTEL_TRACES_EXPORTER=otlp, or OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT set without
OTEL_TRACES_EXPORTER=none) or CRONWHEEL_TRACE_FILE names a file (a debugging exporter: one JSON
line per finished span). An application that installed its own SDK provider before (a worker
embedded in a traced service) is used as is. Otherwise `enabled()` is False and every helper
returns at once: no span, no context string, nothing stored.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_FILE_ENV = "CRONWHEEL_TRACE_FILE"
_PROPAGATOR = TraceContextTextMapPropagator()
_state: dict[str, Any] = {"enabled": False, "tracer": None}


def _sdk_provider() -> bool:
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return False
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def _wants_otlp(env: Mapping[str, str]) -> bool:
    exporters = {e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if "none" in exporters:
        return False
    if "otlp" in exporters:
        return True
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


class JsonLinesExporter:
    """Debugging exporter: appends each finished span as one JSON line to a file (several
    processes may share it: one write() per span, O_APPEND)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult
        lines = []
        for s in spans:
            parent = s.parent
            lines.append(json.dumps({
                "name": s.name,
                "service": s.resource.attributes.get("service.name"),
                "trace_id": format(s.context.trace_id, "032x"),
                "span_id": format(s.context.span_id, "016x"),
                "parent_id": format(parent.span_id, "016x") if parent is not None else None,
                "start_ns": s.start_time, "end_ns": s.end_time,
                "attributes": dict(s.attributes or {}),
            }) + "\n")
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, "".join(lines).encode())
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def setup_tracing(service_name: str, env: Mapping[str, str] | None = None) -> bool:
    """Install the exporter the environment asks for (see the module docstring); True when
    tracing is on. Call once, at start, before any span."""
    env = os.environ if env is None else env
    if not _sdk_provider():
        path = env.get(TRACE_FILE_ENV)
        otlp = _wants_otlp(env)
        if not path and not otlp:
            _state.update(enabled=False, tracer=None)
            return False
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME")
                                                            or service_name}))
        if path:
            provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))  # type: ignore[arg-type]
        if otlp:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    _state.update(enabled=True, tracer=trace.get_tracer("cronwheel"))
    return True


def shutdown() -> None:
    """Flush and stop the exporters (at process exit)."""
    if _state["enabled"]:
        provider = trace.get_tracer_provider()
        stop = getattr(provider, "shutdown", None)
        if stop is not None:
            stop()


def enabled() -> bool:
    return bool(_state["enabled"])


def traceparent(span: Span | None) -> str | None:
    """The W3C traceparent of `span` (None when tracing is off or the span is not recording)."""
    if span is None or not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent")


def span_context(value: str | None) -> SpanContext | None:
    """The SpanContext a traceparent string names (None for None, "" or a malformed string)."""
    if not value:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": value})
    sc = trace.get_current_span(ctx).get_span_context()
    return sc if sc.is_valid else None


@contextmanager
def span(name: str, parent: str | None = None, root: bool = False,
         attributes: Mapping[str, Any] | None = None) -> Iterator[Span | None]:
    """A span `name`, current inside the block, child of the `parent` traceparent (or of the
    current span; `root`: of nothing). Yields None, at no cost, when tracing is off, or when
    `parent` is given but empty (an execution stored while tracing was off: no trace to join)."""
    if not _state["enabled"] or (parent is not None and not parent and not root):
        yield None
        return
    with _state["tracer"].start_as_current_span(name, context=_context(parent, root),
                                                attributes=dict(attributes or {})) as s:
        yield s


def ns(ts: float) -> int:
    """Unix seconds (a Clock's `now_ts()`) as a span timestamp (ns)."""
    return int(ts * 1e9)


def _context(parent: str | None, root: bool) -> Any:
    sc = span_context(parent)
    if sc is not None:
        return trace.set_span_in_context(trace.NonRecordingSpan(sc))
    if root or parent is not None:
        return trace.set_span_in_context(trace.INVALID_SPAN)
    return None


def start(name: str, parent: str | None = None, root: bool = False, start_ns: int | None = None,
          attributes: Mapping[str, Any] | None = None) -> Span | None:
    """Start (not make current) a span as `span` does; the caller ends it. None when off."""
    if not _state["enabled"] or (parent is not None and not parent and not root):
        return None
    s: Span = _state["tracer"].start_span(name, context=_context(parent, root), start_time=start_ns,
                                          attributes=dict(attributes or {}))
    return s


def record_span(name: str, start_ns: int, parent: str | None = None, root: bool = False,
                attributes: Mapping[str, Any] | None = None) -> str | None:
    """A span from `start_ns` to now, ended at once; its traceparent (None when off)."""
    s = start(name, parent, root, start_ns, attributes)
    if s is None:
        return None
    s.end()
    return traceparent(s)


def end_all(spans: Sequence[Span]) -> None:
    """End spans that `start` began."""
    for s in spans:
        s.end()


def use(s: Span) -> Any:
    """Make `s` the current span inside a `with` block (it is not ended on exit)."""
    return trace.use_span(s, end_on_exit=False)


def finish_run(s: Span, outcome: str, error_type: str = "") -> str:
    """End a worker's "run" span with its outcome ("complete", "fail", "drop", "abandoned": the
    worker stopped supervising it); its traceparent for the completion the worker sends ("" if
    none)."""
    s.set_attribute("cronwheel.outcome", outcome)
    if outcome == "fail":
        s.set_status(trace.Status(trace.StatusCode.ERROR, error_type or "error"))
    s.end()
    return traceparent(s) or ""
