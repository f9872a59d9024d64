"""The unique key of a unique job (cluster/commands/unique.py): what makes two submissions the same
job, and the validation of the options. Pure: no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronwheel.cluster.commands.unique import DEFAULT_STATES, UniqueSpec, unique_key, validate
from cronwheel.errors import InvalidArgument
from cronwheel.storage.executions import unique_states_mask

T = datetime(2026, 12, 1, 10, 30, tzinfo=UTC)
ARGS = UniqueSpec(by_args=True)
BY_ARGS = validate(ARGS)


def key(payload: str, spec: UniqueSpec = ARGS, tenant: str = "acme", job_type: str = "refresh",
        run_at: datetime = T) -> bytes:
    return unique_key(validate(spec), tenant, job_type, payload, run_at)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


def _as_floats(v: Any) -> Any:
    """The same JSON value with every integer written as a float literal (1 -> 1.0)."""
    if isinstance(v, dict):
        return {k: _as_floats(x) for k, x in reversed(list(v.items()))}
    if isinstance(v, list):
        return [_as_floats(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool):
        return _Float(v)
    return v


class _Float(int):
    pass


def _dumps_with_floats(v: Any) -> str:
    if isinstance(v, dict):
        return "{ " + " , ".join(f"{json.dumps(k)} : {_dumps_with_floats(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[ " + ", ".join(_dumps_with_floats(x) for x in v) + " ]"
    if isinstance(v, _Float):
        return f"{int(v)}.0"
    return json.dumps(v)


@given(json_values)
def test_the_same_json_value_written_differently_is_the_same_job(value: Any) -> None:
    plain = json.dumps(value)
    assert key(plain) == key(_dumps_with_floats(_as_floats(value)))  # key order, spaces, 1 vs 1.0
    assert key(plain) == key(json.dumps(value, ensure_ascii=False, indent=1))


@pytest.mark.parametrize(("a", "b"), [
    ('{"n": 100}', '{"n": 1e2}'), ('{"n": -0.0}', '{"n": 0}'), ('{"n": 1.50}', '{"n": 1.5}'),
    ('{"s": "\\u00e9"}', '{"s": "é"}'), ('{"a": 1, "b": 2}', '{"b": 2, "a": 1}'),
])
def test_equal_json_values_are_one_job(a: str, b: str) -> None:
    assert key(a) == key(b)


@pytest.mark.parametrize(("a", "b"), [
    ('{"n": 1.5}', '{"n": 1.51}'), ('{"n": 1}', '{"n": "1"}'), ('[1, 2]', '[2, 1]'), ('{"n": null}', '{}'),
    ('{"s": "v1.2"}', '{"s": "v12"}'),
])
def test_different_json_values_are_different_jobs(a: str, b: str) -> None:
    assert key(a) != key(b)


def test_tenant_type_and_period_are_part_of_the_key() -> None:
    base = key('{"c": 1}')
    assert base != key('{"c": 1}', tenant="globex")
    assert base != key('{"c": 1}', job_type="other")
    assert base != key('{"c": 1}', UniqueSpec(by_args=True, period_s=3600))
    assert base != key('{"c": 1}', UniqueSpec())  # by type alone compares no args


def test_a_period_bucket_is_a_whole_multiple_of_the_period_since_the_epoch() -> None:
    hourly = UniqueSpec(by_args=True, period_s=3600)
    start = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    inside = [start, start + timedelta(minutes=59, seconds=59, microseconds=999_999)]
    assert len({key("{}", hourly, run_at=t) for t in inside}) == 1
    assert key("{}", hourly, run_at=start) != key("{}", hourly, run_at=start + timedelta(hours=1))
    assert key("{}", hourly, run_at=start) != key("{}", hourly, run_at=start - timedelta(microseconds=1))


def test_args_keys_pick_top_level_keys_and_the_value_is_what_counts() -> None:
    picked = UniqueSpec(args_keys=("c",))
    assert key('{"c": 1, "x": 2}', picked) == key('{"c": 1, "x": 3}', picked) == key('{"c": 1}')
    assert key('{"x": 2}', picked) != key('{"c": null}', picked)


def test_the_default_states_are_the_four_non_terminal_ones() -> None:
    assert set(DEFAULT_STATES) == {"scheduled", "queued", "running", "retry_scheduled"}
    assert BY_ARGS.mask == unique_states_mask(DEFAULT_STATES)


def test_an_unhashable_args_key_is_invalid_argument_not_a_crash() -> None:
    with pytest.raises(InvalidArgument) as err:
        validate(UniqueSpec(args_keys=("a", ["b"])))  # type: ignore[arg-type]
    assert err.value.field == "unique.args_keys[1]"


def test_a_group_without_unique_jobs_keeps_its_statement_and_a_unique_group_takes_keys_in_order() -> None:
    from cronwheel.storage.executions import _insert_query

    plain, unique = _insert_query(True, False), _insert_query(True, True)
    assert "j->>17" not in plain and "NULL::bytea AS unique_key" in plain  # no unique column read per row
    keys = 'v.tenant COLLATE "C", v.idempotency_key COLLATE "C", v.ord'  # key order (issue 47 item 5)
    assert "WHERE idempotency_key IS NOT NULL DO NOTHING" in plain and f"ORDER BY {keys}" in plain
    assert "ON CONFLICT DO NOTHING" in unique and f"ORDER BY v.unique_key, {keys}" in unique
    assert "decode(j->>17, 'hex') AS unique_key" in unique
