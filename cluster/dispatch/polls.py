"""The waiting lease calls of one node (long polls), by scope, with their caps.

A scope is the tenant a call may take from (None: any, an admin's call), its job types and its
lanes (queues, queue slots and capabilities: cluster/commands/lanes.py WorkerLanes.key). Within
a scope the calls are kept oldest first. The dispatcher wakes the oldest call of each scope
(`heads`), not every call: one claim finds whatever the scope may take, and a call whose claim
came back full wakes the next of its scope when it leaves (`leave(full=True)`). The oldest call
of a scope also claims at the fallback poll for all of them (`is_head`).

Credentials: a call's caller is checked again (`recheck`, after each refresh of the node's
token list, about every second, and at once after a revocation through this node), so a
revoked token's waiting call ends without any call waking on a timer for it.

Caps: a node holds at most `max_per_tenant` waiting calls per tenant (admin calls, which take
from every tenant, count as one more tenant) and `max_per_worker` per worker id of a tenant;
`enter` refuses the next with ResourceExhausted naming the limit. Defaults:
cronwheel.dispatch_limits.MAX_POLLS_PER_TENANT / MAX_POLLS_PER_WORKER.

Concurrency: not task-safe across event loops; every method is synchronous, so calls from
tasks of one loop never interleave inside one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from cronwheel.errors import CronwheelError, ResourceExhausted

# (tenant or None: any, job types sorted, (): any; the lanes' key, () for the default lanes)
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
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._scopes)

    def enter(self, tenant: str | None, worker: str, types: list[str],
              check: Callable[[], object] | None = None, lanes: tuple[object, ...] = ()) -> Poll:
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
        woken to end with the error. The number refused."""
        refused = 0
        for polls in self._scopes.values():
            for poll in polls:
                if poll.check is not None and poll.refused is None:
                    try:
                        poll.check()
                    except CronwheelError as exc:
                        poll.refuse(exc)
                        refused += 1
        return refused

    def is_head(self, poll: Poll) -> bool:
        """Whether `poll` is the oldest waiting call of its scope."""
        return next(iter(self._scopes[poll.scope])) is poll

    def heads(self) -> Iterator[Poll]:
        """The oldest waiting call of each scope."""
        for polls in self._scopes.values():
            yield next(iter(polls))

    def oldest_idle(self, tenant: str, n: int) -> list[Poll]:
        """The `n` oldest calls not woken yet that may take from `tenant`."""
        idle = [p for (scope, _, _), polls in self._scopes.items() if scope is None or scope == tenant
                for p in islice((p for p in polls if not p.event.is_set()), n)]  # each scope's oldest n
        return sorted(idle, key=lambda p: p.seq)[:n]
