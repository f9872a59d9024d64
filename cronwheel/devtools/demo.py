"""The demo worker `cronwheel dev` runs: logs what it runs and completes it."""

from __future__ import annotations

import logging
import os

from cronwheel.client.worker import JobContext, Worker

log = logging.getLogger("cronwheel.demo")

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"), worker_id="demo-worker", concurrency=4)


@worker.job("demo.print")
async def print_job(ctx: JobContext) -> dict[str, object]:
    print(f"ran {ctx.type} {ctx.execution_id} scheduled_for={ctx.scheduled_for.isoformat()} "
          f"attempt={ctx.attempt} payload={ctx.payload}", flush=True)
    return {"ok": True}
