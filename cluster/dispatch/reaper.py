"""The reaper: per owned partition, fenced, every interval_s of its clock.

- a run whose lease lapsed without heartbeat goes back to `queued` (it may run twice: the
  at-least-once contract), or to `dead`/`cancelled` when out of attempts or cancelled;
- a run past its per-job timeout fails as `timeout` (retried with backoff if attempts remain);
- retries whose backoff has passed become `queued`.

The next state and delay of every reaped run come from the one retry policy
(`policy.decide_lapsed_lease` / `decide_timeout`, the same code FailExecution uses); the SQL only
selects the candidates and applies each decision (River's rescuer does the same with the
client's retry policy). Time is the injected clock's: every cut-off and every time written.

One bad row cannot stop the reaper: each run is decided and written on its own (a savepoint per
row); a row that fails is logged (`event=reap_row_failed`), counted
(`cronwheel_reap_failures_total`) and left for the next round, and the rest of the round
goes on. A round that fails as a whole for a partition is logged (`event=reap_failed`) and
counted too; only losing the partition (StaleEpoch) or PostgreSQL (Unavailable) ends a round
early. So a poisoned row neither kills this node's task group nor the next owner's.

Dead letters raise a `dead_letter` event (alert). Requeued work wakes the dispatchers.
The dead man's switch lives here too: a schedule with `alert_if_no_success_within_s` and no
success in that window raises one `no_success_alert` event (cleared by its next success).
Not task-safe: one task per node.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from cronwheel.clock import Clock
from cronwheel.cluster.dispatch.policy import RetryDecision, decide_lapsed_lease, decide_timeout
from cronwheel.cluster.metrics import Metrics
from cronwheel.errors import StaleEpoch, Unavailable
from cronwheel.storage import PgStore
from cronwheel.storage.dispatch import Conn, ReapApply, ReapCandidate, Reaped

log = logging.getLogger("cronwheel.cluster.dispatch.reaper")


def decide(c: ReapCandidate, rand: float) -> RetryDecision:
    """The retry policy's verdict on one reaped run."""
    if c.kind == "expired":
        return decide_lapsed_lease(attempt=c.attempt, max_attempts=c.max_attempts,
                                   cancel_requested=c.cancel_requested)
    return decide_timeout(attempt=c.attempt, max_attempts=c.max_attempts, cancel_requested=c.cancel_requested,
                          timeout_s=c.timeout_s or 0.0, initial_s=c.retry_initial_s,
                          multiplier=c.retry_multiplier, max_s=c.retry_max_s, rand=rand)


def application(c: ReapCandidate, d: RetryDecision, partition: int, epoch: int, now: datetime) -> ReapApply:
    """The row write that carries out decision `d` at `now`."""
    lapsed = c.kind == "expired"
    return ReapApply(
        id=c.id, partition=partition, epoch=epoch, state=d.state, reason=d.reason,
        error="lease expired" if lapsed else "timeout", error_type="lease_expired" if lapsed else "timeout",
        run_at=now + timedelta(seconds=d.delay_s) if d.state == "retry_scheduled" else None,
        queued_at=now if d.state == "queued" else None, finished_at=now if d.terminal else None)


class Reaper:
    def __init__(self, store: PgStore, owned: Callable[[], Iterable[tuple[int, int]]],
                 wake: Callable[[], None], *, clock: Clock, interval_s: float = 1.0, retention_days: int = 30,
                 prune_every_s: float = 600.0, metrics: Metrics | None = None,
                 rng: random.Random | None = None) -> None:
        self.metrics = metrics
        self.retention_days = retention_days
        self.prune_every_s = prune_every_s
        self.store = store
        self.port = store.dispatch
        self.owned = owned
        self.wake = wake
        self.clock = clock
        self.interval_s = interval_s
        self.rng = rng or random.Random()
        self.reaped = 0
        self.success_alerts = 0
        self.failures = 0  # rows and rounds that could not be processed
        # Set after every round (a test clears it, advances the clock and waits on it).
        self.round_done = asyncio.Event()

    async def run(self) -> None:
        since_prune = self.prune_every_s
        while True:
            await self.clock.sleep(self.interval_s)
            since_prune += self.interval_s
            if since_prune >= self.prune_every_s:
                since_prune = 0.0
                try:  # retention of the audit log and ownership history (any node may do it)
                    await self.port.prune_history(self.retention_days, self.clock.now())
                except Unavailable:
                    pass
            await self.round()

    async def round(self) -> None:
        """Reap every owned partition once: one read finds the partitions with work, and only
        those get their fenced transaction (a node owning 64 idle partitions made 64 every second)."""
        owned = list(self.owned())
        try:
            due = await self.port.reap_due_partitions([p for p, _ in owned], self.clock.now())
        except Unavailable as exc:
            log.warning("reaper deferred", extra={"event": "reap_deferred", "error": str(exc)})
            self.round_done.set()
            return
        except Exception as exc:  # the read failing must not end the node (logged, counted; next round)
            self._count_failure()
            log.error("reap round failed", exc_info=exc, extra={"event": "reap_failed", "error": str(exc)})
            self.round_done.set()
            return
        for p, epoch in owned:
            if p not in due:
                continue
            try:
                await self.reap(p, epoch)
            except StaleEpoch:
                pass  # the partition moved on; the coordinator will hear of it
            except Unavailable as exc:
                log.warning("reaper deferred", extra={"event": "reap_deferred", "error": str(exc)})
                break
            except Exception as exc:  # one partition's failure must not end the node (logged, counted)
                self._count_failure()
                log.error("reap round failed", exc_info=exc,
                          extra={"event": "reap_failed", "partition": p, "epoch": epoch, "error": str(exc)})
        self.round_done.set()

    def _count_failure(self) -> None:
        self.failures += 1
        if self.metrics is not None:
            self.metrics.reap_failures.inc()

    async def reap(self, p: int, epoch: int) -> int:
        now = self.clock.now()
        async with self.store.fenced(p, epoch) as conn:
            changed: list[Reaped] = []
            released: list[str] = []  # the job types of buffered runs released (overlap buffer_*)
            for c in await self.port.reap_candidates(conn, p, epoch, now):
                row = await self._reap_one(conn, c, p, epoch, now, released)
                if row is not None:
                    changed.append(row)
            requeued = await self.port.requeue_retries(conn, p, epoch, now)
            if changed or requeued:
                await self.port.notify_queued(conn, "reaped")
            for alert in await self.port.dead_mans_switch(conn, p, epoch, now):
                self.success_alerts += 1
                await self.store.insert_event(
                    "no_success_alert", tenant=alert.tenant, schedule_id=alert.schedule_id, partition=p,
                    actor="reaper", alert=True,
                    data={"last_success_at": alert.last_success_at.isoformat() if alert.last_success_at else None,
                          "within_s": alert.within_s},
                    conn=conn)
        if (requeued or released) and self.metrics is not None:  # committed: counted
            self.metrics.executions_entered(("queued", job_type) for job_type in (*requeued, *released))
        n = len(changed) + len(requeued)
        if n:
            self.reaped += n
            self.wake()
        return n

    async def _reap_one(self, conn: Conn, c: ReapCandidate, p: int, epoch: int, now: datetime,
                        released: list[str]) -> Reaped | None:
        """Decide and write one run; a failure is this row's alone (its savepoint is undone). The
        job type of a buffered run it released goes to `released` (counted after commit)."""
        try:
            d = decide(c, self.rng.random())
            freed: str | None = None
            async with self.port.savepoint(conn):
                a = application(c, d, p, epoch, now)
                row = await self.port.reap_apply(conn, a)
                if row is None:
                    return None
                if row.state == "dead":
                    await self.store.insert_event(
                        "dead_letter", tenant=row.tenant, schedule_id=row.schedule_id, execution_id=row.id,
                        partition=p, actor="reaper", alert=True,
                        data={"error": "lease expired or timed out", "attempts": c.attempt}, conn=conn)
                if row.state in ("dead", "cancelled") and row.schedule_id is not None:
                    # The run ahead of a buffered one (overlap buffer_*) ended here: release it.
                    freed = await self.port.release_buffered(conn, row.schedule_id, now)
            if freed is not None:
                released.append(freed)
            if self.metrics is not None:
                self.metrics.record_outcome(row.state, a.error_type or "", row.type)
            return row
        except (StaleEpoch, Unavailable):
            raise
        except Exception as exc:  # a bad row is logged, counted and skipped; the round goes on
            self._count_failure()
            log.error("reap of one execution failed", exc_info=exc,
                      extra={"event": "reap_row_failed", "partition": p, "execution_id": str(c.id),
                             "kind": c.kind, "attempt": c.attempt, "error": str(exc)})
            return None
