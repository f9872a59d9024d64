"""The dependency plan (cluster/commands/dependencies.py), pure: references resolve to existing
executions or to jobs of the same call, and an unknown upstream, a cycle or a chain deeper than
the limit is refused naming the reference."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from cronwheel.cluster.commands import runs
from cronwheel.cluster.commands.dependencies import (
    MAX_DEPENDENCY_DEPTH,
    MAX_UPSTREAMS,
    Found,
    field_name,
    plan_dependencies,
)
from cronwheel.errors import InvalidArgument
from cronwheel.storage.dependencies import LockedUpstream
from cronwheel.storage.executions import SubmittedJob

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def job(key: str | None = None, after: tuple[str, ...] = (), policy: str | None = None,
        tenant: str = "acme") -> SubmittedJob:
    return runs.prepare_job(runs.JobSpec(tenant=tenant, type="step", idempotency_key=key, depends_on=after,
                                         dependency_policy=policy), NOW, 16)


def plan(jobs: list[SubmittedJob], found: dict[str, Found] | None = None,
         heights: dict[uuid.UUID, int] | None = None):  # type: ignore[no-untyped-def]
    return plan_dependencies(jobs, found or {}, heights or {}, field_name(batch=True))


def test_a_job_with_upstreams_is_prepared_waiting_with_the_default_policy() -> None:
    j = job("b", after=("a",))
    assert (j.state, j.depends_on, j.dependency_policy) == ("waiting", ("a",), "on_success")
    assert job("a").state == "queued" and job("a").dependency_policy is None


def test_a_chain_in_one_call_links_each_job_to_the_one_before() -> None:
    a, b, c = job("a"), job("b", after=("a",)), job("c", after=("b",))
    p = plan([a, b, c])
    assert p.upstreams == {b.id: (a.id,), c.id: (b.id,)}
    assert p.in_call == {b.id: (a.id,), c.id: (b.id,)}
    assert p.edges({a.id, b.id, c.id}) == [(b.id, a.id), (c.id, b.id)]


def test_a_fan_in_names_both_upstreams_once_each() -> None:
    a, b = job("a"), job("b")
    c = job("c", after=("a", "b", "a"))
    assert plan([a, b, c]).upstreams[c.id] == (a.id, b.id)


def test_an_existing_execution_is_named_by_id_or_by_key_and_wins_over_a_job_of_the_call() -> None:
    old = LockedUpstream(uuid.uuid4(), "a", "succeeded")
    a, b = job("a"), job("b", after=("a", str(old.id)))
    p = plan([a, b], {"acme": Found({old.id: old}, {"a": old})})
    assert p.upstreams[b.id] == (old.id,)  # the call's "a" is deduplicated to the existing one
    assert p.finished == frozenset({old.id}) and p.in_call[b.id] == ()


def test_an_unknown_upstream_is_refused_naming_the_reference() -> None:
    with pytest.raises(InvalidArgument) as ei:
        plan([job("a"), job("b", after=("a", "nope"))])
    assert ei.value.field == "jobs[1].depends_on[1]" and "unknown upstream 'nope'" in str(ei.value)


def test_another_tenants_key_is_unknown() -> None:
    with pytest.raises(InvalidArgument) as ei:
        plan([job("a", tenant="other"), job("b", after=("a",))])
    assert ei.value.field == "jobs[1].depends_on[0]"


def test_a_cycle_in_one_call_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgument) as ei:
        plan([job("a", after=("c",)), job("b", after=("a",)), job("c", after=("b",))])
    assert ei.value.field.startswith("jobs[") and ".depends_on[0]" in ei.value.field
    assert "cycle" in str(ei.value)


def test_a_job_naming_its_own_key_is_a_cycle() -> None:
    with pytest.raises(InvalidArgument, match="cycle") as ei:
        plan_dependencies([job("a", after=("a",))], {}, {}, field_name(batch=False))
    assert ei.value.field == "depends_on[0]"


def test_a_chain_deeper_than_the_limit_is_refused_and_the_limit_itself_is_accepted() -> None:
    def chain(n: int) -> list[SubmittedJob]:
        return [job("j0")] + [job(f"j{i}", after=(f"j{i - 1}",)) for i in range(1, n + 1)]

    plan(chain(MAX_DEPENDENCY_DEPTH))
    with pytest.raises(InvalidArgument, match="deeper than the limit") as ei:
        plan(chain(MAX_DEPENDENCY_DEPTH + 1))
    assert ei.value.field == f"jobs[{MAX_DEPENDENCY_DEPTH + 1}].depends_on[0]"


def test_the_depth_counts_the_existing_upstreams_chain() -> None:
    old = LockedUpstream(uuid.uuid4(), None, "waiting")
    found = {"acme": Found({old.id: old}, {})}
    plan([job("x", after=(str(old.id),))], found, {old.id: MAX_DEPENDENCY_DEPTH - 1})
    with pytest.raises(InvalidArgument, match="deeper"):
        plan([job("x", after=(str(old.id),))], found, {old.id: MAX_DEPENDENCY_DEPTH})


def test_bad_references_and_policies_are_refused_at_prepare() -> None:
    with pytest.raises(InvalidArgument) as ei:
        job("b", after=("a", " "))
    assert ei.value.field == "depends_on[1]"
    with pytest.raises(InvalidArgument) as ei:
        job("b", after=tuple(f"k{i}" for i in range(MAX_UPSTREAMS + 1)))
    assert ei.value.field == "depends_on"
    with pytest.raises(InvalidArgument) as ei:
        job("b", after=("a",), policy="sometimes")
    assert ei.value.field == "dependency_policy"
    with pytest.raises(InvalidArgument) as ei:
        job("b", policy="always")
    assert ei.value.field == "dependency_policy"
    assert job("b", after=("a",), policy="always").dependency_policy == "always"


def test_a_long_chain_named_before_its_upstreams_is_refused_as_too_deep_not_a_recursion_error() -> None:
    """The walk stops at the depth limit whatever the jobs' order: a call of thousands listing each
    dependent before its upstream made the depth walk recurse to the chain's end first (RecursionError,
    an internal error) before it checked the limit. Fails without the change."""
    def chain(n: int) -> list[SubmittedJob]:
        return [job("j0")] + [job(f"j{i}", after=(f"j{i - 1}",)) for i in range(1, n + 1)]

    plan(chain(MAX_DEPENDENCY_DEPTH)[::-1])  # the limit itself, dependents first: accepted
    with pytest.raises(InvalidArgument, match="deeper than the limit") as ei:
        plan(chain(MAX_DEPENDENCY_DEPTH + 1)[::-1])
    assert ei.value.field.startswith("jobs[") and ei.value.field.endswith("].depends_on[0]")
    with pytest.raises(InvalidArgument, match="deeper than the limit"):
        plan(chain(5_000)[::-1])
