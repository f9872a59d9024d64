"""Claiming and finishing executions for workers (the logic behind DispatchService).

Claim: priorities are polled in a weighted order (critical first most of the time, bulk first
sometimes, so bulk is slow but never starved); within a priority, tenants share by weighted fair
queueing (policy.FAIR_SHARE_TAU_S) and each is capped by its free concurrency and the whole
tokens of its rate limit's bucket, spent in the same statement; a run with a concurrency key
starts only while its key has fewer than its limit running; the runs are read without row
locks (the tenant locks below keep other claims out; the UPDATE re-checks `queued`) and leased in
the same statement (`claim`): attempt + 1, fencing token + 1, only runs whose run_at has come
(a delayed one-off job is queued up to FiringConfig.queue_ahead_s before it). A claim that
found nothing while queued work waits, for a rate-limited tenant's whole token or for a run
queued ahead to come due, waits until the soonest of them (`claim_wait`) rather than the
fallback poll: so a run queued ahead starts at its run_at, not at the next notification.
A claim first takes transaction-scoped advisory locks on the tenants it may take from
(`claim_lock_tenants`), so claims for one tenant never overlap anywhere in the cluster and its
concurrency cap, its concurrency keys' limits (a key belongs to one tenant) and its token
bucket are exact; within a node, claims run one at a time, on one connection. The locks, the
claim and the COMMIT go to PostgreSQL in one round trip (the claim reads the tenants the lock
statement locked from the transaction's `cronwheel.claim_tenants`).
Waiting workers long-poll: they are woken by `wake()` (NOTIFY cronwheel_queued from any node,
or this node's own fire batches) rather than by fixed polling; a slow fallback poll covers
missed notifications. Waiting calls are grouped by scope (the tenant they may take from and
their job types): a wake and the fallback poll make the oldest call of each scope claim, and a
call whose claim came back full wakes the next of its scope, so a wake costs one claim per
scope, not one per waiting call. Except for idle tenants (the last claim for the tenant found
no queued work for it): their scopes' oldest calls claim only after one read of the tenants
with queued work says theirs has some (`_wake_idle`, one read for all idle tenants, also at
the fallback poll), so a tenant whose calls wait for work that does not come costs the other
tenants' runs no claim ahead of theirs. A node holds at most MAX_POLLS_PER_TENANT waiting calls per
tenant and MAX_POLLS_PER_WORKER per worker (polls.py; ResourceExhausted past them), and a
waiting call's caller's credentials are checked again (`still_allowed`) before each claim and
after each refresh of the node's token list (`recheck`). A run finished through this node
frees a slot of its tenant: while the node's last claim saw queued work, it wakes one waiting
call that may take from that tenant (`_slots_freed`), so a tenant held at its concurrency cap
starts its next run when a run ends, not at the fallback poll. Calls waiting on other nodes are
not woken by it: their fallback poll covers them.

While the node's clock is off PostgreSQL's beyond --max-clock-skew (the clock-skew guard,
cluster/coordination/clock_skew.py), `hold_claims` makes every claim take nothing: the claim's
`now` is this node's clock, and a run queued ahead would start early by the skew. Waiting calls
wait out their timeout (the fallback poll finds nothing either) and are woken when it ends.

Every call that carries a token is checked against the execution's current token, owner and
state in the same statement; a mismatch changes nothing and raises StaleFencingToken.

What a run's end releases is written in the transaction that records it, so a completion that
does not commit releases nothing and its retry releases once: the jobs that waited for it (the
trigger executions_release_dependents, on every path that finishes a run), the next buffered run
(`release_buffered*`) and, for a success, a run of each child schedule (`release_children`).

Concurrency: task-safe; all state is in PostgreSQL except the waiting calls' wake-up events.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronwheel.clock import Clock
from cronwheel.cluster.commands.lanes import DEFAULT_LANES, WorkerLanes
from cronwheel.cluster.dispatch.faults import StallFaults
from cronwheel.cluster.dispatch.policy import (
    FAIR_SHARE_TAU_S,
    MIN_CLAIM_WAIT_S,
    PRIORITIES,
    TERMINAL_STATES,
    PriorityWeights,
    decide_failure,
    priority_order,
)
from cronwheel.cluster.dispatch.polls import Poll, Polls
from cronwheel.cluster.metrics import Metrics
from cronwheel.errors import CronwheelError, FailedPrecondition, InvalidArgument, NotFound, StaleFencingToken
from cronwheel.http_target import HTTP_TYPE
from cronwheel.limits import (
    ANSWER_ROWS_BYTES,
    MAX_COMPLETE_BATCH,
    MAX_LEASE_COUNT,
    MAX_POLLS_PER_TENANT,
    MAX_POLLS_PER_WORKER,
)
from cronwheel.storage import PgStore
from cronwheel.storage.dispatch import (
    ClaimParams,
    Completion,
    Conn,
    FinishParams,
    Leased,
    RunOutcome,
    TokenCall,
)

__all__ = ["DispatchConfig", "Dispatcher", "Leased", "Outcome"]

MAX_CHECKPOINT_BYTES = 1024 * 1024
MAX_RESULT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    weights: PriorityWeights = PriorityWeights()
    fallback_poll_s: float = 1.0
    max_lease_s: float = 3600.0
    min_lease_s: float = 1.0
    max_wait_s: float = 60.0
    max_count: int = MAX_LEASE_COUNT
    fair_tau_s: float = FAIR_SHARE_TAU_S
    max_polls_per_tenant: int = MAX_POLLS_PER_TENANT
    max_polls_per_worker: int = MAX_POLLS_PER_WORKER
    target_heartbeat_s: float = 60.0  # the lease an HTTP target's heartbeat (ReportTargetRun) extends to

    def validate(self) -> DispatchConfig:
        self.weights.validate()
        return self


@dataclass(frozen=True, slots=True)
class Outcome:
    state: str
    run_at: datetime | None
    attempt: int
    max_attempts: int

    @classmethod
    def of(cls, r: RunOutcome) -> Outcome:
        return cls(r.state, r.run_at, r.attempt, r.max_attempts)


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
    """Task-safe. Reads time only from `clock`: every lease deadline, start, heartbeat, finish
    and retry time it writes is the clock's `now()`."""

    def __init__(self, store: PgStore, clock: Clock, config: DispatchConfig | None = None,
                 rng: random.Random | None = None, metrics: Metrics | None = None) -> None:
        self.metrics = metrics
        self.store = store
        self.port = store.dispatch
        self.clock = clock
        self.config = (config or DispatchConfig()).validate()
        self.rng = rng or random.Random()
        # The waiting lease calls (polls.py), registered before a call's first claim, so a
        # wake-up during a claim is not lost: the call claims again at once.
        self._polls = Polls(self.config.max_polls_per_tenant, self.config.max_polls_per_worker)
        self._wake_timer: tuple[float, asyncio.Task[None]] | None = None  # wake_at's (instant, sleeper)
        # One claim at a time per node, on the store's claim connection (Database.claim_connection:
        # the claim's plan and its backend's caches stay warm). Claims that share a tenant queue on
        # its advisory lock anyway.
        self._claiming = asyncio.Lock()
        self._queued_seen = False  # the last claim's locks found queued work (see _claim_once)
        self._idle_read: asyncio.Task[None] | None = None  # _wake_idle's read, while it runs
        self._idle_again = False  # a wake came during that read: read again
        self._idle_read_at = float("-inf")  # when the last such read began (monotonic)
        self._faults = StallFaults.from_env()  # test-only (faults.py): off unless its variable is set
        self.claims_held: str | None = None  # why this node claims nothing now (None: it claims)

    def hold_claims(self, reason: str | None) -> None:
        """Claim nothing while `reason` is set (the clock-skew guard); None: claim again, at once."""
        self.claims_held = reason
        if reason is None:
            self.wake()

    def wake(self) -> None:
        """Work was queued: the oldest waiting lease call of each scope (tenant and job types)
        claims again, not every call: one claim per scope finds whatever that scope may take,
        and a call whose claim came back full wakes the next of its scope (polls.py). Waking
        every call made each of a tenant's thousands of polls claim again, one after another on
        the node's one claim connection, for work one of them takes. The scopes of idle tenants
        (the last claim for the tenant found no queued work) do not claim at once: `_wake_idle`."""
        for poll in self._polls.active_heads():
            poll.wake()
        if self._polls.has_idle():
            self._wake_idle()

    def _wake_idle(self) -> None:
        """The idle tenants' part of a wake: one read of the tenants with queued work, then the
        oldest call of each idle tenant's scope that may take from one of them claims (a claim
        behind the claims of the tenants that had work, woken first). Before, a tenant
        whose calls wait for work that never comes (bench.long_polls' flood) claimed at every
        wake of another tenant's runs, on the one claim connection and often ahead of it: each
        of the other tenant's runs waited for that claim and took two round trips instead of
        one (the flood's claim had seen no queued work). A wake during the read reads again."""
        if self._idle_read is not None:
            self._idle_again = True
            return
        self._idle_read_at = self.clock.monotonic()
        self._idle_read = asyncio.create_task(self._read_idle(), name="dispatch-wake-idle")

    async def _read_idle(self) -> None:
        try:
            again = True
            while again:
                self._idle_again = False
                tenants: set[str] | None
                try:
                    tenants = await self.port.queued_tenant_names()
                except CronwheelError:  # the database failed: they claim (and meet it), as before
                    tenants = None
                woken = self._polls.idle_heads(tenants)
                for poll in woken:
                    if tenants:  # their claims send lock and claim together (one round trip)
                        self._polls.mark(poll.scope[0], True)
                    poll.wake()
                again = self._idle_again
                if again:
                    self._idle_read_at = self.clock.monotonic()
        finally:
            self._idle_read = None

    def wake_at(self, at: float | None = None) -> None:
        """Work was queued that is claimable from `at` (Unix seconds by this node's clock; None
        or past: now): `wake()` then. Runs queued ahead of their run_at (a delayed one-off job,
        FiringConfig.queue_ahead_s) are announced before they are due, and a call woken then
        would claim nothing. One timer, for the soonest such instant: a call that claims before
        later runs are due sleeps until the next of them by itself (`claim_wait`)."""
        if at is None or at <= self.clock.now_ts():
            self.wake()
            return
        if self._wake_timer is not None:
            if self._wake_timer[0] <= at:
                return
            self._wake_timer[1].cancel()
        self._wake_timer = (at, asyncio.create_task(self._wake_later(at), name="dispatch-wake-at"))

    async def _wake_later(self, at: float) -> None:
        await self.clock.sleep_until_ts(at)
        self._wake_timer = None
        self.wake()

    def _slots_freed(self, tenants: Iterable[str]) -> None:
        """Runs of `tenants` (one per run) left `running` through this node: each freed a slot
        of its tenant's concurrency cap (or of its key's limit). While the last claim saw queued
        work (a claim that came back empty then was held by a cap, a rate limit or the workers'
        types), wake the oldest waiting call that may take from the tenant, one per run: not
        every waiting call, whose claims would run one after another for a slot only one can
        take. Without it such a tenant's next run waited for the fallback poll."""
        if not self._queued_seen or not self._polls:
            return
        for t, n in Counter(tenants).items():
            for poll in self._polls.oldest_idle(t, n):
                poll.wake()

    def check_lease(self, lease_s: float, field: str = "lease_duration") -> float:
        if not self.config.min_lease_s <= lease_s <= self.config.max_lease_s:
            raise InvalidArgument(field, f"must be between {self.config.min_lease_s:g} s and "
                                         f"{self.config.max_lease_s:g} s, got {lease_s:g} s")
        return lease_s

    async def lease(self, worker: str, types: list[str], max_count: int, lease_s: float,
                    wait_s: float, tenant: str | None = None, lanes: WorkerLanes = DEFAULT_LANES) -> list[Leased]:
        """Up to max_count runs (of `tenant` only, for a tenant's worker; None: any tenant) of
        the worker's `lanes` (its queues, within its queue slots, and runs whose required
        capabilities it advertises; the default: queue `default`, runs requiring none)."""
        rows, _held = await self.lease_held(worker, types, max_count, lease_s, wait_s, tenant, lanes=lanes)
        return rows

    async def lease_held(self, worker: str, types: list[str], max_count: int, lease_s: float,
                         wait_s: float, tenant: str | None = None,
                         still_allowed: Callable[[], object] | None = None,
                         lanes: WorkerLanes = DEFAULT_LANES) -> tuple[list[Leased], float]:
        """`lease`, and the seconds the call was held before the claim that leased its runs (its
        leases began that long after the call arrived): the worker counts its leases from there.
        A waiting call (wait_s > 0) counts against its tenant's and its worker's caps
        (ResourceExhausted past them). `still_allowed` (the caller's credentials checked again:
        it raises when they were revoked) runs before every claim after the first and at each
        `recheck()`, so a revoked token's call ends when the node learns of the revocation and
        claims nothing after."""
        if not worker.strip():
            raise InvalidArgument("worker_id", "is required")
        if not 1 <= max_count <= self.config.max_count:
            raise InvalidArgument("max_count", f"must be 1..{self.config.max_count}, got {max_count}")
        if not 0 <= wait_s <= self.config.max_wait_s:
            raise InvalidArgument("wait_timeout", f"must be 0..{self.config.max_wait_s:g} s, got {wait_s:g}")
        self.check_lease(lease_s)
        arrived = self.clock.monotonic()
        if wait_s <= 0:
            claimed = self.clock.monotonic()
            got, _ = await self._claim_once(worker, types or None, max_count, lease_s, tenant, lanes)
            return got, claimed - arrived
        deadline = arrived + wait_s
        # Entered before the claim: no wake-up is lost.
        poll = self._polls.enter(tenant, worker, types, still_allowed, lanes.key)
        rows: list[Leased] = []
        try:
            while True:
                poll.event.clear()
                poll.claim = False
                claimed = self.clock.monotonic()  # before the claim's own now(): its leases start later
                rows, wait = await self._claim_once(worker, types or None, max_count, lease_s, tenant, lanes)
                if rows or deadline - self.clock.monotonic() <= 0:
                    return rows, claimed - arrived
                await self._hold(poll, deadline, wait)
                if still_allowed is not None:
                    still_allowed()
        finally:
            self._polls.leave(poll, full=len(rows) == max_count)

    def recheck(self) -> None:
        """Check every waiting call's credentials again (the node calls it after each refresh of
        its token list): a revoked token's calls end now, UNAUTHENTICATED."""
        self._polls.recheck()

    async def _hold(self, poll: Poll, deadline: float, wait: float | None) -> None:
        """Wait until the call should claim again: woken, its deadline, its claim's `wait` (a
        token or a run queued ahead is due then), or the fallback poll. Only the oldest call of
        a scope claims at the fallback poll (it covers missed notifications for all of them);
        the others sleep until woken (a wake, a promotion to oldest, a refusal) or their
        deadline: a tenant's thousand waiting calls cost no timer each second. The oldest call
        of an idle tenant's scope does not claim at the fallback poll: it asks for the idle
        tenants' read (at most one per fallback_poll_s for all of them), which wakes it to claim
        if its tenant has queued work."""
        first = True
        while True:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return
            pause = min(left, self.config.fallback_poll_s) if self._polls.is_head(poll) else left
            if first and wait is not None:
                pause = min(pause, max(wait, MIN_CLAIM_WAIT_S))
            first = False
            woke = await self.clock.wait(poll.event, pause)
            if poll.refused is not None:
                raise poll.refused
            if woke and not poll.claim:
                poll.event.clear()  # promoted to its scope's oldest: takes over the fallback poll
                continue
            if woke or pause >= left or not self._polls.idle(poll.tenant):
                return
            # An idle tenant's oldest call at the fallback poll: one read for every idle tenant
            # (`_wake_idle`) claims for it if its tenant has queued work, instead of a claim each
            # on the claim connection, where the tenants with work wait for them.
            if self.clock.monotonic() - self._idle_read_at >= self.config.fallback_poll_s:
                self._wake_idle()

    async def _claim_once(self, worker: str, types: list[str] | None, max_count: int, lease_s: float,
                          tenant: str | None, lanes: WorkerLanes) -> tuple[list[Leased], float | None]:
        """The runs leased, and (when none) the seconds until queued work may be claimable
        (`claim_wait`: a rate-limited tenant's next token, a run queued ahead of its run_at).
        Whether its lock found queued work for `tenant` is kept (`Polls.mark`): the next claim
        for the tenant sends lock and claim together if it did, and a wake makes the tenant's
        waiting calls claim at once only if it did (`wake`)."""
        if self.claims_held is not None:
            return [], None
        order = priority_order(self.config.weights, self.rng.random())
        wait = None
        # While the last claim for this tenant (for a tenant's first, the node's last claim)
        # found queued work, one round trip: the tenant locks, the claim and its COMMIT travel
        # together. Otherwise the locks' answer is read first and no claim is sent when no tenant
        # has queued work: an idle node's waiting polls (each claims at every fallback_poll_s)
        # cost the lock statement only, not the claim's planning (1.3 ms). Kept per tenant: one
        # node-wide flag made a tenant whose calls find nothing (at each fallback poll) cost
        # another tenant's next claim a second round trip. Either way the runs are read after the
        # COMMIT succeeded, so no lease is handed out that did not commit.
        async with self._claiming, self.store.claim_connection() as conn:
            seen = self._polls.queued_seen(tenant)  # as the claims before this one left it
            pipelined = self._queued_seen if seen is None else seen
            async with self.store.pipelined_transaction(conn):
                locked = await self.port.lock_claim_tenants(  # limits hold across nodes
                    conn, tenant, worker if lanes.slots else None)
                if not pipelined and not await locked.result():
                    self._polls.mark(tenant, False)
                    return [], None
                now = self.clock.now()
                claim = await self.port.claim(conn, ClaimParams(
                    worker=worker, priorities=order, types=types, limit=max_count, lease_s=lease_s, tenant=tenant,
                    now=now, fair_tau_s=self.config.fair_tau_s, max_bytes=ANSWER_ROWS_BYTES,
                    queues=lanes.queues, capabilities=lanes.capabilities, slots=lanes.slots))
            out = await claim.result()
            self._queued_seen = await locked.result()
            self._polls.mark(tenant, self._queued_seen)
            if not out and self._queued_seen:  # at the claim's `now`: the buckets as the claim
                # left them (a later read could see a whole token refilled meanwhile and answer
                # "none waiting"); with no tenant queued at all, nothing is waiting
                wait = await self.port.claim_wait(conn, tenant, now, PRIORITIES, lanes.queues, lanes.capabilities)
        if self.metrics is not None:
            for r in out:
                self.metrics.start_lag.observe(r.started_at - r.run_at)
            self.metrics.executions_entered(("running", r.type) for r in out)
        return out, wait

    async def refusal(self, call: TokenCall) -> Exception:
        """Why a token-checked call matched nothing (its own read: AppendLogs)."""
        async with self.store.connection() as conn:
            return await self._explain_mismatch(conn, call)

    async def _explain_mismatch(self, conn: Conn, call: TokenCall) -> Exception:
        st = await self.port.execution_token_state(conn, call.id, call.tenant)
        if st is None:
            return NotFound("execution", call.id)
        if st.fencing_token != call.token:
            return StaleFencingToken(call.id, call.token, st.fencing_token)
        if st.state != "running":
            return _not_running(call.id, st.state)
        return _not_running(call.id, f"leased by another worker ({st.lease_owner})")

    async def heartbeat(self, ident: uuid.UUID, token: int, worker: str, lease_s: float,
                        tenant: str | None = None) -> tuple[datetime, bool]:
        self.check_lease(lease_s, "lease_extension")
        call = TokenCall(ident, token, worker, tenant)
        async with self.store.transaction() as conn:
            got = await self.port.heartbeat(conn, call, lease_s, self.clock.now())
            if got is None:
                raise await self._explain_mismatch(conn, call)
            return got

    async def checkpoint(self, ident: uuid.UUID, token: int, worker: str, checkpoint_json: str,
                         tenant: str | None = None) -> bool:
        value = _json_size("checkpoint_json", checkpoint_json, MAX_CHECKPOINT_BYTES)
        call = TokenCall(ident, token, worker, tenant)
        async with self.store.transaction() as conn:
            cancel = await self.port.checkpoint(conn, call, value, self.clock.now())
            if cancel is None:
                raise await self._explain_mismatch(conn, call)
            return cancel

    async def complete(self, ident: uuid.UUID, token: int, worker: str, result_json: str,
                       tenant: str | None = None) -> Outcome:
        result = _json_size("result_json", result_json, MAX_RESULT_BYTES)
        return await self._finish(TokenCall(ident, token, worker, tenant), succeeded=True, result=result)

    async def complete_many(self, worker: str, items: list[tuple[uuid.UUID, int, str]],
                            tenant: str | None = None) -> list[Outcome | Exception]:
        """Succeed many runs in one transaction; each item is judged as `complete` would judge it."""
        if not 1 <= len(items) <= MAX_COMPLETE_BATCH:
            raise InvalidArgument("items", f"must hold 1..{MAX_COMPLETE_BATCH} completions, got {len(items)}")
        results: list[Any] = []
        ok_items: list[Completion] = []
        for ident, token, result_json in items:
            try:
                ok_items.append(Completion(ident, token, _json_size("result_json", result_json, MAX_RESULT_BYTES)))
                results.append(None)
            except InvalidArgument as exc:
                results.append(exc)
        done: dict[uuid.UUID, str] = {}  # id -> job type
        if ok_items:
            now = self.clock.now()
            # Two round trips: BEGIN with the completions (their statement's trigger releases the
            # jobs that waited for them: migration 0024), then the buffered runs' release and the
            # child schedules' runs (cron runs only) with the COMMIT.
            released = children = None
            async with self.store.connection() as conn:
                async with self.store.pipelined_transaction(conn):
                    rows = await self.port.complete_batch(conn, worker, tenant, ok_items, now)
                    await self._faults.stall_completion(self.clock, [(r.id, r.schedule_id) for r in rows])
                    done = {r.id: r.type for r in rows}
                    sids = list({r.schedule_id for r in rows if r.schedule_id is not None})
                    if sids:
                        released = await self.port.release_buffered_many(conn, sids, now)
                        children = await self.port.release_children(
                            conn, [r.id for r in rows if r.schedule_id is not None], now)
                freed = await released.result() if released is not None else []  # committed
                freed += await children.result() if children is not None else []
            if freed and self.metrics is not None:
                self.metrics.executions_entered(("queued", job_type) for job_type in freed)
            self._slots_freed(r.tenant for r in rows)
        out: list[Outcome | Exception] = []
        if done and self.metrics is not None:
            self.metrics.record_outcomes("succeeded", "", done.values())
        succeeded = Outcome("succeeded", None, 0, 0)
        for (ident, token, result_json), pre in zip(items, results, strict=True):
            if pre is not None:
                out.append(pre)
            elif ident in done:
                out.append(succeeded)
            else:  # not ours (stale token, finished, unknown): the single path says why
                try:
                    out.append(await self.complete(ident, token, worker, result_json, tenant))
                except (InvalidArgument, NotFound, FailedPrecondition) as exc:
                    out.append(exc)
        return out

    async def fail(self, ident: uuid.UUID, token: int, worker: str, error: str, retryable: bool,
                   error_type: str, tenant: str | None = None, retry_after_s: float | None = None) -> Outcome:
        error = error.encode()[:16 * 1024].decode(errors="ignore")  # kept truncated, not refused
        if len(error_type) > 200:
            raise InvalidArgument("error_type", f"must be at most 200 characters, got {len(error_type)}")
        return await self._finish(TokenCall(ident, token, worker, tenant), succeeded=False, error=error,
                                  retryable=retryable, error_type=error_type, retry_after_s=retry_after_s)

    async def report_target(self, ident: uuid.UUID, token: int, *, alive: bool = False,
                            result_json: str | None = None, error: str | None = None,
                            retryable: bool = False) -> str:
        """What an HTTP target that answered 202 reports (DispatchService.ReportTargetRun): the
        execution id and its current fencing token are the credential, so it acts as the doer
        that holds the lease (any tenant's run; a job type's run is NOT_FOUND: its token is not
        a credential). Refused like the doer's own call once the run ended or moved on. Answers
        the run's state after the report."""
        async with self.store.connection() as conn:
            st = await self.port.execution_token_state(conn, ident, None)
        if st is None or st.type != HTTP_TYPE:
            raise NotFound("execution", ident)
        if st.fencing_token != token:
            raise StaleFencingToken(ident, token, st.fencing_token)
        if st.state != "running" or st.lease_owner is None:
            raise _not_running(ident, st.state)
        if alive:  # a heartbeat
            await self.heartbeat(ident, token, st.lease_owner, self.config.target_heartbeat_s)
            return "running"
        if result_json is not None:
            return (await self.complete(ident, token, st.lease_owner, result_json or "{}")).state
        return (await self.fail(ident, token, st.lease_owner, error or "", retryable, "target")).state

    async def _finish(self, call: TokenCall, *, succeeded: bool, result: Any = None, error: str = "",
                      retryable: bool = True, error_type: str = "", retry_after_s: float | None = None) -> Outcome:
        async with self.store.transaction() as conn:
            run = await self.port.lock_running(conn, call)
            if run is None:
                same = await self._repeat_of_finished(conn, call, succeeded)
                if same is not None:
                    return same
                raise await self._explain_mismatch(conn, call)
            if succeeded:
                state, delay, reason = "succeeded", 0.0, None
            else:
                d = decide_failure(
                    attempt=run.attempt, max_attempts=run.max_attempts, retryable=retryable,
                    cancel_requested=run.cancel_requested, error_type=error_type,
                    initial_s=run.retry_initial_s, multiplier=run.retry_multiplier,
                    max_s=run.retry_max_s, rand=self.rng.random())
                state, delay, reason = d.state, d.delay_s, d.reason
                if state == "retry_scheduled" and retry_after_s:  # Retry-After: the earliest next attempt
                    delay = max(delay, retry_after_s)
            now = self.clock.now()
            terminal = state in TERMINAL_STATES
            out = await self.port.finish(conn, FinishParams(
                id=call.id, state=state, reason=reason, result=result, error=error or None,
                error_type=error_type or None,
                run_at=now + timedelta(seconds=delay) if state == "retry_scheduled" else None,
                finished_at=now if terminal else None, now=now))
            parent = False  # the schedule has children: only then is release_children sent (most have none)
            if state == "succeeded" and run.schedule_id is not None:
                parent = await self.port.mark_success(conn, run.schedule_id, now)
            freed = None  # the buffered run released (overlap buffer_*), if any: its job type
            if terminal and run.schedule_id is not None:
                freed = await self.port.release_buffered(conn, run.schedule_id, now)
            born: list[str] = []  # the runs of child schedules created (their job types)
            if parent:
                born = await (await self.port.release_children(conn, [call.id], now)).result()
            if state in ("dead", "failed"):  # a non-retryable failure ends the run too: execution_failed
                await self.store.insert_event("dead_letter" if state == "dead" else "execution_failed",
                                              tenant=run.tenant, schedule_id=run.schedule_id,
                                              execution_id=call.id, partition=run.partition, actor=call.worker,
                                              alert=True, data={"error": error[:2000], "attempts": run.attempt,
                                                                "error_type": error_type or None},
                                              conn=conn)
            if state == "queued":
                await self.port.notify_queued(conn, "requeued")
        self._slots_freed([run.tenant])
        if self.metrics is not None:
            self.metrics.record_outcome(out.state, error_type, run.type)
            if freed is not None:
                self.metrics.execution_entered("queued", freed)
            self.metrics.executions_entered(("queued", t) for t in born)
        return Outcome.of(out)

    async def _repeat_of_finished(self, conn: Conn, call: TokenCall, succeeded: bool) -> Outcome | None:
        """A retried Complete/Fail with the same token after it landed answers the same."""
        rec = await self.port.finished_outcome(conn, call.id, call.tenant)
        if rec is None or rec.fencing_token != call.token:
            return None
        if succeeded and rec.state == "succeeded":
            return Outcome.of(rec)
        if not succeeded and rec.state in ("failed", "dead", "retry_scheduled", "cancelled"):
            return Outcome.of(rec)
        return None


def _not_running(ident: uuid.UUID, state: str) -> Exception:
    return FailedPrecondition(f"execution {ident} is {state}, not running: stop working on it")
