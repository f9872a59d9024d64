"""The worker the execution-log tests run (`cronwheel worker tests.e2e.logs_jobs`, admin token
from $CRONWHEEL_TOKEN): `logs.three` logs 3 lines per attempt (two through Python logging, one
through ctx.log) and fails its first two attempts; `logs.slow` logs a line every `every_s` with
the wall time it was written (once the file `gate` exists, if given); `logs.flood` logs `mb` MB
through Python logging, in lines of 1,000 bytes; `logs.block` logs one line and runs until
cancelled."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from cronwheel.client import JobContext, Worker

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"), worker_id="logs-worker", concurrency=50)
log = logging.getLogger("jobs.logs")


@worker.job("logs.three")
async def three(ctx: JobContext) -> dict[str, int]:
    log.info("attempt %d: line 1", ctx.attempt)
    ctx.log(f"attempt {ctx.attempt}: line 2")
    log.warning("attempt %d: line 3", ctx.attempt)
    if ctx.attempt < 3:
        raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")
    return {"attempts": ctx.attempt}


@worker.job("logs.slow")
async def slow(ctx: JobContext) -> None:
    gate = ctx.payload.get("gate")
    if gate:  # a test's follower says it is following by creating this file
        ctx.log("waiting for the gate")
        while not os.path.exists(gate):
            await asyncio.sleep(0.02)
    for i in range(int(ctx.payload["lines"])):
        log.info("line %d written_at=%.6f", i + 1, time.time())
        await asyncio.sleep(float(ctx.payload["every_s"]))


@worker.job("logs.flood")
def flood(ctx: JobContext) -> dict[str, int]:  # a sync handler: its thread's records are captured
    line = "x" * 990
    n = int(ctx.payload["mb"]) * 1000
    for i in range(n):
        log.info("%08d %s", i + 1, line)
    return {"lines": n}


@worker.job("logs.block")
async def block(ctx: JobContext) -> None:
    ctx.log("waiting until cancelled")
    await ctx.cancelled.wait()
