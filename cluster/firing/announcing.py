"""After a write: the fire stats and lag metrics, the trace spans (only while tracing is on),
and the NOTIFY announcer that tells other nodes' workers when the queued runs are claimable.

One NOTIFY goes out after commit for however many batches committed meanwhile (for the soonest
of them); a NOTIFY that meets PostgreSQL away is dropped, and other nodes' fallback poll picks
the runs up. A failure to store trace contexts costs the traces, never the fire.
"""

from __future__ import annotations

import itertools

from cronwheel import tracing
from cronwheel.cluster.firing.planning import utc
from cronwheel.cluster.firing.state import FirerBase, log
from cronwheel.cluster.metrics import observe_many
from cronwheel.errors import Unavailable
from cronwheel.storage import FireBatchParams, FireBatchResult
from cronwheel.storage.notifications import queued_at_payload


class Announcing(FirerBase):
    """The firer's after-write layer. Not thread-safe: the node's event loop only."""

    async def _trace_fired(self, params: FireBatchParams, res: FireBatchResult, t0: int) -> None:
        """Tracing only: a root "fire" span per cron tick the batch wrote (from before the write
        to now), its traceparent stored on the tick's execution (one UPDATE, before the ticks are
        announced to workers). A failure here costs the traces, never the fire."""
        ticks = [(f.schedule_id, f.scheduled_for.timestamp()) for f in res.fired if f.schedule_id is not None]
        if params.plain is not None and res.plain_inserted:
            ticks.extend(zip(params.plain.schedule_ids, params.plain.ticks, strict=True))
        if not ticks:
            return
        stored = []
        for sid, tick in ticks:
            tp = tracing.record_span("fire", t0, root=True, attributes={
                "cronwheel.partition": params.partition, "cronwheel.schedule_id": str(sid),
                "cronwheel.scheduled_for": utc(tick).isoformat()})
            if tp is not None:
                stored.append((sid, tick, tp))
        try:
            await self.firing.set_tick_trace_contexts(stored)
        except Exception as exc:  # noqa: BLE001 - tracing must never break firing
            log.warning("trace contexts not stored", extra={"event": "trace_store_failed", "error": str(exc)})

    def _written(self, params: FireBatchParams, res: FireBatchResult) -> None:
        self.stats.fired += len(res.fired) + res.plain_inserted
        now = self.clock.now_ts()
        lags = [max(0.0, now - f.run_at.timestamp()) for f in res.fired]  # queued ahead: 0
        if params.plain is not None and res.plain_inserted:
            lags.extend(max(0.0, now - run_at) for run_at in params.plain.run_ats)
        self.recent_lags.extend(lags)
        if self.metrics is not None:
            observe_many(self.metrics.fire_lag, lags)
            self.metrics.fired.inc(len(res.fired) + res.plain_inserted)
            moved = itertools.chain(((f.state, f.type) for f in res.fired), (("cancelled", t) for t in res.replaced))
            self.metrics.executions_entered(moved, res.plain_entered)
        self.stats.duplicates += res.duplicates
        # When what this batch queued is claimable: its soonest run_at (runs queued ahead of it,
        # queue_ahead_s), or now; waiting calls are woken then, not sooner.
        queued = [f.run_at.timestamp() for f in res.fired if f.state == "queued"]
        if res.plain_inserted and params.plain is not None and params.plain.run_ats:
            queued.append(min(params.plain.run_ats))  # some may be quota-skipped: a wake-up too many
        if queued:
            soonest = min(queued)
            at = soonest if soonest > now else None
            self._announce(soonest)
            if self.on_fired is not None:
                self.on_fired(at)

    def _announce(self, at: float) -> None:
        """Tell other nodes' workers that runs were queued, claimable from `at`: one NOTIFY after
        commit for however many batches committed meanwhile, for the soonest of them (this
        node's own workers are woken by on_fired). A call woken for the soonest that finds later
        runs not yet due sleeps until they are by itself (`claim_wait`)."""
        if self._announce_at is None or at < self._announce_at:
            self._announce_at = at
        if not self._announcing:
            self._announcing = True
            self._spawn(self._announce_loop, "firer-announce")

    async def _announce_loop(self) -> None:
        try:
            while self._announce_at is not None:
                at, self._announce_at = self._announce_at, None
                payload = "fired" if at <= self.clock.now_ts() else queued_at_payload(at)
                try:
                    await self.firing.notify_queued(payload)
                except Unavailable as exc:  # other nodes' fallback poll picks the runs up
                    log.warning("notify deferred", extra={"event": "notify_deferred", "error": str(exc)})
                    return
        finally:
            self._announcing = False

    def lag_percentiles(self) -> tuple[float, float] | None:
        """(p50, p99) fire lag in seconds over the last 10,000 fires, or None before any."""
        if not self.recent_lags:
            return None
        xs = sorted(self.recent_lags)
        return xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.99))]
