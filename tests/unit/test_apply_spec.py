"""The parts of `cronwheel apply` that need no server: spec checking (Client.apply refuses a bad
spec before any call, naming index, name and key), durations, the field diff, and the YAML
loader's line numbers."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest

from cronwheel.cli.apply import BadFile, load
from cronwheel.client import RetryPolicy, SpecError, calls
from cronwheel.client import apply as a
from cronwheel.clock import FakeClock

CTX = calls.Context(FakeClock())
BASE = {"name": "n", "cron": "0 3 * * *", "timezone": "UTC", "job_type": "j", "misfire_policy": "skip"}


def refusal(**spec: object) -> SpecError:
    with pytest.raises(SpecError) as exc:
        a.check_specs(CTX, [BASE, {**BASE, "name": "second", **spec}], None)
    return exc.value


def test_spec_keys_are_create_schedules_keyword_arguments() -> None:
    params = set(inspect.signature(calls.create_schedule).parameters) - {"ctx", "tenant", "id"}
    assert set(a.SPEC_KEYS) == params
    assert a.REQUIRED == ("name", "cron", "job_type", "timezone", "misfire_policy")


@pytest.mark.parametrize(("spec", "key", "detail"), [
    ({"retentoin": 3}, "retentoin", "unknown key"),
    ({"timezone": None}, "timezone", "required"),
    ({"misfire_policy": "sometimes"}, "misfire_policy", "expected one of skip, run_once, catch_up"),
    ({"cron": 5}, "cron", "expected text"),
    ({"paused": "yes"}, "paused", "expected bool"),
    ({"priority": None}, "priority", "null is not allowed"),
    ({"jitter": "5 minutes"}, "jitter", "expected a duration"),
    ({"retry_policy": {"max_attempt": 3}}, "retry_policy.max_attempt", "unknown key"),
    ({"retry_policy": {"initial_backoff": "soon"}}, "retry_policy.initial_backoff", "expected a duration"),
    ({"dst_policy": {"gap": "leap"}}, "dst_policy.gap", "expected one of shift, skip"),
    ({"payload": {"when": object()}}, "payload", "not JSON"),
    ({"name": "n"}, "name", "the same name as specs[0]"),
])
def test_a_bad_spec_is_refused_naming_index_name_and_key(spec: dict[str, object], key: str, detail: str) -> None:
    err = refusal(**spec)
    assert (err.index, err.key, err.field) == (1, key, f"specs[1].{key}")
    assert err.name == spec.get("name", "second") and detail in err.detail, err


def test_durations_are_timedeltas_seconds_or_text() -> None:
    assert a.parse_duration("1h30m") == timedelta(minutes=90)
    assert a.parse_duration("250ms") == timedelta(milliseconds=250)
    assert a.parse_duration(90) == a.parse_duration("90s") == timedelta(seconds=90)
    assert a.format_duration(timedelta(days=1, seconds=3661.5)) == "1d1h1m1.5s"
    for bad in ("", "5", "5 minutes", "1x", True):
        with pytest.raises(ValueError):
            a.parse_duration(bad)


def test_the_diff_compares_only_what_the_spec_gives() -> None:
    current = RetryPolicy(timedelta(seconds=30), 4.0, timedelta(hours=6), 5)
    assert a.diff("retry_policy", RetryPolicy(max_attempts=5), current) == []
    assert a.diff("retry_policy", RetryPolicy(max_attempts=3), current) == [
        a.FieldChange("retry_policy.max_attempts", 5, 3)]
    assert a.diff("jitter", timedelta(0), None) == [] and a.diff("payload", None, {}) == []
    assert a.diff("cron", " 0 3 * * * ", "0 3 * * *") == []


def test_the_loader_keeps_each_keys_line() -> None:
    tenant, specs, marks = load("tenant: acme\nschedules:\n  - name: a\n    retry_policy:\n"
                                "      max_attempts: 3\n  - name: b\n")
    assert tenant == "acme" and specs == [{"name": "a", "retry_policy": {"max_attempts": 3}}, {"name": "b"}]
    assert (marks[0].line, marks[0].of("retry_policy"), marks[0].of("retry_policy.max_attempts")) == (3, 4, 5)
    assert (marks[1].line, marks[1].of("cron")) == (6, 6)  # a missing key: the spec's line


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("schedules:\n  - name: a\n    cron: */5 * * * *\n", 3, "quote values"),
    ("schedules:\n  - name: a\n    name: b\n", 3, "duplicate key 'name'"),
    ("schedule:\n  - name: a\n", 1, "schedules:"),
    ("schedules: []\nextra: 1\n", 2, "extra: unknown key"),
    ("schedules:\n  name: a\n", 1, "expected a list"),
    ("schedules:\n  - just text\n", 1, "schedules[0]: expected a mapping"),
])
def test_a_bad_file_names_its_line(text: str, line: int, needle: str) -> None:
    with pytest.raises(BadFile) as exc:
        load(text)
    assert exc.value.line == line and needle in exc.value.message, exc.value.message
