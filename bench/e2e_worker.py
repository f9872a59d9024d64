"""The worker `python -m bench.e2e` runs: `cronwheel worker bench.e2e_worker --address ADDR`.

The SDK Worker with its default settings (the CLI's --concurrency overrides, as a user would).
Each handler appends one line to the file named by $CRONWHEEL_E2E_RECORDS as it starts:
`execution_id schedule_id|- scheduled_for start attempt`, times as Unix seconds of this
machine's clock (the one the benchmark reads), then returns at once (the benchmark measures the
scheduler, not work). The file is line-buffered, so a line is written when the handler starts.
With $CRONWHEEL_E2E_LOG_LINES=N (`python -m bench.e2e --log-lines N`) each handler first writes N
lines to its attempt's log with ctx.log (shipped by the SDK: issue 53), ~60 bytes each.
"""

from __future__ import annotations

import os
import time

from cronwheel.client import JobContext, Worker

TYPES = ("e2e.w1", "e2e.w2", "e2e.w3")

LOG_LINES = int(os.environ.get("CRONWHEEL_E2E_LOG_LINES", "0"))
worker = Worker(os.environ.get("CRONWHEEL_ADDRESS", "127.0.0.1:7070"))
_out = open(os.environ.get("CRONWHEEL_E2E_RECORDS", os.devnull), "a", buffering=1)  # noqa: SIM115


async def record(ctx: JobContext) -> None:
    start = time.time()
    for i in range(LOG_LINES):
        ctx.log(f"line {i + 1} of {LOG_LINES} of {ctx.execution_id}")
    _out.write(f"{ctx.execution_id} {ctx.schedule_id or '-'} {ctx.scheduled_for.timestamp():.6f} {start:.6f} "
               f"{ctx.attempt}\n")


for _t in TYPES:
    worker.job(_t)(record)
