"""The webhook sender: one task per node that fans events out to deliveries, claims due
deliveries and POSTs them.

Each pass fans pending events out to their deliveries (the outbox, storage/webhooks.py), then
claims as many due deliveries as the sender has free slots (`batch` in flight at most), owners
(tenants; '' for the cluster's own webhooks) taking turns and none holding more than
`per_tenant` slots, commits the claim, and only then sends, each request on its own thread. A
slot is released when its delivery ends, not when a round does: the loop wakes on every finished
delivery (or after `poll_s`) and claims again, so a slow receiver holds its own slots only. No
database connection or lock is held during a request, and the sender shares nothing with the
firing path but the connection pool, so a slow or dead receiver never delays firing.

Each request has a total deadline, `timeout_s`, enforced inside it (cronwheel/egress.py: every
socket read and write gets what remains), so a receiver trickling one byte at a time cannot hold
a slot longer. The request threads are daemon threads: a node stopping (SIGTERM) neither waits
for them nor joins them at exit. A request whose thread outlives its deadline (a resolver that
hangs) is abandoned: its delivery is a failed attempt, and the thread ends on its own.

Egress: the destination is checked when the connection is made (`EgressPolicy.resolve`: the
resolved address, and the connection goes to that address). A refused destination fails the
delivery at once (a policy, not a transient fault) with "refused by egress policy"; what the
tenant sees of any other failure is "delivery failed" and the status code; the detail (the
connection error, the reason phrase) goes to the node's log only.

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

Time is the injected clock's (claims, signatures, backoff, polls); a request's own deadline is
real time (it bounds real I/O). Not task-safe: one task per node.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Histogram

from cronwheel import egress
from cronwheel.clock import Clock
from cronwheel.cluster.dispatch.policy import decide_failure
from cronwheel.cluster.webhooks import payload
from cronwheel.cluster.webhooks.config import WebhookConfig
from cronwheel.cluster.webhooks.faults import FanOutFaults
from cronwheel.errors import Unavailable
from cronwheel.storage.webhooks import Claimed, Outcome, WebhooksPort

log = logging.getLogger("cronwheel.cluster.webhooks")

# One POST within a total deadline (seconds): the answer (status, log detail, refused or not).
Transport = Callable[[payload.Request, float], Awaitable[egress.Answer]]
ABANDON_GRACE_S = 1.0  # past a request's deadline, its thread is abandoned (a resolver that hangs)


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
        self.transport: Transport = transport or self._post
        self.sent = 0  # attempts made by this node (tests, status)
        self._inflight: dict[asyncio.Task[None], str] = {}  # delivery task -> its owner
        self.faults = FanOutFaults.from_env()  # test-only; off unless the environment names it

    async def _post(self, req: payload.Request, total_s: float) -> egress.Answer:
        """egress.post on a daemon thread of its own; abandoned if it outlives its deadline."""
        loop = asyncio.get_running_loop()
        done, answers = asyncio.Event(), list[egress.Answer]()
        policy = self.config.egress

        def settle(answer: egress.Answer) -> None:
            if not answers:
                answers.append(answer)
                done.set()

        def work() -> None:
            try:
                answer = egress.post(policy, req.url, req.body, req.headers, total_s)
            except Exception as exc:  # a bug in the request path fails this attempt, never the node
                answer = egress.Answer(None, f"{type(exc).__name__}: {exc}"[:500])
            try:
                loop.call_soon_threadsafe(settle, answer)
            except RuntimeError:
                pass  # the loop is closed: the node stopped meanwhile

        threading.Thread(target=work, name="webhook-post", daemon=True).start()
        if await self.clock.wait(done, total_s + ABANDON_GRACE_S):
            return answers[0]
        return egress.Answer(None, f"no answer within {total_s:g} s; the request's thread was abandoned")

    async def run(self) -> None:
        since_prune = 0.0
        try:
            while True:
                more = False
                try:
                    more = await self._pass()
                    if since_prune >= self.config.prune_every_s:
                        since_prune = 0.0
                        await self.port.prune(self.config.retention_days, self.clock.now())
                except Unavailable as exc:
                    log.warning("webhook round deferred", extra={"event": "webhook_deferred", "error": str(exc)})
                if not more:  # more may be due at once (a full claim or fan-out): go on, else wait
                    since_prune += await self._idle()
        finally:
            stopping = list(self._inflight)
            for t in stopping:
                t.cancel()  # their request threads are daemons: nothing waits for those
            await asyncio.gather(*stopping, return_exceptions=True)  # no orphan task

    async def round(self) -> int:
        """One pass, waiting for the deliveries it started (tests); the number claimed."""
        before = set(self._inflight)
        await self._pass()
        started = [t for t in self._inflight if t not in before]
        if started:
            await asyncio.gather(*started)
        return len(started)

    async def _pass(self) -> bool:
        """Fan out pending events, claim what the free slots allow and start sending it; True
        when more may be waiting (a full fan-out, or every free slot filled)."""
        cfg = self.config
        events = 0 if self.faults.holding() else (await self.port.fan_out(cfg.fan_out_batch))[0]
        free = cfg.batch - len(self._inflight)
        if free <= 0:
            return False
        busy = collections.Counter(self._inflight.values())
        claimed = await self.port.claim(self.node_id, self.clock.now(), cfg.lease_s, free, cfg.per_tenant, busy)
        for c in claimed:
            task = asyncio.create_task(self._deliver(c), name=f"webhook-delivery-{c.id}")
            self._inflight[task] = c.owner
            task.add_done_callback(self._finished)
        return events >= cfg.fan_out_batch or (0 < len(claimed) == free)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.pop(task, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("webhook delivery task failed", exc_info=exc, extra={"event": "webhook_task_failed"})

    async def _idle(self) -> float:
        """Wait `poll_s`, or less when a delivery ends first (its slot is free); the poll waited."""
        sleep = asyncio.create_task(self.clock.sleep(self.config.poll_s), name="webhook-poll")
        try:
            await asyncio.wait([sleep, *self._inflight], return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
        return self.config.poll_s if sleep.done() and not sleep.cancelled() else 0.0

    async def _deliver(self, c: Claimed) -> None:
        if c.event is None:
            await self._record(c, "failed", None, None, "the event is no longer in the log (retention)")
            return
        try:
            body = payload.body(c.id, c.webhook_id, c.event)
            req = payload.request(c.url, c.secret, c.id, c.attempt, c.event["kind"], body, self.clock.now_ts())
        except Exception as exc:  # a delivery that cannot be built fails alone, never the node
            log.error("webhook delivery could not be built", exc_info=exc,
                      extra={"event": "webhook_build_failed", "delivery_id": str(c.id)})
            await self._record(c, "failed", None, None, "delivery failed: the request could not be built")
            return
        t0 = self.clock.monotonic()
        answer = await self.transport(req, self.config.timeout_s)
        self.metrics.request_s.observe(self.clock.monotonic() - t0)
        self.sent += 1
        status, error = answer.status, answer.tenant_error
        if error is None:
            self.metrics.lag_s.observe(max(0.0, (self.clock.now() - c.event["at"]).total_seconds()))
            await self._record(c, "delivered", None, status, None)
            return
        cfg = self.config
        d = decide_failure(attempt=c.attempt, max_attempts=cfg.max_attempts, retryable=not answer.refused,
                           cancel_requested=False,
                           error_type=f"http_{status}" if status is not None else "network",
                           initial_s=cfg.backoff_initial_s, multiplier=cfg.backoff_multiplier,
                           max_s=cfg.backoff_max_s, rand=self.rng.random())
        log.warning("webhook delivery attempt failed",  # the detail is for operators; the tenant sees `error`
                    extra={"event": "webhook_attempt_failed", "delivery_id": str(c.id), "attempt": c.attempt,
                           "status": status, "error": answer.detail or error, "refused": answer.refused,
                           "next": d.state})
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
