"""submit_many without a server: how a list is split into SubmitJobs calls (by count and by
bytes), the keys the client adds, the checks made before anything is sent (naming jobs[i]),
how a server error's per-call index becomes the caller's, and that the client's limits are the
server's."""

from __future__ import annotations

import ast
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cluster.commands import runs, values
from cronwheel import entropy, limits
from cronwheel.client import InvalidArgument, JobSpec, ResourceExhausted
from cronwheel.client import calls as k
from cronwheel.client.calls import Context, submit_many
from cronwheel.clock import FakeClock

CTX = Context(FakeClock(start_ts=1_800_000_000.0))


def test_the_clients_limits_are_the_servers_from_one_module() -> None:
    """The client checks what the node checks, both reading cronwheel/limits.py: each limit is
    assigned there and nowhere else in the product."""
    assert (k.SUBMIT_MANY_JOBS, runs.MAX_SUBMIT_BATCH) == (limits.MAX_SUBMIT_BATCH, limits.MAX_SUBMIT_BATCH)
    assert (k.MAX_NAME, k.MAX_PAYLOAD_BYTES) == (values.MAX_NAME, values.MAX_PAYLOAD_BYTES) \
        == (limits.MAX_NAME, limits.MAX_PAYLOAD_BYTES)
    names = {"MAX_NAME", "MAX_PAYLOAD_BYTES", "MAX_SUBMIT_BATCH"}
    root = Path(__file__).resolve().parents[2]
    assigned = sorted(
        f"{path.relative_to(root)}: {node.targets[0].id}"  # type: ignore[attr-defined]
        for folder in ("client", "cluster", "storage", "cronwheel") for path in (root / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names)
    assert assigned == [f"cronwheel/limits.py: {n}" for n in sorted(names)], assigned


def test_a_long_list_is_split_at_10000_jobs_per_call_in_order() -> None:
    many = submit_many(CTX, [JobSpec("t", {"i": i}) for i in range(25_000)])
    assert many.starts == [0, 10_000, 20_000]
    assert [len(c.request.jobs) for c in many.calls] == [10_000, 10_000, 5_000]
    assert all((c.method, c.safe) == ("SubmitJobs", True) for c in many.calls)
    assert many.calls[1].request.jobs[7777].payload_json == '{"i":17777}'


def test_a_list_is_split_before_a_call_passes_the_request_size_limit() -> None:
    big = "x" * (200 * 1024)
    many = submit_many(CTX, [JobSpec("t", big) for _ in range(45)])
    assert len(many.calls) == 3 and many.starts[0] == 0
    assert all(c.request.ByteSize() <= k.SUBMIT_MANY_BYTES for c in many.calls)
    assert sum(len(c.request.jobs) for c in many.calls) == 45


def test_every_job_without_a_key_gets_its_own_and_a_given_key_is_kept() -> None:
    many = submit_many(CTX, [JobSpec("t"), {"type": "t", "idempotency_key": "mine"}, JobSpec("t")])
    keys = [j.idempotency_key for j in many.calls[0].request.jobs]
    assert keys[1] == "mine" and uuid.UUID(keys[0]) != uuid.UUID(keys[2])


def test_the_added_keys_are_random_uuid4s_from_few_system_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.urandom releases the GIL and waits to take it back beside a busy thread: the keys come
    from cronwheel.entropy's pool, one call per 256 keys, not per key (fails with uuid.uuid4()
    per job)."""
    calls: list[int] = []
    real = os.urandom
    monkeypatch.setattr(entropy, "_pool", threading.local())  # a fresh pool: the count is exact
    monkeypatch.setattr(entropy.os, "urandom", lambda n: calls.append(n) or real(n))
    keys = [j.idempotency_key for j in submit_many(CTX, [JobSpec("t") for _ in range(1000)]).calls[0].request.jobs]
    assert len(set(keys)) == 1000 and all(uuid.UUID(x).version == 4 for x in keys)
    assert len(calls) == 4


def test_dicts_and_job_specs_give_the_same_request() -> None:
    at = datetime(2027, 1, 1, tzinfo=UTC)
    a = submit_many(CTX, [JobSpec("t", [1], run_at=at, idempotency_key="k", priority="bulk",
                                  attempt_timeout=timedelta(seconds=5), tenant="acme")])
    b = submit_many(CTX, [{"type": "t", "payload": [1], "run_at": at, "idempotency_key": "k", "priority": "bulk",
                           "attempt_timeout": timedelta(seconds=5), "tenant": "acme"}])
    assert a.calls[0].request == b.calls[0].request
    d = submit_many(CTX, [JobSpec("t", delay=timedelta(minutes=1))]).calls[0].request.jobs[0]
    assert d.run_at.ToDatetime(tzinfo=UTC) == CTX.clock.now() + timedelta(minutes=1)


def test_an_empty_list_sends_nothing() -> None:
    assert submit_many(CTX, []).calls == []


@pytest.mark.parametrize(("bad", "field"), [
    (JobSpec(""), "jobs[17777].type"),
    (JobSpec("t" * 201), "jobs[17777].type"),
    (JobSpec("t", {"x": float("nan")}), "jobs[17777].payload"),
    (JobSpec("t", "x" * (256 * 1024)), "jobs[17777].payload"),
    (JobSpec("t", idempotency_key="k" * 201), "jobs[17777].idempotency_key"),
    (JobSpec("t", priority="urgent"), "jobs[17777].priority"),
    (JobSpec("t", run_at=datetime(2027, 1, 1)), "jobs[17777].run_at"),
    (JobSpec("t", run_at=datetime(2027, 1, 1, tzinfo=UTC), delay=timedelta(1)), "jobs[17777].delay"),
    (JobSpec("t", attempt_timeout="soon"), "jobs[17777].attempt_timeout"),  # type: ignore[arg-type]
    ({"type": "t", "colour": "red"}, "jobs[17777]"),
    ("t", "jobs[17777]"),
])
def test_a_bad_job_anywhere_is_refused_before_any_call_naming_its_index(bad: object, field: str) -> None:
    jobs: list[object] = [JobSpec("t") for _ in range(25_000)]
    jobs[17_777] = bad
    with pytest.raises(InvalidArgument) as got:
        submit_many(CTX, jobs)  # type: ignore[arg-type]
    assert got.value.field == field


def test_a_server_error_names_the_callers_index_and_carries_what_was_stored() -> None:
    err = InvalidArgument("INVALID_ARGUMENT", "jobs[7777].run_at: must be at most 10 years ahead, got x")
    out = k.at_offset(err, 10_000, ["r"] * 10_000)
    assert isinstance(out, InvalidArgument) and out.field == "jobs[17777].run_at"
    assert str(out).startswith("jobs[17777].run_at: must be") and len(out.submitted) == 10_000
    quota = k.at_offset(ResourceExhausted("RESOURCE_EXHAUSTED", "tenant acme has used its quota"), 20_000, [])
    assert isinstance(quota, ResourceExhausted) and str(quota) == "tenant acme has used its quota"
