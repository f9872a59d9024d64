"""Claiming and finishing executions for workers (the logic behind DispatchService).

Claim: priorities are polled in a weighted order (critical first most of the time, bulk first
sometimes, so bulk is slow but never starved); within a priority, tenants are interleaved
round-robin and capped by their free concurrency; the runs are locked `FOR UPDATE SKIP LOCKED`
where they are read and leased in the same statement (`claim`): attempt + 1, fencing token + 1.
A claim first takes transaction-scoped advisory locks on the tenants it may take from
(`claim_lock_tenants`), so claims for one tenant never overlap anywhere in the cluster and its
concurrency cap is exact; within a node, claims run one at a time.
Waiting workers long-poll: they are woken by `wake()` (NOTIFY cronwheel_queued from any node,
or this node's own fire batches) rather than by fixed polling; a slow fallback poll covers
missed notifications.

Every call that carries a token is checked against the execution's current token, owner and
state in the same statement; a mismatch changes nothing and raises StaleFencingToken.

Concurrency: task-safe; all state is in PostgreSQL except the wake-up event.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from cronwheel.clock import Clock
from cronwheel.cluster.dispatch.policy import PriorityWeights, decide_failure, priority_order
from cronwheel.cluster.metrics import Metrics
from cronwheel.errors import FailedPrecondition, InvalidArgument, NotFound, StaleFencingToken
from cronwheel.storage import PgStore
from cronwheel.storage.queries import q

MAX_CHECKPOINT_BYTES = 1024 * 1024
MAX_RESULT_BYTES = 256 * 1024
TERMINAL = ("succeeded", "failed", "dead", "cancelled")


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    weights: PriorityWeights = PriorityWeights()
    fallback_poll_s: float = 1.0
    max_lease_s: float = 3600.0
    min_lease_s: float = 1.0
    max_wait_s: float = 60.0
    max_count: int = 100

    def validate(self) -> DispatchConfig:
        self.weights.validate()
        return self


class Leased(NamedTuple):
    """One leased run as `claim` returns it: ids, JSON as text, times as epoch seconds."""

    id: str
    schedule_id: str | None
    tenant: str
    type: str
    payload: str
    scheduled_for: float
    run_at: float
    attempt: int
    max_attempts: int
    fencing_token: int
    checkpoint: str | None
    lease_expires: float
    timeout_s: float | None
    priority: str
    trigger: str
    started_at: float


@dataclass(frozen=True, slots=True)
class Outcome:
    state: str
    run_at: Any
    attempt: int
    max_attempts: int


def _json_size(field: str, value: str, limit: int) -> Any:
    if len(value.encode()) > limit:
        raise InvalidArgument(field, f"must be at most {limit} bytes, got {len(value.encode())}")
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise InvalidArgument(field, f"must be JSON: {exc}") from None


class Dispatcher:
    def __init__(self, store: PgStore, clock: Clock, config: DispatchConfig | None = None,
                 rng: random.Random | None = None, metrics: Metrics | None = None) -> None:
        self.metrics = metrics
        self.store = store
        self.clock = clock
        self.config = (config or DispatchConfig()).validate()
        self.rng = rng or random.Random()
        self._wakeup = asyncio.Event()
        # One claim at a time per node. Claims that share a tenant queue on its advisory lock
        # anyway; waiting here instead keeps them from holding pool connections (which firing
        # needs) while they wait.
        self._claiming = asyncio.Lock()

    def wake(self) -> None:
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    def check_lease(self, lease_s: float, field: str = "lease_duration") -> float:
        if not self.config.min_lease_s <= lease_s <= self.config.max_lease_s:
            raise InvalidArgument(field, f"must be between {self.config.min_lease_s:g} s and "
                                         f"{self.config.max_lease_s:g} s, got {lease_s:g} s")
        return lease_s

    async def lease(self, worker: str, types: list[str], max_count: int, lease_s: float,
                    wait_s: float, tenant: str | None = None) -> list[Leased]:
        """Up to max_count runs (of `tenant` only, for a tenant's worker; None: any tenant)."""
        if not worker.strip():
            raise InvalidArgument("worker_id", "is required")
        if not 1 <= max_count <= self.config.max_count:
            raise InvalidArgument("max_count", f"must be 1..{self.config.max_count}, got {max_count}")
        if not 0 <= wait_s <= self.config.max_wait_s:
            raise InvalidArgument("wait_timeout", f"must be 0..{self.config.max_wait_s:g} s, got {wait_s:g}")
        self.check_lease(lease_s)
        deadline = self.clock.monotonic() + wait_s
        while True:
            waiter = self._wakeup  # taken before the claim, so a wake-up during it is not lost
            rows = await self._claim_once(worker, types or None, max_count, lease_s, tenant)
            left = deadline - self.clock.monotonic()
            if rows or left <= 0:
                return rows
            try:
                await asyncio.wait_for(waiter.wait(), min(left, self.config.fallback_poll_s))
            except TimeoutError:
                pass

    async def _claim_once(self, worker: str, types: list[str] | None, max_count: int,
                          lease_s: float, tenant: str | None) -> list[Leased]:
        order = priority_order(self.config.weights, self.rng.random())
        async with self._claiming, self.store.transaction() as conn:
            await conn.execute(q("claim_lock_tenants"), {"tenant": tenant})  # caps hold across nodes
            cur = await conn.execute(q("claim"), {"priorities": list(order), "types": types, "limit": max_count,
                                                  "tenant": tenant, "worker": worker, "lease_s": lease_s})
            out = [Leased._make(r) for r in await cur.fetchall()]
        if self.metrics is not None:
            for r in out:
                self.metrics.start_lag.observe(r.started_at - r.run_at)
        return out

    async def _explain_mismatch(self, conn: Any, ident: uuid.UUID, token: int, worker: str,
                                tenant: str | None) -> Exception:
        cur = await conn.execute(q("execution_token_state"), {"id": ident, "tenant": tenant})
        row = await cur.fetchone()
        if row is None:
            return NotFound("execution", ident)
        current, owner, state = int(row[0]), row[1], row[2]
        if current != token:
            return StaleFencingToken(ident, token, current)
        if state != "running":
            return _not_running(ident, state)
        return _not_running(ident, f"leased by another worker ({owner})")

    async def heartbeat(self, ident: uuid.UUID, token: int, worker: str, lease_s: float,
                        tenant: str | None = None) -> tuple[Any, bool]:
        self.check_lease(lease_s, "lease_extension")
        async with self.store.transaction() as conn:
            cur = await conn.execute(q("heartbeat"), {"id": ident, "token": token, "worker": worker,
                                                      "lease_s": lease_s, "tenant": tenant})
            row = await cur.fetchone()
            if row is None:
                raise await self._explain_mismatch(conn, ident, token, worker, tenant)
            return row[0], bool(row[1])

    async def checkpoint(self, ident: uuid.UUID, token: int, worker: str, checkpoint_json: str,
                         tenant: str | None = None) -> bool:
        value = _json_size("checkpoint_json", checkpoint_json, MAX_CHECKPOINT_BYTES)
        async with self.store.transaction() as conn:
            cur = await conn.execute(q("checkpoint"), {"id": ident, "token": token, "worker": worker,
                                                       "checkpoint": Jsonb(value), "tenant": tenant})
            row = await cur.fetchone()
            if row is None:
                raise await self._explain_mismatch(conn, ident, token, worker, tenant)
            return bool(row[0])

    async def complete(self, ident: uuid.UUID, token: int, worker: str, result_json: str,
                       tenant: str | None = None) -> Outcome:
        result = _json_size("result_json", result_json, MAX_RESULT_BYTES)
        return await self._finish(ident, token, worker, tenant, succeeded=True, result=result)

    async def complete_many(self, worker: str, items: list[tuple[uuid.UUID, int, str]],
                            tenant: str | None = None) -> list[Outcome | Exception]:
        """Succeed many runs in one transaction; each item is judged as `complete` would judge it."""
        if not 1 <= len(items) <= 1000:
            raise InvalidArgument("items", f"must hold 1..1000 completions, got {len(items)}")
        results: list[Any] = []
        ok_items: list[tuple[uuid.UUID, int, Any]] = []
        for ident, token, result_json in items:
            try:
                ok_items.append((ident, token, _json_size("result_json", result_json, MAX_RESULT_BYTES)))
                results.append(None)
            except InvalidArgument as exc:
                results.append(exc)
        done: set[uuid.UUID] = set()
        if ok_items:
            async with self.store.transaction() as conn:
                cur = await conn.execute(q("complete_batch"), {
                    "worker": worker, "tenant": tenant, "ids": [i for i, _, _ in ok_items],
                    "tokens": [t for _, t, _ in ok_items],
                    "results": [Jsonb(r) if r is not None else None for _, _, r in ok_items]})
                rows = await cur.fetchall()
                done = {r[0] for r in rows}
                sids = list({r[1] for r in rows if r[1] is not None})
                if sids:
                    cur = await conn.execute(q("release_buffered_many"), {"schedule_ids": sids})
                    if await cur.fetchone() is not None:
                        await conn.execute(q("notify_queued"), {"payload": "buffered"})
        out: list[Outcome | Exception] = []
        for (ident, token, result_json), pre in zip(items, results, strict=True):
            if pre is not None:
                out.append(pre)
            elif ident in done:
                if self.metrics is not None:
                    self.metrics.record_outcome("succeeded", "")
                out.append(Outcome("succeeded", None, 0, 0))
            else:  # not ours (stale token, finished, unknown): the single path says why
                try:
                    out.append(await self.complete(ident, token, worker, result_json, tenant))
                except (InvalidArgument, NotFound, FailedPrecondition) as exc:
                    out.append(exc)
        return out

    async def fail(self, ident: uuid.UUID, token: int, worker: str, error: str, retryable: bool,
                   error_type: str, tenant: str | None = None) -> Outcome:
        error = error.encode()[:16 * 1024].decode(errors="ignore")  # kept truncated, not refused
        if len(error_type) > 200:
            raise InvalidArgument("error_type", f"must be at most 200 characters, got {len(error_type)}")
        return await self._finish(ident, token, worker, tenant, succeeded=False, error=error, retryable=retryable,
                                  error_type=error_type)

    async def _finish(self, ident: uuid.UUID, token: int, worker: str, tenant: str | None, *, succeeded: bool,
                      result: Any = None, error: str = "", retryable: bool = True,
                      error_type: str = "") -> Outcome:
        async with self.store.transaction() as conn:
            async with conn.cursor(row_factory=dict_row) as c:
                await c.execute(q("lock_running"), {"id": ident, "token": token, "worker": worker, "tenant": tenant})
                run = await c.fetchone()
            if run is None:
                same = await self._repeat_of_finished(conn, ident, token, succeeded, tenant)
                if same is not None:
                    return same
                raise await self._explain_mismatch(conn, ident, token, worker, tenant)
            if succeeded:
                state, delay, reason = "succeeded", 0.0, None
            else:
                d = decide_failure(
                    attempt=run["attempt"], max_attempts=run["max_attempts"], retryable=retryable,
                    cancel_requested=run["cancel_requested"], error_type=error_type,
                    initial_s=run["retry_initial_s"], multiplier=run["retry_multiplier"],
                    max_s=run["retry_max_s"], rand=self.rng.random())
                state, delay, reason = d.state, d.delay_s, d.reason
            cur = await conn.execute(q("finish"), {
                "id": ident, "state": state, "reason": reason, "result": Jsonb(result) if result is not None else None,
                "error": error or None, "error_type": error_type or None, "terminal": state in TERMINAL,
                "delay_s": delay,
            })
            row = await cur.fetchone()
            assert row is not None
            if state == "succeeded" and run["schedule_id"] is not None:
                await conn.execute(q("mark_success"), {"schedule_id": run["schedule_id"]})
            if state in TERMINAL and run["schedule_id"] is not None:
                cur = await conn.execute(q("release_buffered"), {"schedule_id": run["schedule_id"]})
                if await cur.fetchone() is not None:
                    await conn.execute(q("notify_queued"), {"payload": "buffered"})
            if state == "dead":
                await self.store.insert_event("dead_letter", tenant=run["tenant"], schedule_id=run["schedule_id"],
                                              execution_id=ident, partition=run["partition"], actor=worker,
                                              alert=True, data={"error": error[:2000], "attempts": run["attempt"]},
                                              conn=conn)
            if state == "queued":
                await conn.execute(q("notify_queued"), {"payload": "requeued"})
        if self.metrics is not None:
            self.metrics.record_outcome(row[0], error_type)
        return Outcome(row[0], row[1], int(row[2]), int(row[3]))

    async def _repeat_of_finished(self, conn: Any, ident: uuid.UUID, token: int, succeeded: bool,
                                  tenant: str | None) -> Outcome | None:
        """A retried Complete/Fail with the same token after it landed answers the same."""
        cur = await conn.execute(q("finished_outcome"), {"id": ident, "tenant": tenant})
        row = await cur.fetchone()
        if row is None or int(row[0]) != token:
            return None
        if succeeded and row[1] == "succeeded":
            return Outcome(row[1], row[2], int(row[3]), int(row[4]))
        if not succeeded and row[1] in ("failed", "dead", "retry_scheduled", "cancelled"):
            return Outcome(row[1], row[2], int(row[3]), int(row[4]))
        return None


def _not_running(ident: uuid.UUID, state: str) -> Exception:
    return FailedPrecondition(f"execution {ident} is {state}, not running: stop working on it")
