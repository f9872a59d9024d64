"""The HTTP doer: the process that calls HTTP targets (issue 50). `cronwheel worker --http`.

It is a `Worker` with one handler, for the reserved job type `http`, so a target's run is
leased, heartbeated, timed out, retried and fenced exactly as an SDK worker's run is: the node
decides, the doer does, and no target call runs in a node's process. Per leased run it:

1. reads the target the run carries (LeasedExecution.target_json, cronwheel/http_target.py);
2. resolves the secrets it names (its signing secret, headers given as {"secret": NAME}) through
   the doer's `SecretProvider`, now, for this call: a rotation applies to the next call, and the
   plaintext lives only in this process, for the length of the call;
3. makes the request with the egress module's one `post` (the policy checked on the resolved
   address at connection time, no redirect, a total deadline of the target's timeout_s), on a
   thread of its own pool (one per slot: a hanging target holds its own thread only);
4. turns the answer into the run's outcome (`http_target.outcome`): a result, a failure with the
   retry policy's retry (no sooner than Retry-After), a failure without retry, or for 202 keeps
   the run (heartbeated, so its lease holds) until the target reports it through
   DispatchService.ReportTargetRun, the run's timeout passes, or it is cancelled.

What a request carries is `request_headers` below. Logs name the run, the status and the
egress module's detail (for the operator only); never a header value or a body. Errors the
tenant sees are "HTTP <status>: <start of body>", "delivery failed ..." or "refused by egress
policy".

How the doer is authorised (docs/http-targets.md "Secrets"): its bearer token is a token of its
own (an admin token in the auth file, named e.g. `http-doer`), not a tenant's; the secrets it
reads come from its own provider (`cronwheel worker --http --dsn ... --secret-key-file ...`: the
named secrets table, opened with the operator's key ring), never through the API, which returns
no secret value to anyone.

Concurrency: one instance per Worker; the handler is called on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwheel import http_target
from cronwheel.client.worker import Worker
from cronwheel.client.worker_context import JobContext, JobFailed
from cronwheel.clock import Clock, SystemClock
from cronwheel.egress import EgressPolicy, Resolver, post
from cronwheel.errors import NotFound, SecretUnavailable
from cronwheel.http_target import HttpTarget, SecretRef
from cronwheel.secret_store import SecretProvider
from cronwheel.v1.webhook_signature import ATTEMPT_HEADER, SIGNATURE_HEADER, signature_header

log = logging.getLogger("cronwheel.client.http_doer")

USER_AGENT = "cronwheel-http-targets/1"
IDEMPOTENCY_HEADER = "Idempotency-Key"  # the execution id: the same on every attempt of a run
EXECUTION_HEADER = "Cronwheel-Execution"
SCHEDULED_FOR_HEADER = "Cronwheel-Scheduled-For"
FENCING_HEADER = "Cronwheel-Fencing-Token"


@dataclass(frozen=True, slots=True)
class Call:
    """The run a request is made for (from its lease)."""

    execution_id: str
    scheduled_for: datetime
    attempt: int
    fencing_token: int
    payload_json: str


def request_body(target: HttpTarget, call: Call) -> bytes:
    """The target's body, else the run's payload as JSON."""
    return (target.body if target.body is not None else call.payload_json or "{}").encode()


def request_headers(target: HttpTarget, call: Call, body: bytes, secrets: Mapping[str, str],
                    now_s: float) -> dict[str, str]:
    """Every header of the request (`secrets`: the resolved values by name). Signed at `now_s`
    (unix seconds) as webhooks are (Cronwheel-Signature) when the target names a signing secret."""
    heads = {k: (secrets[v.name] if isinstance(v, SecretRef) else v) for k, v in target.headers.items()}
    if not any(k.lower() == "content-type" for k in heads):
        heads["Content-Type"] = "application/json"
    if not any(k.lower() == "user-agent" for k in heads):
        heads["User-Agent"] = USER_AGENT
    heads.update({
        IDEMPOTENCY_HEADER: call.execution_id,
        EXECUTION_HEADER: call.execution_id,
        SCHEDULED_FOR_HEADER: call.scheduled_for.isoformat().replace("+00:00", "Z"),
        ATTEMPT_HEADER: str(call.attempt),
        FENCING_HEADER: str(call.fencing_token),
    })
    if target.signing_secret:
        heads[SIGNATURE_HEADER] = signature_header(secrets[target.signing_secret], int(now_s), body)
    return heads


class HttpDoer:
    """The handler of the `http` job type. `secrets`: where named secrets are read (None: a
    target that names one fails, not retried); `resolver`: name resolution (tests)."""

    def __init__(self, egress: EgressPolicy, secrets: SecretProvider | None = None, *, threads: int = 100,
                 clock: Clock | None = None, resolver: Resolver | None = None) -> None:
        self.egress = egress
        self.secrets = secrets
        self.clock = clock or SystemClock()
        self.resolver = resolver
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="http-doer")

    async def __call__(self, ctx: JobContext) -> Any:
        if ctx.target is None:
            raise JobFailed("a run of type 'http' without a target", retryable=False)
        target = http_target.parse(ctx.target)
        values = await self._secrets(ctx.tenant, target)
        call = Call(ctx.execution_id, ctx.scheduled_for, ctx.attempt, ctx.fencing_token,
                    "" if ctx.payload is None else _json(ctx.payload))
        body = request_body(target, call)
        headers = request_headers(target, call, body, values, self.clock.now_ts())
        del values
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self.pool, lambda: post(
            self.egress, target.url, body, headers, float(target.timeout_s), self.resolver, None, target.method))
        out = http_target.outcome(answer.status, answer.body, answer.retry_after, self.clock.now_ts(),
                                  refused=answer.refused)
        log.info("http target called", extra={"event": "http_target_call", "execution_id": ctx.execution_id,
                                              "attempt": ctx.attempt, "status": answer.status, "outcome": out.kind,
                                              "detail": answer.detail})
        if out.kind == "succeeded":
            return out.result
        if out.kind == "retry":
            raise JobFailed(out.error, retryable=True, retry_after_s=out.retry_after_s)
        if out.kind == "failed":
            raise JobFailed(out.error, retryable=False)
        # 202: the target reports the end (ReportTargetRun); the worker keeps heartbeating the run
        # until then, and stops this handler when its heartbeat finds the run ended (stale), at the
        # run's timeout (reported as a timeout: retried by the policy) or on a cancel request.
        await asyncio.Event().wait()
        return None  # not reached: the worker cancels this task

    async def _secrets(self, tenant: str, target: HttpTarget) -> dict[str, str]:
        names = target.secrets()
        if not names:
            return {}
        if self.secrets is None:
            raise JobFailed("the target names a secret, and this doer has no secret store "
                            "(cronwheel worker --http --dsn ... --secret-key-file ...)", retryable=True)
        out: dict[str, str] = {}
        for name in names:
            try:
                out[name] = await self.secrets.get(tenant, name)
            except NotFound:
                raise JobFailed(f"the secret {name!r} does not exist", retryable=False) from None
            except SecretUnavailable:
                raise JobFailed(f"the secret {name!r} cannot be opened by this doer", retryable=True) from None
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def http_worker(worker: Worker, doer: HttpDoer) -> Worker:
    """`worker` serving the `http` job type with `doer`."""
    worker.job(http_target.HTTP_TYPE)(doer)
    return worker
