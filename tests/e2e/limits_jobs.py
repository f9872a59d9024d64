"""Handlers for tests/e2e/test_limits.py and test_queues.py, run by `cronwheel worker
tests.e2e.limits_jobs`: `noop` returns at once, `nap` sleeps payload["ms"] milliseconds, `whoami`
too and returns its worker's id. The starts and finishes the tests check are the executions' own
started_at / finished_at."""

from __future__ import annotations

import asyncio
import os

from cronwheel.client import JobContext, Worker

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"),
                concurrency=int(os.environ.get("CRONWHEEL_TEST_CONCURRENCY", "8")))


@worker.job("noop")
async def noop(ctx: JobContext) -> None:
    return None


@worker.job("nap")
async def nap(ctx: JobContext) -> None:
    await asyncio.sleep(float(ctx.payload["ms"]) / 1000)


@worker.job("whoami")
async def whoami(ctx: JobContext) -> dict[str, str]:
    """The worker that ran it (its --worker-id), as the result: tests/e2e/test_queues.py."""
    await asyncio.sleep(float(ctx.payload.get("ms", 0)) / 1000)
    return {"worker": worker.worker_id}
