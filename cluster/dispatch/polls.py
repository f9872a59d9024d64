"""The waiting lease calls of one node (long polls), by scope, with their caps.

A scope is the tenant a call may take from (None: any, an admin's call), its job types and its
lanes (queues, queue slots and capabilities: cluster/commands/lanes.py WorkerLanes.key). Within
a scope the calls are kept oldest first. The dispatcher wakes the oldest call of each scope
(`active_heads`), not every call: one claim finds whatever the scope may take, and a call whose claim
came back full wakes the next of its scope when it leaves (`leave(full=True)`). The oldest call
of a scope also claims at the fallback poll for all of them (`is_head`).

Credentials: a call's caller is checked again (`recheck`, after each refresh of the node's
token list, about every second, and at once after a revocation through this node), so a
revoked token's waiting call ends without any call waking on a timer for it.

Idle tenants: each claim says whether the tenant it may take from (None: any, an admin's) had
queued work at all (`mark`; kept per tenant, also while none of its calls waits). A wake does
not make the oldest call of an idle tenant's scope claim at once, ahead of the claims of the
tenants that have work: the dispatcher reads which tenants have queued work once for all idle
ones and wakes the scopes it concerns (`idle_heads`). A tenant whose calls wait for work that
does not come then costs another tenant's runs no claim ahead of theirs.

Caps: a node holds at most `max_per_tenant` waiting calls per tenant (admin calls, which take
from every tenant, count as one more tenant) and `max_per_worker` per worker id of a tenant;
`enter` refuses the next with ResourceExhausted naming the limit. Defaults:
cronwheel.limits.MAX_POLLS_PER_TENANT / MAX_POLLS_PER_WORKER.

Concurrency: not task-safe across event loops; every method is synchronous, so calls from
tasks of one loop never interleave inside one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from itertools import islice

from cronwheel.cluster.commands.lanes import DEFAULT_LANES
from cronwheel.errors import CronwheelError, ResourceExhausted

_UNCHECKED = CronwheelError("not checked yet")  # Polls.recheck's marker

# (tenant or None: any, job types sorted, (): any; the lanes' key, WorkerLanes.key)
Scope = tuple[str | None, tuple[str, ...], tuple[object, ...]]


@dataclass(eq=False, slots=True)
class Poll:
    """A waiting lease call (hashed by identity). `event` is set by whoever wakes it: `wake()`
    asks it to claim (the call clears `claim` and `event` before each claim, so a wake during
    the claim makes it claim again); `promote()` tells it that it became its scope's oldest (it
    takes over the fallback poll, without claiming now); `refuse()` ends it (`check`, its
    caller's credentials checked again, raised)."""

    seq: int  # arrival order across scopes (`oldest_idle` goes by it)
    tenant: str | None
    worker: str
    scope: Scope
    check: Callable[[], object] | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)
    claim: bool = False
    refused: BaseException | None = None

    def wake(self) -> None:
        self.claim = True
        self.event.set()

    def promote(self) -> None:
        self.event.set()

    def refuse(self, exc: BaseException) -> None:
        self.refused = exc
        self.event.set()


class Polls:
    def __init__(self, max_per_tenant: int, max_per_worker: int) -> None:
        self.max_per_tenant = max_per_tenant
        self.max_per_worker = max_per_worker
        self._scopes: dict[Scope, dict[Poll, None]] = {}
        self._per_tenant: Counter[str | None] = Counter()
        self._per_worker: Counter[tuple[str | None, str]] = Counter()
        # tenant -> whether its last claim found queued work (`mark`): one entry per tenant that
        # claimed through this node, kept while none of its calls waits
        self._queued: dict[str | None, bool] = {}
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._scopes)

    def enter(self, tenant: str | None, worker: str, types: list[str],
              check: Callable[[], object] | None = None, lanes: tuple[object, ...] = DEFAULT_LANES.key) -> Poll:
        """Register a waiting call, or refuse it past its tenant's or its worker's cap."""
        if self._per_tenant[tenant] >= self.max_per_tenant:
            who = tenant if tenant is not None else "(admin: every tenant)"
            raise ResourceExhausted(f"max_polls_per_tenant: tenant {who} already has {self.max_per_tenant} "
                                    "waiting lease calls on this node; wait for one to return")
        if self._per_worker[(tenant, worker)] >= self.max_per_worker:
            raise ResourceExhausted(f"max_polls_per_worker: worker {worker!r} already has {self.max_per_worker} "
                                    "waiting lease calls on this node; wait for one to return")
        self._seq += 1
        poll = Poll(self._seq, tenant, worker, (tenant, tuple(sorted(set(types))), lanes), check)
        self._per_tenant[tenant] += 1
        self._per_worker[(tenant, worker)] += 1
        self._scopes.setdefault(poll.scope, {})[poll] = None
        return poll

    def leave(self, poll: Poll, full: bool) -> None:
        """Unregister a call; `full`: its last claim leased all it asked for, so its scope may
        have more: the next waiting call of the scope claims now (the wake's chain). Otherwise
        the next, if the call was the oldest, takes over the fallback poll."""
        polls = self._scopes[poll.scope]
        head = next(iter(polls)) is poll
        del polls[poll]
        if not polls:
            del self._scopes[poll.scope]
        elif full:
            next(iter(polls)).wake()
        elif head:
            next(iter(polls)).promote()
        self._per_tenant[poll.tenant] -= 1
        if not self._per_tenant[poll.tenant]:
            del self._per_tenant[poll.tenant]
        self._per_worker[(poll.tenant, poll.worker)] -= 1
        if not self._per_worker[(poll.tenant, poll.worker)]:
            del self._per_worker[(poll.tenant, poll.worker)]

    def recheck(self) -> int:
        """Check every waiting call's credentials again (`Poll.check`): each refused one is
        woken to end with the error. The number refused. Calls may share one check (the calls
        of one token share cluster.api.auth.CredentialCheck): each check runs once, so a
        tenant's thousand calls with one token cost one lookup, not 1,000."""
        refused = 0
        verdicts: dict[Callable[[], object], CronwheelError | None] = {}
        for polls in self._scopes.values():
            for poll in polls:
                if poll.check is None or poll.refused is not None:
                    continue
                verdict = verdicts.get(poll.check, _UNCHECKED)
                if verdict is _UNCHECKED:
                    try:
                        poll.check()
                        verdict = None
                    except CronwheelError as exc:
                        verdict = exc
                    verdicts[poll.check] = verdict
                if verdict is not None:
                    poll.refuse(verdict)
                    refused += 1
        return refused

    def is_head(self, poll: Poll) -> bool:
        """Whether `poll` is the oldest waiting call of its scope."""
        return next(iter(self._scopes[poll.scope])) is poll

    def mark(self, tenant: str | None, queued: bool) -> None:
        """A claim for `tenant` (None: any tenant) found queued work for it (`queued`) or none
        at all (the tenant is idle until a claim finds some). Kept per tenant, not per call:
        a worker's next call claims as its last one found."""
        self._queued[tenant] = queued

    def queued_seen(self, tenant: str | None) -> bool | None:
        """What the last claim for `tenant` found (`mark`); None: no claim for it yet."""
        return self._queued.get(tenant)

    def idle(self, tenant: str | None) -> bool:
        """Whether the last claim for `tenant` found no queued work for it."""
        return self._queued.get(tenant) is False

    def active_heads(self) -> Iterator[Poll]:
        """The oldest waiting call of each scope whose tenant is not idle."""
        for scope, polls in self._scopes.items():
            if not self.idle(scope[0]):
                yield next(iter(polls))

    def has_idle(self) -> bool:
        """Whether a call waits in a scope of an idle tenant."""
        return any(self.idle(scope[0]) for scope in self._scopes)

    def idle_heads(self, tenants: Collection[str] | None) -> list[Poll]:
        """The oldest waiting call of each idle tenant's scope that may take from one of
        `tenants` (an admin's scope: from any of them; None: every idle scope)."""
        return [next(iter(polls)) for scope, polls in self._scopes.items() if self.idle(scope[0])
                and (tenants is None or (bool(tenants) if scope[0] is None else scope[0] in tenants))]

    def oldest_idle(self, tenant: str, n: int) -> list[Poll]:
        """The `n` oldest calls not woken yet that may take from `tenant`."""
        idle = [p for (scope, _, _), polls in self._scopes.items() if scope is None or scope == tenant
                for p in islice((p for p in polls if not p.event.is_set()), n)]  # each scope's oldest n
        return sorted(idle, key=lambda p: p.seq)[:n]
