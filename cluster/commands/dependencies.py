"""Job B after job A: submitting jobs that wait for others (issue 52, item 1).

A job names its upstreams in `depends_on`, each by execution id or by idempotency key, in the
job's tenant: an existing execution, or a job of the same SubmitJobs call (by its key), so a
chain or a fan-in goes in one call. It is stored `waiting` with one execution_deps row per
upstream, and is released (queued) in the transaction that finishes its last upstream, by the
trigger `executions_release_dependents` (migration 0024). An upstream that ends failed, dead,
cancelled or skipped cancels it, naming the upstream ("upstream <id> ended dead"), unless its
`dependency_policy` is "always" (it runs once every upstream finished, whatever the outcome).

Refused (InvalidArgument naming `depends_on[k]`, or `jobs[i].depends_on[k]` in SubmitJobs):
an upstream that names no execution of the tenant and no job of the call, a cycle among the
jobs of the call (a job cannot name an existing execution that waits for it: that one was
stored first), more than MAX_UPSTREAMS upstreams, and a chain deeper than
MAX_DEPENDENCY_DEPTH (a job with no upstream has depth 0; a job, 1 + its deepest upstream's).

The plan (`plan_dependencies`) is pure: the resolution, the cycle and depth checks, and what the
submit writes, from the upstreams read under their row locks. The shell (`DependencyLinker`) runs
it inside the submit's one transaction (runs.write_jobs' counted path): lock the upstreams,
plan, insert the jobs, write the edges, resolve at once the edges of upstreams that had
already finished, and read the dependents back as linked (the answer of SubmitJob and SubmitJobs).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from cronwheel.cluster.dispatch.policy import TERMINAL_STATES
from cronwheel.errors import InvalidArgument, Unavailable
from cronwheel.storage import PgStore
from cronwheel.storage.api import Conn, Row
from cronwheel.storage.dependencies import DependentMark, LockedUpstream
from cronwheel.storage.executions import SubmittedJob

MAX_DEPENDENCY_DEPTH = 20  # a chain of at most 21 jobs (A -> ... -> U)
MAX_UPSTREAMS = 100  # upstreams one job may name
POLICIES = ("on_success", "always")
FINISHED = TERMINAL_STATES | {"skipped"}  # the trigger's list (executions_release_dependents)


def check_depends_on(refs: Sequence[str], policy: str | None) -> tuple[tuple[str, ...], str | None]:
    """Validate a job's own fields (no I/O): the references, distinct, 1..200 characters each,
    at most MAX_UPSTREAMS; the policy ('on_success' by default, only with upstreams)."""
    if len(refs) > MAX_UPSTREAMS:
        raise InvalidArgument("depends_on", f"at most {MAX_UPSTREAMS} upstreams, got {len(refs)}")
    out: list[str] = []
    for k, ref in enumerate(refs):
        v = ref.strip() if isinstance(ref, str) else ""
        if not v:
            raise InvalidArgument(f"depends_on[{k}]", "must name an execution id or an idempotency key")
        if len(v) > 200:
            raise InvalidArgument(f"depends_on[{k}]", f"must be at most 200 characters, got {len(v)}")
        out.append(v)
    if policy is not None and policy not in POLICIES:
        raise InvalidArgument("dependency_policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not out:
        if policy not in (None, "on_success"):
            raise InvalidArgument("dependency_policy", "applies only to a job with depends_on")
        return (), None
    return tuple(out), policy or "on_success"


def as_id(ref: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(ref)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Found:
    """The existing executions a call's references named, of one tenant, as locked."""

    by_id: dict[uuid.UUID, LockedUpstream] = field(default_factory=dict)
    by_key: dict[str, LockedUpstream] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a call's submit writes for its dependencies (ids are the jobs' own, given by
    prepare_job): the edges, per dependent its distinct upstream ids, which jobs of the call are
    upstreams of others, and the existing upstreams already finished (resolved at once)."""

    upstreams: dict[uuid.UUID, tuple[uuid.UUID, ...]]  # dependent id -> distinct upstream ids
    policy: dict[uuid.UUID, str]
    in_call: dict[uuid.UUID, tuple[uuid.UUID, ...]]  # dependent id -> the upstreams that are jobs of the call
    finished: frozenset[uuid.UUID]  # existing upstreams already finished when locked

    def edges(self, inserted: set[uuid.UUID]) -> list[tuple[uuid.UUID, uuid.UUID]]:
        return [(d, u) for d, ups in self.upstreams.items() if d in inserted for u in ups]


def field_name(batch: bool) -> Callable[[int, int], str]:
    return (lambda i, k: f"jobs[{i}].depends_on[{k}]") if batch else (lambda i, k: f"depends_on[{k}]")


def plan_dependencies(jobs: Sequence[SubmittedJob], found: dict[str, Found], heights: dict[uuid.UUID, int],
                      name: Callable[[int, int], str]) -> Plan:
    """Resolve every job's references, refuse unknown upstreams, cycles and chains deeper than
    MAX_DEPENDENCY_DEPTH (InvalidArgument naming the reference), and say what to write.
    A reference is, in this order: the id of an existing execution of the job's tenant, the
    idempotency key of an existing one (a job of the call with that key is deduplicated to it),
    the idempotency key of an earlier or later job of the call."""
    key_of_call: dict[tuple[str, str], int] = {}
    for i, j in enumerate(jobs):
        if j.idempotency_key is not None:
            key_of_call.setdefault((j.tenant, j.idempotency_key), i)
    # resolved[i]: (k, existing upstream | None, job index | None) per reference
    resolved: dict[int, list[tuple[int, LockedUpstream | None, int | None]]] = {}
    for i, j in enumerate(jobs):
        if not j.depends_on:
            continue
        f = found.get(j.tenant, Found())
        out = []
        for k, ref in enumerate(j.depends_on):
            rid = as_id(ref)
            hit = f.by_id.get(rid) if rid is not None else None
            if hit is None:
                hit = f.by_key.get(ref)
            batch = key_of_call.get((j.tenant, ref)) if hit is None else None
            if hit is None and batch is None:
                raise InvalidArgument(name(i, k), f"unknown upstream {ref!r}: no execution of tenant {j.tenant} has "
                                                  f"this id or idempotency key, nor does a job of this call")
            if batch == i:
                raise InvalidArgument(name(i, k), f"cycle: the job names its own idempotency key {ref!r}")
            out.append((k, hit, batch))
        resolved[i] = out
    depth: dict[int, int] = {}
    on_path: set[int] = set()

    def too_deep(i: int, k: int) -> InvalidArgument:
        return InvalidArgument(name(i, k), f"the chain of upstreams is deeper than the limit of {MAX_DEPENDENCY_DEPTH}")

    def height(i: int) -> int:  # recursion bounded by the limit: on_path is the chain of dependents above i
        if i in depth:
            return depth[i]
        on_path.add(i)
        best = 0
        for k, hit, batch in resolved.get(i, ()):
            if hit is not None:
                h = heights.get(hit.id, 0) + 1
            else:
                assert batch is not None
                if batch in on_path:
                    raise InvalidArgument(name(i, k), f"cycle: jobs[{i}] and jobs[{batch}] wait for each other "
                                                      f"(through depends_on)")
                if len(on_path) > MAX_DEPENDENCY_DEPTH:  # the top of the path is already too deep: stop here
                    raise too_deep(i, k)
                h = height(batch) + 1
            if h > MAX_DEPENDENCY_DEPTH:
                raise too_deep(i, k)
            best = max(best, h)
        on_path.discard(i)
        depth[i] = best
        return best

    for i in resolved:
        height(i)
    upstreams: dict[uuid.UUID, tuple[uuid.UUID, ...]] = {}
    in_call: dict[uuid.UUID, tuple[uuid.UUID, ...]] = {}
    policy: dict[uuid.UUID, str] = {}
    finished: set[uuid.UUID] = set()
    for i, refs in resolved.items():
        j = jobs[i]
        ups: dict[uuid.UUID, None] = {}
        mine: dict[uuid.UUID, None] = {}
        for _k, hit, batch in refs:
            if hit is not None:
                ups[hit.id] = None
                if hit.state in FINISHED:
                    finished.add(hit.id)
            else:
                assert batch is not None
                ups[jobs[batch].id] = None
                mine[jobs[batch].id] = None
        upstreams[j.id] = tuple(ups)
        in_call[j.id] = tuple(mine)
        policy[j.id] = j.dependency_policy or "on_success"
    return Plan(upstreams, policy, in_call, frozenset(finished))


class DependencyLinker:
    """The shell of a submit with dependencies, run by runs.write_jobs inside its transaction:
    `before` (lock the named upstreams, plan; refuses before anything is written) and `after`
    (the edges and marks of the jobs inserted). Not task-safe: one per call."""

    def __init__(self, store: PgStore, batch: bool) -> None:
        self.port = store.dependencies
        self.name = field_name(batch)
        self.plan: Plan | None = None

    async def before(self, conn: Conn, jobs: Sequence[SubmittedJob]) -> None:
        found: dict[str, Found] = {}
        tenants = sorted({j.tenant for j in jobs if j.depends_on})
        for t in tenants:  # in tenant order: two calls lock their tenants' upstreams in one order
            refs = {r for j in jobs if j.tenant == t for r in j.depends_on}
            ids = sorted({i for r in refs if (i := as_id(r)) is not None})
            locked = await self.port.lock_upstreams(conn, t, ids, sorted(refs))
            found[t] = Found({u.id: u for u in locked},
                             {u.idempotency_key: u for u in locked if u.idempotency_key is not None})
        existing = sorted({u.id for f in found.values() for u in f.by_id.values()})
        heights = await self.port.upstream_heights(conn, existing, MAX_DEPENDENCY_DEPTH)
        self.plan = plan_dependencies(jobs, found, heights, self.name)

    async def after(self, conn: Conn, inserted: set[uuid.UUID], now: datetime) -> list[Row]:
        """Link the inserted dependents; their rows as linked (what the submit answers)."""
        plan = self.plan
        assert plan is not None, "before() runs first"
        dependents = [d for d in plan.upstreams if d in inserted]  # deduplicated ones keep their own
        if any(u not in inserted for d in dependents for u in plan.in_call[d]):
            # an upstream of the call was not inserted: its key was taken by a concurrent call
            # after this one read it (rolled back: nothing of the call is stored)
            raise Unavailable("postgres", "an upstream's idempotency key was taken by a concurrent call; "
                                          "submit again with the same keys")
        ups_in_call = {u for d in dependents for u in plan.in_call[d]}
        marks = [DependentMark(x, len(plan.upstreams[x]) if x in plan.upstreams else None,
                               plan.policy.get(x), x in ups_in_call)
                 for x in sorted(set(dependents) | ups_in_call)]
        finished = sorted({u for d in dependents for u in plan.upstreams[d] if u in plan.finished})
        await self.port.link(conn, plan.edges(inserted), marks, finished, now)
        return await self.port.rows_of(conn, dependents)
