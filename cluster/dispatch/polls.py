"""The waiting lease calls of one node (long polls), by scope, with their caps.

A scope is the tenant a call may take from (None: any, an admin's call) and its job types. Within
a scope the calls are kept oldest first. The dispatcher wakes the oldest call of each scope
(`heads`), not every call: one claim finds whatever the scope may take, and a call whose claim
came back full wakes the next of its scope when it leaves (`leave(full=True)`). The oldest call
of a scope also claims at the fallback poll for all of them (`is_head`).

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from cronwheel.errors import ResourceExhausted

Scope = tuple[str | None, tuple[str, ...]]  # (tenant or None: any, job types sorted; (): any)


@dataclass(eq=False, slots=True)
class Poll:
    """A waiting lease call (hashed by identity). `event` is set by whoever wakes it; the call
    clears it before each claim, so a wake during the claim makes it claim again."""

    seq: int  # arrival order across scopes (`oldest_idle` goes by it)
    tenant: str | None
    worker: str
    scope: Scope
    event: asyncio.Event = field(default_factory=asyncio.Event)


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

    def enter(self, tenant: str | None, worker: str, types: list[str]) -> Poll:
        """Register a waiting call, or refuse it past its tenant's or its worker's cap."""
        if self._per_tenant[tenant] >= self.max_per_tenant:
            who = tenant if tenant is not None else "(admin: every tenant)"
            raise ResourceExhausted(f"max_polls_per_tenant: tenant {who} already has {self.max_per_tenant} "
                                    "waiting lease calls on this node; wait for one to return")
        if self._per_worker[(tenant, worker)] >= self.max_per_worker:
            raise ResourceExhausted(f"max_polls_per_worker: worker {worker!r} already has {self.max_per_worker} "
                                    "waiting lease calls on this node; wait for one to return")
        self._seq += 1
        poll = Poll(self._seq, tenant, worker, (tenant, tuple(sorted(set(types)))))
        self._per_tenant[tenant] += 1
        self._per_worker[(tenant, worker)] += 1
        self._scopes.setdefault(poll.scope, {})[poll] = None
        return poll

    def leave(self, poll: Poll, full: bool) -> None:
        """Unregister a call; `full`: its last claim leased all it asked for, so its scope may
        have more: the next waiting call of the scope claims now (the wake's chain)."""
        polls = self._scopes[poll.scope]
        del polls[poll]
        if not polls:
            del self._scopes[poll.scope]
        elif full:
            next(iter(polls)).event.set()
        self._per_tenant[poll.tenant] -= 1
        if not self._per_tenant[poll.tenant]:
            del self._per_tenant[poll.tenant]
        self._per_worker[(poll.tenant, poll.worker)] -= 1
        if not self._per_worker[(poll.tenant, poll.worker)]:
            del self._per_worker[(poll.tenant, poll.worker)]

    def is_head(self, poll: Poll) -> bool:
        """Whether `poll` is the oldest waiting call of its scope."""
        return next(iter(self._scopes[poll.scope])) is poll

    def heads(self) -> Iterator[Poll]:
        """The oldest waiting call of each scope."""
        for polls in self._scopes.values():
            yield next(iter(polls))

    def oldest_idle(self, tenant: str, n: int) -> list[Poll]:
        """The `n` oldest calls not woken yet that may take from `tenant`."""
        idle = [p for (scope, _), polls in self._scopes.items() if scope is None or scope == tenant
                for p in islice((p for p in polls if not p.event.is_set()), n)]  # each scope's oldest n
        return sorted(idle, key=lambda p: p.seq)[:n]
