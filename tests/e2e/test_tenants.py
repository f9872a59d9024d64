"""The tenant API against a real cluster (PostgreSQL, etcd, a node process with an auth file):
admins create, read, change and list tenants; bad values are refused naming the field and store
nothing; the quotas set through the API are enforced (RESOURCE_EXHAUSTED naming the quota,
nothing stored); tenant tokens cannot call it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.client import (
    AlreadyExists,
    Client,
    InvalidArgument,
    JobSpec,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from cronwheel.devtools.harness import ProcessCluster

from .api_cluster import TOKENS, YEARLY, api_cluster
from .helpers import run_cli, wait_until

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def admin(node: tuple[ProcessCluster, str]) -> Iterator[Client]:
    with Client(node[1], token=TOKENS["admin"][0]) as client:
        yield client


def test_admin_creates_reads_changes_and_lists_tenants(admin: Client) -> None:
    made = admin.create_tenant("t-crud", rate_per_s=100, burst=20, weight=3, max_schedules=10)
    assert (made.max_concurrency, made.rate_per_s, made.burst, made.weight) == (1000, 100.0, 20.0, 3)
    assert (made.max_schedules, made.max_executions_per_day) == (10, None) and made.created_at is not None
    assert admin.get_tenant("t-crud") == made
    changed = admin.update_tenant("t-crud", max_concurrency=5, max_executions_per_day=1000, burst=None)
    assert (changed.max_concurrency, changed.max_executions_per_day, changed.burst) == (5, 1000, None)
    assert (changed.rate_per_s, changed.weight, changed.max_schedules) == (100.0, 3, 10)  # not in the mask
    cleared = admin.update_tenant("t-crud", rate_per_s=None, max_schedules=None)
    assert (cleared.rate_per_s, cleared.max_schedules) == (None, None)
    with pytest.raises(AlreadyExists):
        admin.create_tenant("t-crud")
    admin.create_tenant("t-crud-2")
    listed = [t.id for t in admin.list_tenants(page_size=1)]  # follows pages
    assert listed == sorted(listed) and {"t-crud", "t-crud-2"} <= set(listed)
    audit = [(e.kind, e.actor, e.data) for e in admin.events(tenant="t-crud") if e.kind.startswith("tenant_")]
    assert [a[:2] for a in audit] == [("tenant_created", "ops"), ("tenant_updated", "ops"), ("tenant_updated", "ops")]
    assert audit[1][2]["changed"]["max_concurrency"] == [1000, 5] and "weight" not in audit[1][2]["changed"]


@pytest.mark.parametrize(("fields", "field"), [
    ({"max_concurrency": -1}, "tenant.max_concurrency"),
    ({"rate_per_s": 0.0}, "tenant.rate_per_s"),
    ({"rate_per_s": float("inf")}, "tenant.rate_per_s"),
    ({"burst": 5.0}, "tenant.burst"),  # a burst needs a rate
    ({"weight": 5000}, "tenant.weight"),
    ({"max_schedules": 0}, "tenant.max_schedules"),
    ({"max_executions_per_day": -3}, "tenant.max_executions_per_day"),
])
def test_a_bad_tenant_field_is_named_and_nothing_is_stored(admin: Client, fields: dict[str, object],
                                                           field: str) -> None:
    with pytest.raises(InvalidArgument, match=f"^{field}: "):
        admin.create_tenant("t-bad", **fields)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        admin.get_tenant("t-bad")


def test_a_bad_update_is_named_and_changes_nothing(admin: Client) -> None:
    before = admin.create_tenant("t-upd", max_concurrency=7)
    with pytest.raises(InvalidArgument, match="^tenant.burst: "):
        admin.update_tenant("t-upd", burst=10.0, max_concurrency=9)
    with pytest.raises(InvalidArgument, match="^tenant.weight: "):
        admin.update_tenant("t-upd", weight=0)
    with pytest.raises(NotFound):
        admin.update_tenant("t-nobody", weight=2)
    with pytest.raises(InvalidArgument, match="^tenant.id: "):
        admin.update_tenant("", weight=2)
    assert admin.get_tenant("t-upd") == before


def test_a_tenant_token_cannot_call_the_tenant_rpcs(node: tuple[ProcessCluster, str]) -> None:
    with Client(node[1], token=TOKENS["acme"][0]) as acme:
        for call in (lambda: acme.create_tenant("acme"), lambda: acme.get_tenant("acme"),
                     lambda: list(acme.list_tenants()), lambda: acme.update_tenant("acme", weight=9)):
            with pytest.raises(PermissionDenied, match="admin-only"):
                call()


def test_schedule_quota_set_through_the_api_refuses_naming_it_and_stores_nothing(admin: Client) -> None:
    admin.create_tenant("t-sq", max_schedules=2)
    for i in range(2):
        admin.create_schedule(f"s{i}", YEARLY, "job", timezone="UTC", misfire_policy="skip", tenant="t-sq")
    with pytest.raises(ResourceExhausted, match="^max_schedules: "):
        admin.create_schedule("s2", YEARLY, "job", timezone="UTC", misfire_policy="skip", tenant="t-sq")
    assert sorted(s.name for s in admin.list_schedules(tenant="t-sq")) == ["s0", "s1"]
    admin.update_tenant("t-sq", max_schedules=3)  # raised through the API: room for one more
    admin.create_schedule("s2", YEARLY, "job", timezone="UTC", misfire_policy="skip", tenant="t-sq")


def test_daily_quota_set_through_the_api_refuses_naming_it_and_stores_nothing(admin: Client) -> None:
    admin.create_tenant("t-dq", max_executions_per_day=3)
    for i in range(2):
        admin.submit("job", {"i": i}, tenant="t-dq")
    with pytest.raises(ResourceExhausted, match="^max_executions_per_day: "):
        admin.submit_many([JobSpec("job", {"i": i}, tenant="t-dq") for i in range(2, 4)])  # 2 more: over
    admin.submit("job", {"i": 2}, tenant="t-dq")  # the third fits
    with pytest.raises(ResourceExhausted, match="^max_executions_per_day: "):
        admin.submit("job", {"i": 3}, tenant="t-dq")
    assert len(list(admin.list_executions(tenant="t-dq"))) == 3
    admin.update_tenant("t-dq", max_executions_per_day=None)  # cleared: no quota
    admin.submit("job", {"i": 4}, tenant="t-dq")


def _cli(node: tuple[ProcessCluster, str], *args: str, token: str = "admin") -> Any:
    return run_cli(*args, "--address", node[1], env={"CRONWHEEL_TOKEN": TOKENS[token][0]})


def test_cli_tenant_create_update_get_list(node: tuple[ProcessCluster, str]) -> None:
    made = _cli(node, "tenant", "create", "t-cli", "--rate-per-s", "50", "--max-schedules", "5", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) | {"created_at": None} == {
        "id": "t-cli", "max_concurrency": 1000, "rate_per_s": 50.0, "burst": None, "weight": 1,
        "max_schedules": 5, "max_executions_per_day": None, "created_at": None, "egress_rules": [], "queues": []}
    upd = _cli(node, "tenant", "update", "t-cli", "--rate-per-s", "none", "--weight", "4")
    assert upd.returncode == 0 and "rate_per_s=-" in upd.stdout and "weight=4" in upd.stdout, upd.stderr
    got = _cli(node, "tenant", "get", "t-cli", "--json")
    assert json.loads(got.stdout)["weight"] == 4
    assert "t-cli " in _cli(node, "tenant", "list").stdout
    bad = _cli(node, "tenant", "create", "t-cli-bad", "--weight", "0", "--burst", "3")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "--burst" in bad.stderr, bad.stderr
    denied = _cli(node, "tenant", "list", token="acme")
    assert denied.returncode != 0 and "admin-only" in denied.stderr


APPLY = """\
tenants:
  - id: t-apply
    rate_per_s: 20
    weight: 2
    max_schedules: 3
  - id: t-apply-2
tenant: t-apply
schedules:
  - name: nightly
    cron: "0 0 1 1 *"
    timezone: UTC
    job_type: job
    misfire_policy: skip
"""


def test_apply_file_with_tenants_plans_creates_updates_and_is_a_no_op_the_second_time(
        node: tuple[ProcessCluster, str], tmp_path: Path) -> None:
    f = tmp_path / "cw.yaml"
    f.write_text(APPLY)
    dry = _cli(node, "apply", "-f", str(f), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "+ create    tenant t-apply" in dry.stdout and "Tenants: 2 to create" in dry.stdout
    first = _cli(node, "apply", "-f", str(f))
    assert first.returncode == 0, first.stderr
    with Client(node[1], token=TOKENS["admin"][0]) as admin:
        t = admin.get_tenant("t-apply")
        assert (t.rate_per_s, t.weight, t.max_schedules) == (20.0, 2, 3)
        assert [s.name for s in admin.list_schedules(tenant="t-apply")] == ["nightly"]
    again = _cli(node, "apply", "-f", str(f))
    assert "Tenants: 0 to create, 0 to update, 2 unchanged." in again.stdout, again.stdout
    f.write_text(APPLY.replace("rate_per_s: 20", "rate_per_s: null").replace("weight: 2", "weight: 5"))
    changed = _cli(node, "apply", "-f", str(f))
    assert "~ update    tenant t-apply" in changed.stdout and "rate_per_s: 20.0 -> (unset)" in changed.stdout
    with Client(node[1], token=TOKENS["admin"][0]) as admin:
        t = admin.get_tenant("t-apply")
        assert (t.rate_per_s, t.weight) == (None, 5)
    f.write_text(APPLY.replace("weight: 2", "wieght: 2").replace("max_schedules: 3", "max_schedules: 9"))
    bad = _cli(node, "apply", "-f", str(f))
    assert bad.returncode == 2 and f"{f}:4: tenants[0].wieght (tenant 't-apply'): unknown key" in bad.stderr, bad.stderr
    with Client(node[1], token=TOKENS["admin"][0]) as admin:
        assert admin.get_tenant("t-apply").max_schedules == 3  # nothing changed


def test_cron_ticks_past_the_daily_quota_are_recorded_skipped_and_explained(admin: Client) -> None:
    admin.create_tenant("t-cq", max_executions_per_day=3)
    admin.submit("job", tenant="t-cq")  # one of the three
    start = datetime.now(UTC) - timedelta(seconds=1)
    plain = admin.create_schedule("every-second", "* * * * * *", "job", timezone="UTC", misfire_policy="skip",
                                  tenant="t-cq")  # overlap allow: the plain fire path

    def ticks(schedule_id: str) -> list[Any]:
        return list(admin.list_executions(schedule_id=schedule_id))

    wait_until(lambda: sum(e.state == "skipped" for e in ticks(plain.id)) >= 2, 20, "two ticks past the quota")
    policed = admin.create_schedule("every-second-forbid", "* * * * * *", "job", timezone="UTC",
                                    misfire_policy="skip", overlap_policy="forbid", tenant="t-cq")  # fire_executions
    wait_until(lambda: len(ticks(policed.id)) >= 2, 20, "two ticks of the policed schedule")
    runs = ticks(plain.id) + ticks(policed.id)
    assert sum(e.state != "skipped" for e in runs) == 2  # 3 - the submitted job: the quota held
    skipped = [e for e in runs if e.state == "skipped"]
    assert skipped and all(e.state_reason == "quota: max_executions_per_day 3 used up (UTC day)" for e in skipped)
    assert {e.schedule_id for e in skipped} == {plain.id, policed.id}
    with pytest.raises(ResourceExhausted, match="^max_executions_per_day: "):
        admin.submit("job", tenant="t-cq")  # the skip records do not free any room
    admin.pause(plain.id)
    admin.pause(policed.id)
    told = {x.scheduled_for: x for x in admin.explain(plain.id, start).ticks}
    by_quota = [x for x in told.values() if x.outcome == "skipped_quota"]
    assert by_quota and all("max_executions_per_day" in x.reason and x.execution_id for x in by_quota)
