"""The webhook sender: one task per node that claims due deliveries and POSTs them.

Each round claims up to `batch` due deliveries (storage/webhooks.py: SKIP LOCKED, a lease of
`lease_s`, the claim's attempt number as its token), commits the claim, and only then sends,
every request of the round at once on the sender's own threads, each with `timeout_s`. No
database connection or lock is held during a request, and the sender shares nothing with the
firing path but the connection pool (a claim and an outcome are one short statement each), so
a slow or dead receiver never delays firing.

Outcomes: a 2xx answer makes the delivery `delivered`; anything else (another status, a
connection error, a timeout) is a failed attempt, and the one retry policy
(`cluster/dispatch/policy.decide_failure`, full-jitter exponential backoff) says when to try
again, or, after `max_attempts`, to give up (`failed`). The outcome is written only while the
row still carries this claim's attempt number; a node that dies mid-request writes nothing, so
the row is due again when its lease lapses and another node (or this one, restarted) sends it
again with the same delivery id: at-least-once, deduplicated by receivers on that id.

Metrics (`WebhookMetrics`, on the node's registry): cronwheel_webhook_attempts_total{outcome}
(delivered | retry | failed: every attempt's outcome as decided, also when the outcome could not be
recorded), cronwheel_webhook_request_seconds (the POST) and cronwheel_webhook_delivery_lag_seconds
(event recorded -> delivered: how late an alert reaches its receiver).

Time is the injected clock's (claims, signatures, backoff). Not task-safe: one task per node.
"""

from __future__ import annotations

import asyncio
import logging
import random
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Histogram

from cronwheel.clock import Clock
from cronwheel.cluster.dispatch.policy import decide_failure
from cronwheel.cluster.webhooks import payload
from cronwheel.errors import Unavailable
from cronwheel.storage.webhooks import Claimed, Outcome, WebhooksPort

log = logging.getLogger("cronwheel.cluster.webhooks")

# (status, error): status None when no HTTP answer came (error says why).
Transport = Callable[[payload.Request, float], Awaitable[tuple[int | None, str | None]]]


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """The sender's tunables. The backoff before retry n is uniform in
    [0, min(backoff_max_s, backoff_initial_s * backoff_multiplier^(n-1))] (full jitter)."""

    poll_s: float = 1.0  # pause between rounds when nothing was due
    lease_s: float = 60.0  # a claimed delivery is due again after this (its sender died)
    timeout_s: float = 10.0  # per request (connect, and each read of the answer)
    max_attempts: int = 12
    backoff_initial_s: float = 10.0
    backoff_multiplier: float = 2.0
    backoff_max_s: float = 3600.0
    batch: int = 16  # deliveries claimed, and requests in flight, per round
    retention_days: int = 30  # finished deliveries are pruned after this
    prune_every_s: float = 600.0

    def validate(self) -> WebhookConfig:
        if not 0 < self.poll_s <= 60:
            raise ValueError(f"webhooks: poll_s must be in (0, 60], got {self.poll_s}")
        if not 0 < self.timeout_s < self.lease_s:
            raise ValueError(f"webhooks: need 0 < timeout_s ({self.timeout_s}) < lease_s ({self.lease_s}): "
                             "a lease shorter than a request would send it twice")
        if not 1 <= self.max_attempts <= 1000:
            raise ValueError(f"webhooks: max_attempts must be 1..1000, got {self.max_attempts}")
        if self.backoff_initial_s < 0 or self.backoff_max_s < self.backoff_initial_s or self.backoff_multiplier < 1:
            raise ValueError("webhooks: need 0 <= backoff_initial_s <= backoff_max_s and backoff_multiplier >= 1")
        if not 1 <= self.batch <= 256:
            raise ValueError(f"webhooks: batch must be 1..256, got {self.batch}")
        if self.retention_days < 1 or self.prune_every_s <= 0:
            raise ValueError("webhooks: retention_days >= 1 and prune_every_s > 0 are required")
        return self


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a 3xx is the receiver's answer, not somewhere else to send the event


_OPENER = urllib.request.build_opener(_NoRedirect)


def post_blocking(req: payload.Request, timeout_s: float) -> tuple[int | None, str | None]:
    """POST with the standard library (no extra dependency); runs on the sender's threads."""
    r = urllib.request.Request(req.url, data=req.body, headers=dict(req.headers), method="POST")
    try:
        with _OPENER.open(r, timeout=timeout_s) as resp:
            resp.read(65536)
            return int(resp.status), None
    except urllib.error.HTTPError as exc:
        return int(exc.code), f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return None, f"{type(reason).__name__}: {reason}"[:500]


REQUEST_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
LAG_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600, 21600)
OUTCOMES = ("delivered", "retry", "failed")  # of one attempt


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.attempts = Counter("cronwheel_webhook_attempts", "Webhook delivery attempts by outcome", ["outcome"],
                                registry=r)
        for o in OUTCOMES:  # every series exists from the start: rate() and alerts see a 0, not nothing
            self.attempts.labels(o)
        self.request_s = Histogram("cronwheel_webhook_request_seconds", "Duration of one webhook POST",
                                   buckets=REQUEST_BUCKETS, registry=r)
        self.lag_s = Histogram("cronwheel_webhook_delivery_lag_seconds", "Event recorded to webhook delivered",
                               buckets=LAG_BUCKETS, registry=r)


class WebhookSender:
    def __init__(self, port: WebhooksPort, node_id: str, clock: Clock, config: WebhookConfig,
                 transport: Transport | None = None, rng: random.Random | None = None,
                 metrics: WebhookMetrics | None = None) -> None:
        self.metrics = metrics or WebhookMetrics()
        self.port = port
        self.node_id = node_id
        self.clock = clock
        self.config = config.validate()
        self.rng = rng or random.Random()
        self._pool = ThreadPoolExecutor(max_workers=config.batch, thread_name_prefix="webhook")
        self.transport: Transport = transport or self._post
        self.sent = 0  # attempts made by this node (tests, status)

    async def _post(self, req: payload.Request, timeout_s: float) -> tuple[int | None, str | None]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, post_blocking, req, timeout_s)

    async def run(self) -> None:
        since_prune = 0.0
        try:
            while True:
                try:
                    n = await self.round()
                    if since_prune >= self.config.prune_every_s:
                        since_prune = 0.0
                        await self.port.prune(self.config.retention_days, self.clock.now())
                except Unavailable as exc:
                    log.warning("webhook round deferred", extra={"event": "webhook_deferred", "error": str(exc)})
                    n = 0
                if n < self.config.batch:  # a full round: more may be due, go on at once
                    await self.clock.sleep(self.config.poll_s)
                    since_prune += self.config.poll_s
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def round(self) -> int:
        """Claim the due deliveries and send them all; the number claimed."""
        claimed = await self.port.claim(self.node_id, self.clock.now(), self.config.lease_s, self.config.batch)
        if claimed:
            await asyncio.gather(*(self._deliver(c) for c in claimed))
        return len(claimed)

    async def _deliver(self, c: Claimed) -> None:
        if c.event is None:
            status, error = None, "the event is no longer in the log (retention): nothing to send"
            await self._record(c, "failed", None, status, error)
            return
        try:
            body = payload.body(c.id, c.webhook_id, c.event)
            req = payload.request(c.url, c.secret, c.id, c.attempt, c.event["kind"], body, self.clock.now_ts())
        except Exception as exc:  # a delivery that cannot be built fails alone, never the node
            log.error("webhook delivery could not be built", exc_info=exc,
                      extra={"event": "webhook_build_failed", "delivery_id": str(c.id)})
            await self._record(c, "failed", None, None, f"cannot build the request: {exc}"[:500])
            return
        t0 = self.clock.monotonic()
        status, error = await self.transport(req, self.config.timeout_s)
        self.metrics.request_s.observe(self.clock.monotonic() - t0)
        self.sent += 1
        if status is not None and 200 <= status < 300:
            self.metrics.lag_s.observe(max(0.0, (self.clock.now() - c.event["at"]).total_seconds()))
            await self._record(c, "delivered", None, status, None)
            return
        cfg = self.config
        d = decide_failure(attempt=c.attempt, max_attempts=cfg.max_attempts, retryable=True, cancel_requested=False,
                           error_type=f"http_{status}" if status is not None else "network",
                           initial_s=cfg.backoff_initial_s, multiplier=cfg.backoff_multiplier,
                           max_s=cfg.backoff_max_s, rand=self.rng.random())
        error = error or f"HTTP {status}"
        log.warning("webhook delivery attempt failed",
                    extra={"event": "webhook_attempt_failed", "delivery_id": str(c.id), "attempt": c.attempt,
                           "status": status, "error": error, "next": d.state})
        if d.state == "retry_scheduled":
            await self._record(c, "pending", self.clock.now() + timedelta(seconds=d.delay_s), status, error)
        else:
            await self._record(c, "failed", None, status, error)

    async def _record(self, c: Claimed, state: str, next_at: datetime | None, status: int | None,
                      error: str | None) -> None:
        self.metrics.attempts.labels("retry" if state == "pending" else state).inc()
        o = Outcome(id=c.id, attempt=c.attempt, state=state, next_attempt_at=next_at,
                    status=status, error=error, now=self.clock.now())
        try:
            if not await self.port.record(o):
                log.info("webhook outcome superseded", extra={"event": "webhook_superseded", "delivery_id": str(c.id)})
        except Unavailable as exc:  # the lease lapses and the delivery is sent again: at-least-once
            log.warning("webhook outcome not recorded", extra={"event": "webhook_record_failed",
                                                               "delivery_id": str(c.id), "error": str(exc)})
