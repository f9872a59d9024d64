"""The chaos workload's handlers, run by `cronwheel worker chaos.workload_jobs`.

Each handler appends to its worker's own JSONL history ($CHAOS_JSONL): a `start` line when it
begins and an `end` line (outcome ok | error | stopped | stale | cancelled) when it returns or
raises. A worker that is SIGKILLed writes no `end`; that is how the checker tells a killed run
from a retried failure. Lines are one `write()` each on an O_APPEND file.

Every result carries the fencing token of the run that produced it, and every planned failure
names it in its message, so the checker can prove no stale token's completion landed.

    tick    cron runs and plain one-off jobs: record and succeed
    flaky   fail (retryable) on the first attempt, succeed on the next
    doomed  always fail (retryable): the long-retry-history failpoint's job, run to `dead`
    long    count payload["steps"] steps of payload["step_s"], checkpointing each; a later
            attempt resumes from the checkpoint (its `start` line says from_step)
    hold    run 0.5 s (the keyed jobs: long enough that a concurrency limit binds)

Every `start` line carries `leased_at`, the node's start of the attempt (its claim), for the
rate-limit check.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from cronwheel.client import JobContext, Worker
from cronwheel.client.worker import Stale

LEASE_S = float(os.environ.get("CHAOS_WORKER_LEASE_S", "4"))

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"), concurrency=8, lease_s=LEASE_S,
                heartbeat_every_s=max(0.5, LEASE_S / 4), grace_s=2.0, poll_wait_s=2.0)


def record(ctx: JobContext, event: str, **extra: object) -> None:
    path = os.environ.get("CHAOS_JSONL")
    if not path:
        return
    line = json.dumps({"event": event, "worker": worker.worker_id, "pid": os.getpid(),
                       "execution_id": ctx.execution_id, "schedule_id": ctx.schedule_id,
                       "scheduled_for": ctx.scheduled_for.isoformat(), "attempt": ctx.attempt,
                       "token": ctx.fencing_token, "t": time.time(), **extra,
                       **({"leased_at": ctx.started_at.timestamp()} if event == "start" and ctx.started_at else {})})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def result(ctx: JobContext, **extra: object) -> dict[str, object]:
    return {"token": ctx.fencing_token, "worker": worker.worker_id, "attempt": ctx.attempt, **extra}


@worker.job("tick")
async def tick(ctx: JobContext) -> dict[str, object]:
    record(ctx, "start")
    record(ctx, "end", outcome="ok")
    return result(ctx)


@worker.job("flaky")
async def flaky(ctx: JobContext) -> dict[str, object]:
    record(ctx, "start")
    if ctx.attempt < 2:
        record(ctx, "end", outcome="error")
        raise RuntimeError(f"planned failure of the first attempt (token={ctx.fencing_token})")
    record(ctx, "end", outcome="ok")
    return result(ctx)


@worker.job("doomed")
async def doomed(ctx: JobContext) -> dict[str, object]:
    record(ctx, "start")
    record(ctx, "end", outcome="error")
    raise RuntimeError(f"planned failure of every attempt (token={ctx.fencing_token})")


@worker.job("hold")
async def hold(ctx: JobContext) -> dict[str, object]:
    record(ctx, "start")
    await asyncio.sleep(0.5)
    record(ctx, "end", outcome="ok")
    return result(ctx)


@worker.job("long")
async def long(ctx: JobContext) -> dict[str, object] | None:
    step = int((ctx.checkpoint_value or {}).get("step", 0))
    record(ctx, "start", from_step=step)
    steps = int(ctx.payload.get("steps", 10))
    try:
        while step < steps:
            if ctx.cancelled.is_set():
                record(ctx, "end", outcome="stopped", at_step=step)
                return None
            await asyncio.sleep(float(ctx.payload.get("step_s", 0.2)))
            step += 1
            await ctx.checkpoint({"step": step, "token": ctx.fencing_token})
    except Stale:
        record(ctx, "end", outcome="stale", at_step=step)
        raise
    except asyncio.CancelledError:
        record(ctx, "end", outcome="cancelled", at_step=step)
        raise
    record(ctx, "end", outcome="ok", step=step)
    return result(ctx, steps=step)
