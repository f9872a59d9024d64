"""`Client`: the blocking door to a cronwheel cluster for application code.

    from datetime import timedelta
    from cronwheel.client import Client
    with Client(["node-1:7070", "node-2:7070"], token="...") as cw:
        job = cw.submit("send-email", {"to": "a@example.com"}, delay=timedelta(minutes=5))
        done = cw.wait(job.id, timeout=60)          # the final Execution: .result or .error
        cw.create_schedule("nightly", "0 3 * * *", "report", timezone="Europe/Berlin",
                           misfire_policy="run_once")

Every method is defined once in client/calls.py (signature, documentation, request); this class
adds the blocking send (client/transport.py: fail-over, deadlines, retries, through a replaceable
transport) and the methods that loop: get_schedule by name, list iterators, explain, wait, events.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from cronwheel.clock import Clock, SystemClock

from . import apply as declarative
from . import apply_tenants as declarative_tenants
from . import calls
from . import types as t
from .errors import ApiError, NotFound, from_rpc_error
from .transport import GrpcTransport, Settings, Transport, chosen, request, retryable

P = ParamSpec("P")
T = TypeVar("T")


def _call(plan: Callable[Concatenate[calls.Context, P], calls.Call[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(plan(self._ctx, *args, **kwargs))

    return calls.as_method(plan, method)


def _pages(plan: Callable[Concatenate[calls.Context, P], calls.Pages[T]]
           ) -> Callable[Concatenate[Client, P], Iterator[T]]:
    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._items(plan(self._ctx, *args, **kwargs))

    return calls.as_method(plan, method)


def _gather(plan: Callable[Concatenate[calls.Context, P], calls.Gather[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> T:
        g = plan(self._ctx, *args, **kwargs)
        return g.finish(list(self._responses(g.pages)))

    return calls.as_method(plan, method)


def _many(plan: Callable[Concatenate[calls.Context, P], calls.Many[T]]) -> Callable[Concatenate[Client, P], list[T]]:
    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        many = plan(self._ctx, *args, **kwargs)  # every item checked before the first call
        out: list[T] = []
        for start, call in zip(many.starts, many.calls, strict=True):
            try:
                out.extend(self._run(call))
            except ApiError as exc:
                raise calls.at_offset(exc, start, out) from None
        return out

    return calls.as_method(plan, method)


def _steps(plan: Callable[Concatenate[calls.Context, P], calls.Steps[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> T:
        gen = plan(self._ctx, *args, **kwargs).run
        answer: Any = None
        failed: ApiError | None = None
        while True:
            try:
                step = gen.throw(failed) if failed is not None else gen.send(answer)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            answer, failed = None, None
            try:
                answer = self._run(step) if isinstance(step, calls.Call) else list(self._items(step))
            except ApiError as exc:
                failed = exc

    return calls.as_method(plan, method)


def looks_like_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


class Client:
    """A blocking client of one cluster, reached through one or several node addresses
    ("host:port", a list, or comma-separated): a call that meets UNAVAILABLE moves to the next.

    token: the bearer token; tls / ca_file: TLS, trusting the system roots or this CA;
    cert_file + key_file: a client certificate; deadline_s: each attempt's deadline; retries and
    backoff_s: how often, and how patiently, calls safe to repeat are retried on UNAVAILABLE.
    interceptors: sync gRPC client interceptors (tests inject failures with them).
    transport: what makes each attempt of an RPC instead of a gRPC channel, e.g.
    `cronwheel.client.testing.MockTransport(handler)` in a user's tests (docs/testing.md); the
    Client's fail-over, retries, idempotency keys and error mapping still apply.
    Thread-safe; close() (or `with`) releases the channels.
    """

    def __init__(self, address: str | Sequence[str] = "127.0.0.1:7070", *, token: str | None = None,
                 tls: bool = False, ca_file: str | None = None, cert_file: str | None = None,
                 key_file: str | None = None, deadline_s: float = 10.0, retries: int = 5, backoff_s: float = 0.1,
                 interceptors: Sequence[Any] = (), clock: Clock | None = None,
                 transport: Transport | None = None) -> None:
        self.settings = Settings.of(address, token=token, tls=tls, ca_file=ca_file, cert_file=cert_file,
                                    key_file=key_file, deadline_s=deadline_s, retries=retries, backoff_s=backoff_s,
                                    interceptors=tuple(interceptors))
        chosen(self.settings, transport)
        self.clock = clock or SystemClock()
        self._ctx = calls.Context(self.clock)
        self.transport: Transport = transport or GrpcTransport(self.settings)
        self._current = 0  # the address that answered last

    # ------------------------------------------------------------------------------ transport

    def _send(self, service: str, method: str, message: Any, safe: bool) -> Any:
        pauses = self.settings.pauses()
        index = self._current
        while True:
            try:
                resp = self.transport.handle_request(request(self.settings, index, service, method, message))
            except grpc.RpcError as exc:
                pause = next(pauses, None) if retryable(exc, safe) else None
                if pause is None:
                    raise from_rpc_error(exc) from None
                index = (index + 1) % len(self.settings.addresses)
                if pause:
                    time.sleep(pause)
                continue
            self._current = index
            return resp

    def _run(self, call: calls.Call[T]) -> T:
        return call.convert(self._send(call.service, call.method, call.request, call.safe))

    def _responses(self, pages: calls.Pages[Any]) -> Iterator[Any]:
        req = type(pages.request)()
        req.CopyFrom(pages.request)
        while True:
            resp = self._send(pages.service, pages.method, req, True)
            yield resp
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    def _items(self, pages: calls.Pages[T]) -> Iterator[T]:
        for resp in self._responses(pages):
            yield from pages.items(resp)

    def close(self) -> None:
        """Closes the transport's channels (a later call opens them again)."""
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ schedules

    create_schedule = _call(calls.create_schedule)
    update_schedule = _call(calls.update_schedule)
    list_schedules = _pages(calls.list_schedules)
    schedules_page = _call(calls.schedules_page)
    delete = _call(calls.delete)
    pause = _call(calls.pause)
    resume = _call(calls.resume)
    trigger = _call(calls.trigger)
    backfill = _call(calls.backfill)
    preview = _call(calls.preview)
    explain = _gather(calls.explain)
    apply = _steps(declarative.apply)
    apply_tenants = _steps(declarative_tenants.apply_tenants)

    def get_schedule(self, id_or_name: str, *, tenant: str | None = None) -> t.Schedule:
        """One live schedule, by id or by name (names are unique per tenant; an admin token that
        sees several tenants names one with `tenant`). NotFound when there is none."""
        if looks_like_uuid(id_or_name):
            return self._run(calls.get_schedule_by_id(self._ctx, id_or_name))
        found = [s for s in self.list_schedules(tenant=tenant, page_size=1000) if s.name == id_or_name]
        return by_name(found, id_or_name)

    # ------------------------------------------------------------------------------ jobs

    submit = _call(calls.submit)
    submit_many = _many(calls.submit_many)
    get_execution = _call(calls.get_execution)
    logs_page = _call(calls.logs_page)
    list_executions = _pages(calls.list_executions)
    executions_page = _call(calls.executions_page)
    cancel = _call(calls.cancel)
    retry = _call(calls.retry)

    def logs(self, execution_id: str, *, attempt: int | None = None, follow: bool = False,
             poll_s: float = 0.25) -> Iterator[t.LogLine]:
        """The execution's log lines, in order (attempt, then line number): what its handler
        logged (Python logging inside the handler, ctx.log), each attempt kept within 1 MiB (its
        head and tail, with a truncation mark). `attempt`: only that one. With `follow`, waits for
        new lines of a running execution (asking every `poll_s`) and ends once it is final and
        every line is read; otherwise ends when caught up."""
        after = (0, 0)
        while True:
            page = self._run(calls.logs_page(self._ctx, execution_id, attempt=attempt, after=after))
            for line in page.lines:
                after = (line.attempt, line.seq)
                yield line
            step = calls.logs_step(page, follow)
            if step == "end":
                return
            if step == "wait":
                time.sleep(poll_s)

    def wait(self, execution_id: str, timeout: float | None = None, *, poll_s: float = 0.05,
             poll_max_s: float = 1.0) -> t.Execution:
        """Waits until the execution is final (succeeded, failed, dead, cancelled or skipped) and
        returns it: `.result` on success, `.error` / `.error_type` otherwise. Raises TimeoutError
        when it is not final after `timeout` seconds (None: wait for ever)."""
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        delay = poll_s
        while True:
            ex = self.get_execution(execution_id)
            if ex.final:
                return ex
            if deadline is not None and self.clock.monotonic() + delay > deadline:
                raise TimeoutError(f"execution {execution_id} is still {ex.state} after {timeout} s")
            time.sleep(delay)
            delay = min(poll_max_s, delay * 1.5)

    # ------------------------------------------------------------------------------ cluster

    status = _call(calls.status)

    create_webhook = _call(calls.create_webhook)
    list_webhooks = _pages(calls.list_webhooks)
    delete_webhook = _call(calls.delete_webhook)
    list_deliveries = _pages(calls.list_deliveries)

    create_tenant = _call(calls.create_tenant)
    update_tenant = _call(calls.update_tenant)
    get_tenant = _call(calls.get_tenant)
    set_tenant_queue = _call(calls.set_tenant_queue)
    list_tenants = _pages(calls.list_tenants)
    create_token = _call(calls.create_token)
    list_tokens = _pages(calls.list_tokens)
    revoke_token = _call(calls.revoke_token)

    def events(self, since: int = 0, *, follow: bool = False, poll_s: float = 1.0, tenant: str | None = None,
               schedule_id: str | None = None, execution_id: str | None = None, kind: str | None = None,
               alerts_only: bool = False) -> Iterator[t.Event]:
        """Events of the audit and alert log with id > `since`, oldest first. With `follow`, keeps
        polling (every `poll_s` once caught up) and never ends; otherwise ends when caught up."""
        last = since
        while True:
            pages = calls.events_page(since=last, tenant=tenant, schedule_id=schedule_id,
                                      execution_id=execution_id, kind=kind, alerts_only=alerts_only)
            for ev in self._items(pages):
                last = ev.id
                yield ev
            if not follow:
                return
            time.sleep(poll_s)


def by_name(found: list[t.Schedule], name: str) -> t.Schedule:
    if not found:
        raise NotFound("NOT_FOUND", f"schedule {name!r} not found")
    if len(found) > 1:
        from .errors import InvalidArgument

        tenants = ", ".join(sorted(s.tenant for s in found))
        raise InvalidArgument("INVALID_ARGUMENT", f"tenant: schedule {name!r} exists in several tenants "
                                                  f"({tenants}): name one with tenant=")
    return found[0]
