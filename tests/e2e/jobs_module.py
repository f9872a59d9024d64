"""Handlers used by the e2e tests, run by `cronwheel worker tests.e2e.jobs_module`.

Every handler appends what it saw to the JSONL log named by $CRONWHEEL_TEST_LOG (the worker's own
append-only history), so tests can check what ran, how often and with which attempt and token.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from cronwheel.client import JobContext, NonRetryable, Worker

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"),
                concurrency=int(os.environ.get("CRONWHEEL_TEST_CONCURRENCY", "8")),
                lease_s=float(os.environ.get("CRONWHEEL_TEST_LEASE_S", "60")),
                grace_s=float(os.environ.get("CRONWHEEL_TEST_GRACE_S", "5")))


def record(ctx: JobContext, event: str, **extra: object) -> None:
    path = os.environ.get("CRONWHEEL_TEST_LOG")
    if not path:
        return
    line = json.dumps({"event": event, "worker": worker.worker_id, "execution_id": ctx.execution_id,
                       "attempt": ctx.attempt, "token": ctx.fencing_token, "t": time.time(),
                       "scheduled_for": ctx.scheduled_for.isoformat(), **extra})
    with open(path, "a") as f:
        f.write(line + "\n")


@worker.job("ok")
async def ok(ctx: JobContext) -> dict[str, object]:
    record(ctx, "start")
    return {"ok": True}


@worker.job("fail")
async def fail(ctx: JobContext) -> None:
    record(ctx, "start")
    raise RuntimeError("always fails")


@worker.job("bad")
async def bad(ctx: JobContext) -> None:
    record(ctx, "start")
    raise NonRetryable("input can never work")


@worker.job("hang")
async def hang(ctx: JobContext) -> None:
    record(ctx, "start")
    await asyncio.sleep(3600)


@worker.job("long")
async def long(ctx: JobContext) -> dict[str, object]:
    """Counts to payload['steps'], checkpointing each step; resumes from the checkpoint."""
    step = int((ctx.checkpoint_value or {}).get("step", 0))
    record(ctx, "start", from_step=step)
    while step < int(ctx.payload["steps"]):
        if ctx.cancelled.is_set():
            record(ctx, "stopped", at_step=step)
            return None  # type: ignore[return-value]
        await asyncio.sleep(float(ctx.payload.get("step_s", 0.1)))
        step += 1
        await ctx.checkpoint({"step": step})
    record(ctx, "done", step=step)
    return {"steps": step}
