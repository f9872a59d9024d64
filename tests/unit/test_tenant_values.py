"""The tenant API's validation (cluster/commands/tenants.py) and every node's token cache
(cluster/api/tokens.py) on a FakeClock: fields are named, expiry is exact, a stale copy fails
closed."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from cronwheel import errors as e
from cronwheel.clock import FakeClock
from cronwheel.cluster.api.auth import AuthConfig, Caller, admin_only
from cronwheel.cluster.api.tokens import TokenCache
from cronwheel.cluster.commands import tenants as cmd
from cronwheel.errors import InvalidArgument
from cronwheel.token_format import hash_token


def test_a_new_tenant_takes_the_defaults_for_zero_and_no_limits_for_unset() -> None:
    t = cmd.new_tenant("acme")
    assert (t.max_concurrency, t.weight, t.rate_per_s, t.burst, t.max_schedules, t.max_executions_per_day) == (
        1000, 1, None, None, None, None)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tenant_id": " "}, "tenant.id"),
    ({"max_concurrency": 1_000_001}, "tenant.max_concurrency"),
    ({"rate_per_s": float("nan")}, "tenant.rate_per_s"),
    ({"rate_per_s": -1.0}, "tenant.rate_per_s"),
    ({"rate_per_s": 10.0, "burst": 0.5}, "tenant.burst"),
    ({"burst": 10.0}, "tenant.burst"),
    ({"weight": -1}, "tenant.weight"),
    ({"max_schedules": 0}, "tenant.max_schedules"),
    ({"max_executions_per_day": 2**31}, "tenant.max_executions_per_day"),
])
def test_each_bad_value_names_its_field(kwargs: dict[str, Any], field: str) -> None:
    args = {"tenant_id": "acme", **kwargs}
    with pytest.raises(InvalidArgument) as ei:
        cmd.new_tenant(**args)
    assert ei.value.field == field


def test_an_update_mask_names_only_settable_fields_once() -> None:
    assert cmd.mask(["rate_per_s", "tenant.weight"]) == ["rate_per_s", "weight"]
    for paths in ([], ["id"], ["created_at"], ["weight", "weight"]):
        with pytest.raises(InvalidArgument) as ei:
            cmd.mask(paths)
        assert ei.value.field == "update_mask"


def test_clearing_the_rate_of_a_tenant_with_a_burst_is_refused() -> None:
    t = cmd.new_tenant("acme", rate_per_s=10, burst=50)
    with pytest.raises(InvalidArgument) as ei:
        cmd.merged(t, {"rate_per_s": None})
    assert ei.value.field == "tenant.burst"
    assert cmd.merged(t, {"rate_per_s": None, "burst": None}).rate_per_s is None


def test_tenant_and_token_rpcs_are_admin_only() -> None:
    assert admin_only("/cronwheel.v1.TenantService/CreateToken")
    assert admin_only("/cronwheel.v1.AdminService/ClusterStatus")
    assert not admin_only("/cronwheel.v1.SchedulerService/ListSchedules")


def _cache(clock: FakeClock, tokens: list[dict[str, Any]]) -> TokenCache:
    async def live() -> list[dict[str, Any]]:
        return list(tokens)

    return TokenCache(live, clock, interval_s=1.0, stale_s=10.0)


def _meta(secret: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


def test_an_api_made_token_expires_exactly_at_its_expiry() -> None:
    clock = FakeClock()
    rows = [{"sha256": hash_token("s1"), "name": "ci", "tenant": "acme", "admin": False,
             "expires_at": clock.now() + timedelta(seconds=5)}]
    cache = _cache(clock, rows)
    asyncio.run(cache.refresh())
    auth = AuthConfig(tokens={hash_token("boot"): Caller("ops", None, admin=True)})
    assert auth.authenticate(_meta("s1"), cache, clock.now()) == Caller("ci", "acme", False)
    clock.advance(4.999)
    auth.authenticate(_meta("s1"), cache, clock.now())
    clock.advance(0.001)
    with pytest.raises(e.Unauthenticated, match="token expired"):
        auth.authenticate(_meta("s1"), cache, clock.now())
    assert auth.authenticate(_meta("boot"), cache, clock.now()).admin  # the auth file's token


def test_a_revocation_is_seen_at_the_next_refresh_and_a_stale_copy_fails_closed() -> None:
    clock = FakeClock()
    rows = [{"sha256": hash_token("s1"), "name": "ci", "tenant": "acme", "admin": False, "expires_at": None}]
    cache = _cache(clock, rows)
    auth = AuthConfig(tokens={})
    asyncio.run(cache.refresh())
    assert auth.authenticate(_meta("s1"), cache, clock.now()).tenant == "acme"
    clock.advance(10.5)  # no refresh for longer than stale_s: the copy may miss a revocation
    with pytest.raises(e.Unavailable, match="stale"):
        auth.authenticate(_meta("s1"), cache, clock.now())
    rows.clear()  # revoked
    asyncio.run(cache.refresh())
    with pytest.raises(e.Unauthenticated, match="unknown token"):
        auth.authenticate(_meta("s1"), cache, clock.now())


def test_the_refresh_loop_rereads_every_interval_on_the_clock() -> None:
    clock = FakeClock()
    reads = 0

    async def live() -> list[dict[str, Any]]:
        nonlocal reads
        reads += 1
        return []

    async def scenario() -> None:
        task = asyncio.create_task(TokenCache(live, clock, interval_s=1.0).run())
        for want in (1, 2, 3):
            while reads < want:
                await asyncio.sleep(0)
            await clock.until_asleep()
            clock.advance(1.0)
        task.cancel()

    asyncio.run(scenario())
    assert reads >= 3
