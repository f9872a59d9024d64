"""The doer's handler (client/http_doer.py) against a real local HTTP server, in-process: the
outcome of each answer as the Worker will report it. The whole path (node, lease, report) is
tests/e2e/test_http_targets.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from cronwheel.client.http_doer import HttpDoer
from cronwheel.client.worker_context import JobContext, JobFailed
from cronwheel.egress import EgressPolicy
from cronwheel.errors import NotFound
from cronwheel.v1.webhook_signature import verify
from tests.e2e.target_receiver import TargetReceiver, serve_targets

LOOPBACK = EgressPolicy.parse(["127.0.0.0/8"])


class Secrets:
    def __init__(self, values: dict[tuple[str | None, str], str]) -> None:
        self.values = values

    async def get(self, tenant: str | None, name: str) -> str:
        try:
            return self.values[(tenant, name)]
        except KeyError:
            raise NotFound("secret", name) from None

    async def put(self, tenant: str | None, name: str, value: str) -> None:
        self.values[(tenant, name)] = value


@pytest.fixture
def receiver() -> Iterator[TargetReceiver]:
    yield from serve_targets()


def ctx(target: dict[str, Any], attempt: int = 1) -> JobContext:
    return JobContext(execution_id="0193e0c2-0000-7000-8000-000000000001", schedule_id=None, type="http",
                      tenant="a", payload={"n": 1}, scheduled_for=datetime(2027, 1, 1, tzinfo=UTC), attempt=attempt,
                      max_attempts=3, fencing_token=7, checkpoint_value=None, deadline=None,
                      target=json.dumps(target))


def call(doer: HttpDoer, target: dict[str, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(doer(ctx(target)), 10))


def test_each_answer_becomes_the_runs_outcome(receiver: TargetReceiver) -> None:
    receiver.script.update({"/ok": [(200, {}, b"fine")], "/busy": [(503, {"Retry-After": "2"}, b"later")],
                            "/bad": [(400, {}, b"no such account")], "/hang": [("hang", 5)]})
    doer = HttpDoer(LOOPBACK, Secrets({("a", "sign"): "s3cret", ("a", "tok"): "Bearer t0k"}), threads=4)
    target = {"url": receiver.url("/ok"), "signing_secret": "sign", "headers": {"Authorization": {"secret": "tok"}}}
    assert call(doer, target) == {"status": 200, "body": "fine"}
    (req,) = receiver.requests("/ok")
    assert req.headers["authorization"] == "Bearer t0k" and req.headers["idempotency-key"].startswith("0193e0c2")
    assert verify("s3cret", req.headers["cronwheel-signature"], req.body, time.time())
    with pytest.raises(JobFailed) as busy:
        call(doer, {**target, "url": receiver.url("/busy")})
    assert (busy.value.retryable, busy.value.retry_after_s, str(busy.value)) == (True, 2.0, "HTTP 503: later")
    with pytest.raises(JobFailed) as bad:
        call(doer, {**target, "url": receiver.url("/bad")})
    assert (bad.value.retryable, str(bad.value)) == (False, "HTTP 400: no such account")
    with pytest.raises(JobFailed) as hang:
        call(doer, {**target, "url": receiver.url("/hang"), "timeout_s": 1})
    assert hang.value.retryable and str(hang.value).startswith("delivery failed")
    with pytest.raises(JobFailed) as missing:
        call(doer, {**target, "headers": {"Authorization": {"secret": "nope"}}})
    assert (missing.value.retryable, str(missing.value)) == (False, "the secret 'nope' does not exist")
    doer.close()


def test_without_egress_allow_a_loopback_target_is_refused_and_not_called(receiver: TargetReceiver) -> None:
    doer = HttpDoer(EgressPolicy(), None, threads=1)
    with pytest.raises(JobFailed) as refused:
        call(doer, {"url": receiver.url("/x")})
    assert (refused.value.retryable, str(refused.value)) == (True, "refused by egress policy")
    assert receiver.requests() == []
    doer.close()
