"""cronwheel.client without a server: the sync and async Clients offer the same methods with the
same signatures, the enums are the contract's words, values convert both ways, bad values are
refused before any call naming the keyword, and the retry schedule of the transport."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.client import AsyncClient, Client, InvalidArgument, MisfirePolicy, RetryPolicy
from cronwheel.client import convert as c
from cronwheel.client import types as t
from cronwheel.client.calls import Context, submit, update_schedule
from cronwheel.client.errors import from_rpc_error
from cronwheel.client.transport import Settings
from cronwheel.clock import FakeClock
from cronwheel.v1 import common_pb2, enums


def public(cls: type) -> dict[str, inspect.Signature]:
    return {n: inspect.signature(m) for n, m in vars(cls).items() if callable(m) and not n.startswith("_")}


def test_sync_and_async_clients_have_the_same_methods_and_signatures() -> None:
    sync, aio = public(Client), public(AsyncClient)
    assert set(sync) == set(aio)
    for name in sync:
        assert list(sync[name].parameters) == list(aio[name].parameters), name
    assert {"create_schedule", "update_schedule", "get_schedule", "list_schedules", "pause", "resume", "trigger",
            "backfill", "preview", "delete", "explain", "submit", "get_execution", "list_executions", "cancel",
            "retry", "wait", "status", "events"} <= set(sync)
    assert "ctx" not in sync["submit"].parameters


def test_enums_are_the_contracts_words() -> None:
    assert [m.value for m in t.MisfirePolicy] == list(enums.MISFIRE.values())
    assert MisfirePolicy("run_once") is MisfirePolicy.RUN_ONCE and MisfirePolicy.RUN_ONCE == "run_once"
    assert set(t.ExecutionState) >= t.FINAL_STATES and "retry_scheduled" not in t.FINAL_STATES


def test_schedule_values_convert_to_the_wire_and_back() -> None:
    msg = c.schedule_message(dict(name="n", cron="0 3 * * *", timezone="UTC", job_type="j",
                                  misfire_policy="catch_up", payload={"a": [1, 2]}, jitter=timedelta(seconds=3),
                                  retry_policy=RetryPolicy(max_attempts=2), attempt_timeout=90, priority=None))
    assert msg.misfire_policy == common_pb2.MISFIRE_POLICY_CATCH_UP and msg.timeout.seconds == 90
    assert msg.payload_json == '{"a":[1,2]}' and msg.retry_policy.max_attempts == 2 and msg.priority == 0
    back = c.schedule(msg)
    assert (back.misfire_policy, back.payload, back.jitter) == (MisfirePolicy.CATCH_UP, {"a": [1, 2]},
                                                                timedelta(seconds=3))
    assert back.priority is None and back.next_run_at is None and back.retry_policy.max_attempts == 2


def test_update_mask_is_the_keyword_names() -> None:
    call = update_schedule(Context(FakeClock()), "id-1", cron="* * * * *", attempt_timeout=None, payload={})
    assert list(call.request.update_mask.paths) == ["cron", "timeout", "payload_json"]
    with pytest.raises(InvalidArgument) as bad:
        update_schedule(Context(FakeClock()), "id-1", paused=True)
    assert bad.value.field == "paused"


def test_submit_adds_a_key_and_turns_delay_into_run_at() -> None:
    clock = FakeClock(start_ts=1_800_000_000.0)
    a, b = (submit(Context(clock), "j", delay=timedelta(minutes=5)) for _ in range(2))
    assert a.safe and a.request.idempotency_key and a.request.idempotency_key != b.request.idempotency_key
    assert a.request.run_at.ToDatetime(tzinfo=UTC) == clock.now() + timedelta(minutes=5)
    assert submit(Context(clock), "j", idempotency_key="mine").request.idempotency_key == "mine"
    for kw, field in ((dict(priority="urgent"), "priority"), (dict(run_at=datetime(2030, 1, 1)), "run_at"),
                      (dict(run_at=clock.now(), delay=timedelta(1)), "delay"), (dict(payload={1j}), "payload")):
        with pytest.raises(InvalidArgument) as bad:
            submit(Context(clock), "j", **kw)  # type: ignore[arg-type]
        assert bad.value.field == field, kw


def test_status_codes_map_to_typed_errors_with_the_field() -> None:
    import grpc

    class Err(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode, details: str) -> None:
            self._c, self._d = code, details

        def code(self) -> grpc.StatusCode:
            return self._c

        def details(self) -> str:
            return self._d

    e = from_rpc_error(Err(grpc.StatusCode.INVALID_ARGUMENT, "schedule.cron: expected 5 or 6 fields, got 3"))
    assert isinstance(e, InvalidArgument) and e.field == "schedule.cron" and str(e).startswith("schedule.cron: ")
    assert from_rpc_error(Err(grpc.StatusCode.INVALID_ARGUMENT, "bad thing happened: x")).field == ""


def test_retry_pauses_try_every_address_before_backing_off() -> None:
    s = Settings.of("a:1,b:2", retries=5, backoff_s=0.1, backoff_max_s=0.3)
    assert s.addresses == ("a:1", "b:2")
    assert list(s.pauses()) == [0.0, 0.1, 0.0, 0.2, 0.0]
    assert list(Settings.of("a:1", retries=4, backoff_s=0.1, backoff_max_s=0.3).pauses()) == [0.1, 0.2, 0.3, 0.3]
