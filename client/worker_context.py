"""What a handler sees (JobContext) and what the worker keeps per leased run (Run), and the two
exceptions handlers meet. Only the worker's event loop touches these."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronwheel.client.worker_policy import StopReason

if TYPE_CHECKING:
    from cronwheel.client.worker import Worker
    from cronwheel.client.worker_logs import AttemptLog


class NonRetryable(Exception):
    """Raise from a handler when another attempt cannot succeed (bad input, ...)."""


class JobFailed(Exception):
    """Raise from a handler to fail the attempt with exactly this error (no traceback), retried
    by the retry policy when `retryable`, no sooner than `retry_after_s` from now when given
    (the HTTP doer's Retry-After)."""

    def __init__(self, error: str, *, retryable: bool = True, retry_after_s: float | None = None) -> None:
        super().__init__(error)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class Stale(Exception):
    """The execution was leased again or finished elsewhere: stop working on it."""


@dataclass
class JobContext:
    execution_id: str
    schedule_id: str | None
    type: str
    tenant: str
    payload: Any
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    fencing_token: int
    checkpoint_value: Any
    deadline: datetime | None
    # The W3C traceparent of this run's "lease" span when the node traces (None: not traced). The
    # worker's "run" span is its child and is current while the handler runs, so spans the handler
    # starts join the execution's trace; `cronwheel.tracing.span_context(ctx.trace)` gives the
    # SpanContext, e.g. to propagate it by hand.
    trace: str | None = None
    # When the node leased this attempt (its claim, the node's clock; None from a node that does
    # not say): `started_at - scheduled_for` is how long the run waited to start.
    started_at: datetime | None = None
    # An HTTP target's run (type "http"): the target as JSON (cronwheel/http_target.py); else None.
    target: str | None = None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    stop_reason: str | None = None  # why cancelled is set: "cancel", "timeout", "shutdown", "stale"
    _worker: Worker | None = field(default=None, repr=False)
    _log: AttemptLog | None = field(default=None, repr=False)  # this attempt's log (client/worker_logs.py)

    async def checkpoint(self, value: Any) -> None:
        """Save progress; a later attempt receives it as `checkpoint_value`."""
        assert self._worker is not None
        await self._worker._checkpoint(self, value)
        self.checkpoint_value = value

    def log(self, message: str, level: str = "INFO") -> None:
        """Add a line to this attempt's log (as a `logging` record inside the handler would):
        never blocks, shipped within about 0.25 s (client/worker_logs.py). Any thread."""
        if self._log is not None:
            self._log.write(str(level).upper(), "", str(message))


@dataclass(eq=False)
class Run:
    """A leased run in this worker. Only the event loop touches it."""

    ctx: JobContext
    lease_until: float                    # monotonic, renewed by heartbeats
    deadline: float | None                # monotonic end of the attempt's timeout: the handler is cancelled
    warn_at: float | None                 # when ctx.cancelled is set before it (None once told)
    timeout_s: float | None
    task: asyncio.Task[Any] | None = None      # the handler's own task: a run is one task...
    watch: asyncio.Task[None] | None = None    # ...plus a watchdog once it has a timeout or was told to stop
    finished: bool = False                     # reported and its slot freed (Worker._finish)
    reason: StopReason | None = None
    kill_at: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # wakes the watchdog
    span: Any = None  # the "run" span (tracing on and the lease carried a trace context)
