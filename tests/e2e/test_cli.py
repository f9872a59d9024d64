"""The CLI as a user meets it: bad flags and unreachable servers give one clear line."""

from __future__ import annotations

import pytest

from .helpers import run_cli

pytestmark = pytest.mark.e2e


def assert_one_clear_line(stderr: str, *needles: str) -> None:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cronwheel: error: "), stderr
    assert "Traceback" not in stderr
    for n in needles:
        assert n in lines[0], (n, stderr)


def test_unknown_flag_exits_2_naming_the_flag() -> None:
    r = run_cli("migrate", "--no-such-flag")
    assert r.returncode == 2
    assert_one_clear_line(r.stderr, "--no-such-flag")


def test_unknown_command_exits_2() -> None:
    r = run_cli("frobnicate")
    assert r.returncode == 2
    assert_one_clear_line(r.stderr, "frobnicate")


def test_bad_flag_value_names_the_flag() -> None:
    r = run_cli("migrate", "--dsn", "postgresql://x@127.0.0.1:1/x", "--partitions", "0")
    assert r.returncode == 2
    assert_one_clear_line(r.stderr, "--partitions")


def test_unreachable_database_exits_3_with_one_line() -> None:
    r = run_cli("migrate", "--dsn", "postgresql://postgres@127.0.0.1:1/nope")
    assert r.returncode == 3
    assert_one_clear_line(r.stderr, "postgres", "127.0.0.1:1")


def test_missing_dsn_names_the_flag() -> None:
    r = run_cli("migrate", env={"CRONWHEEL_DSN": ""})
    assert r.returncode == 2
    assert_one_clear_line(r.stderr, "--dsn")


def test_version() -> None:
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("cronwheel ")
