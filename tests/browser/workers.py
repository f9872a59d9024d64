"""The worker the browser tests run (`cronwheel worker tests.browser.workers`, admin token from
$CRONWHEEL_TOKEN): `browser.block` checkpoints and then runs until it is cancelled;
`browser.fail` always fails (a retryable error), so a run whose attempts are used up ends
dead-lettered (DEAD)."""

from __future__ import annotations

import os

from cronwheel.client import JobContext, Worker

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"), worker_id="browser-worker", concurrency=200)


@worker.job("browser.block")
async def block(ctx: JobContext) -> dict[str, object]:
    await ctx.checkpoint({"step": 1, "of": "until cancelled"})
    await ctx.cancelled.wait()
    return {"stopped": ctx.stop_reason}


@worker.job("browser.fail")
async def fail(ctx: JobContext) -> None:
    raise RuntimeError("boom: this job always fails")
