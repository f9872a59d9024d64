"""A worker module for tests/e2e/test_worker_sdk.py, run by `cronwheel worker tests.e2e.worker_sdk_jobs`:
the start-up wait is short ($CRONWHEEL_TEST_CONNECT_TIMEOUT_S) so an unreachable node is reported fast."""

from __future__ import annotations

import os

from cronwheel.client import JobContext, Worker

worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"),
                connect_timeout_s=float(os.environ.get("CRONWHEEL_TEST_CONNECT_TIMEOUT_S", "30")))


@worker.job("ok")
async def ok(ctx: JobContext) -> dict[str, object]:
    return {"ok": True}
