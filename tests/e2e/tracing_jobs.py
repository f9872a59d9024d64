"""A worker module for tests/e2e/test_tracing.py (`cronwheel worker tests.e2e.tracing_jobs`): its
handler starts a span of its own (it must join the execution's trace under the worker's "run"
span) and returns the `ctx.trace` it was given."""

from __future__ import annotations

import os

from opentelemetry import trace

from cronwheel.client import JobContext, Worker

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"))


@worker.job("trace-job")
async def traced(ctx: JobContext) -> dict[str, object]:
    with trace.get_tracer("tests.e2e.tracing_jobs").start_as_current_span("handler-work"):
        return {"trace": ctx.trace}
