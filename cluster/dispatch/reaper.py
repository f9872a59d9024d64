"""The reaper: per owned partition, fenced, every interval_s.

- a run whose lease lapsed without heartbeat goes back to `queued` (it may run twice: the
  at-least-once contract), or to `dead`/`cancelled` when out of attempts or cancelled;
- a run past its per-job timeout fails as `timeout` (retried with backoff if attempts remain);
- retries whose backoff has passed become `queued`.

Dead letters raise a `dead_letter` event (alert). Requeued work wakes the dispatchers.
The dead man's switch lives here too: a schedule with `alert_if_no_success_within_s` and no
success in that window raises one `no_success_alert` event (cleared by its next success).
Not thread-safe: one task per node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from cronwheel.cluster.metrics import Metrics
from cronwheel.errors import StaleEpoch, Unavailable
from cronwheel.storage import PgStore
from cronwheel.storage.queries import q

log = logging.getLogger("cronwheel.cluster.dispatch.reaper")


class Reaper:
    def __init__(self, store: PgStore, owned: Callable[[], Iterable[tuple[int, int]]],
                 wake: Callable[[], None], interval_s: float = 1.0, retention_days: int = 30,
                 prune_every_s: float = 600.0, metrics: Metrics | None = None) -> None:
        self.metrics = metrics
        self.retention_days = retention_days
        self.prune_every_s = prune_every_s
        self.store = store
        self.owned = owned
        self.wake = wake
        self.interval_s = interval_s
        self.reaped = 0
        self.success_alerts = 0

    async def run(self) -> None:
        since_prune = self.prune_every_s
        while True:
            await asyncio.sleep(self.interval_s)
            since_prune += self.interval_s
            if since_prune >= self.prune_every_s:
                since_prune = 0.0
                try:  # retention of the audit log and ownership history (any node may do it)
                    await self.store.fetch_one("prune_history", {"days": self.retention_days})
                except Unavailable:
                    pass
            for p, epoch in list(self.owned()):
                try:
                    await self.reap(p, epoch)
                except StaleEpoch:
                    pass  # the partition moved on; the coordinator will hear of it
                except Unavailable as exc:
                    log.warning("reaper deferred", extra={"event": "reap_deferred", "error": str(exc)})
                    break

    async def reap(self, p: int, epoch: int) -> int:
        fence = {"partition": p, "epoch": epoch}
        async with self.store.fenced(p, epoch) as conn:
            changed = []
            for name in ("reap_expired", "reap_timed_out", "requeue_retries"):
                cur = await conn.execute(q(name), fence)
                changed.extend(await cur.fetchall())
            for row in changed:
                if len(row) > 2 and row[1] == "dead":
                    if self.metrics is not None:
                        self.metrics.dead_letters.inc()
                    await self.store.insert_event(
                        "dead_letter", tenant=row[3], schedule_id=row[2], execution_id=row[0], partition=p,
                        actor="reaper", alert=True, data={"error": "lease expired or timed out"}, conn=conn)
                if len(row) > 2 and row[1] in ("dead", "cancelled") and row[2] is not None:
                    # The run ahead of a buffered one (overlap buffer_*) ended here: release it.
                    await conn.execute(q("release_buffered"), {"schedule_id": row[2]})
            if changed:
                await conn.execute(q("notify_queued"), {"payload": "reaped"})
            cur = await conn.execute(q("dead_mans_switch"), fence)
            for sid, tenant, last_ok, within_s in await cur.fetchall():
                self.success_alerts += 1
                await self.store.insert_event(
                    "no_success_alert", tenant=tenant, schedule_id=sid, partition=p, actor="reaper", alert=True,
                    data={"last_success_at": last_ok.isoformat() if last_ok else None, "within_s": within_s},
                    conn=conn)
        if changed:
            self.reaped += len(changed)
            self.wake()
        return len(changed)
