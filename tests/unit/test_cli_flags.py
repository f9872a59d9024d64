"""The CLI's tables, without a server: every schedule field the API can refuse maps to a flag
that `schedule create` really has (FLAGS, the one field->flag table), the exit code of every
error class (cli.exit_code), zone suggestions and address hints."""

from __future__ import annotations

import argparse

import pytest

from cronwheel import errors
from cronwheel.cli.flags import FLAGS, check_address, closest_zone, flag_for
from cronwheel.cli.main import UsageError, build_parser, exit_code
from cronwheel.client import convert
from cronwheel.client import errors as client_errors


def _flags_of(argv: list[str]) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices[argv[0]]
    for word in argv[1:]:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return {o for a in p._actions for o in a.option_strings}


def test_every_schedule_field_maps_to_a_flag_schedule_create_has() -> None:
    create, update = _flags_of(["schedule", "create"]), _flags_of(["schedule", "update"])
    paths = [p for p, _ in convert.SCHEDULE_FIELDS.values()] + [
        f"{policy}.{sub}" for policy, sub in convert.POLICY_FIELDS.values()]
    for path in paths:
        if path in ("retry_policy", "dst_policy"):
            continue  # set through their fields' flags
        flag = flag_for(f"schedule.{path}", "schedule")
        assert flag in create and flag in update, (path, flag)
    assert all(v.startswith("--") or v.isupper() for v in FLAGS.values())


def test_range_paths_are_the_flags_of_each_command() -> None:
    assert flag_for("range.end_time", "schedule") == "--end"
    assert flag_for("range.end_time", "explain") == "--until"
    assert flag_for("jobs[3].retry_policy.max_attempts", "job") == "--max-attempts"
    assert flag_for("no.such.field", "schedule") is None


@pytest.mark.parametrize(("exc", "code"), [
    (UsageError("x"), 2), (errors.InvalidArgument("f", "bad"), 2),
    (client_errors.InvalidArgument("INVALID_ARGUMENT", "f: bad"), 2),
    (client_errors.Unavailable("UNAVAILABLE", "down"), 3), (errors.Unavailable("etcd"), 3),
    (client_errors.DeadlineExceeded("DEADLINE_EXCEEDED", "slow"), 3),
    (client_errors.NotFound("NOT_FOUND", "gone"), 1), (client_errors.FailedPrecondition("FAILED_PRECONDITION", ""), 1),
    (client_errors.PermissionDenied("PERMISSION_DENIED", ""), 1), (KeyboardInterrupt(), 130),
])
def test_exit_codes(exc: BaseException, code: int) -> None:
    assert exit_code(exc) == code


def test_a_zone_in_another_case_or_misspelt_suggests_the_real_one() -> None:
    assert closest_zone("europe/london") == "Europe/London"
    assert closest_zone("Europe/Londn") == "Europe/London"
    assert closest_zone("UTC") == "UTC"
    assert closest_zone("qqqqqqqqqq") is None


@pytest.mark.parametrize(("address", "hint"), [
    ("127.0.0.1", "did you mean 127.0.0.1:7070?"), ("http://node:7070", "did you mean node:7070?"),
    ("https://node", "did you mean node:7070 with --tls or --tls-ca?"), ("a:1,b", "'b' has no port"),
])
def test_address_mistakes_are_refused_with_what_was_meant(address: str, hint: str) -> None:
    with pytest.raises(errors.InvalidArgument) as err:
        check_address(address)
    assert err.value.field == "--address" and hint in str(err.value)


def test_good_addresses_pass() -> None:
    for a in ("127.0.0.1:7070", "a:1,b:2", "[::1]:7070", "unix:/tmp/s", "dns:///node:7070"):
        check_address(a)


def test_every_tenant_field_maps_to_a_flag_tenant_create_and_update_have() -> None:
    from cronwheel.client import calls

    create, update = _flags_of(["tenant", "create"]), _flags_of(["tenant", "update"])
    for name in calls.TENANT_INTS + calls.TENANT_OPTIONAL:
        for path in (f"tenant.{name}", name):  # the server's path and the Client's keyword
            flag = flag_for(path, "tenant")
            assert flag in create and flag in update, (path, flag)
    assert flag_for("tenant.id", "tenant") == "TENANT"


def test_the_node_flags_defaults_are_read_from_the_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cronwheel node`'s firing and webhook flags take their defaults from FiringConfig and
    WebhookConfig (one place): configs with other defaults move the flags' defaults with them."""
    import dataclasses

    from cronwheel.cli import commands
    from cronwheel.cluster.firing import config as firing_config
    from cronwheel.cluster.webhooks import config as webhook_config

    fields = [("horizon_s", float, 240.0), ("misfire_grace_s", float, 7.5), ("extend_every_s", float, 45.0)]
    firing = dataclasses.make_dataclass("Firing", fields, bases=(firing_config.FiringConfig,), frozen=True)
    hooks = {"timeout_s": 11.5, "lease_s": 61.5, "max_attempts": 13, "backoff_initial_s": 9.5,
             "backoff_max_s": 3601.5, "poll_s": 1.5, "per_tenant": 5}
    webhooks = dataclasses.make_dataclass("Webhooks", [(k, type(v), v) for k, v in hooks.items()],
                                          bases=(webhook_config.WebhookConfig,), frozen=True)
    monkeypatch.setattr(firing_config, "FiringConfig", firing)
    monkeypatch.setattr(webhook_config, "WebhookConfig", webhooks)
    args = build_parser().parse_args(["node", "--etcd", "127.0.0.1:2379"])
    assert (args.horizon, args.misfire_grace) == (240.0, 7.5)
    got = commands._webhook_config(args)
    assert {k: getattr(got, k) for k in hooks} == hooks
