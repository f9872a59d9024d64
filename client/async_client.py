"""`AsyncClient`: the asyncio twin of `Client`, with the same methods (awaited; the list methods
and `events` are async iterators).

    async with AsyncClient("node-1:7070", token="...") as cw:
        job = await cw.submit("send-email", {"to": "a@example.com"})
        done = await cw.wait(job.id, timeout=60)
        async for s in cw.list_schedules():
            ...

Channels belong to the event loop that first uses them: use one AsyncClient per loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from cronwheel.clock import Clock, SystemClock

from . import apply as declarative
from . import apply_tenants as declarative_tenants
from . import calls
from . import types as t
from .client import by_name, looks_like_uuid
from .errors import ApiError, from_rpc_error
from .transport import AsyncGrpcTransport, AsyncTransport, Settings, chosen, request, retryable

P = ParamSpec("P")
T = TypeVar("T")


def _call(plan: Callable[Concatenate[calls.Context, P], calls.Call[T]]) -> Callable[Concatenate[AsyncClient, P], Any]:
    async def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(plan(self._ctx, *args, **kwargs))

    return calls.as_method(plan, method)


def _pages(plan: Callable[Concatenate[calls.Context, P], calls.Pages[T]]
           ) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return self._items(plan(self._ctx, *args, **kwargs))

    return calls.as_method(plan, method)


def _gather(plan: Callable[Concatenate[calls.Context, P], calls.Gather[T]]
            ) -> Callable[Concatenate[AsyncClient, P], Any]:
    async def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> T:
        g = plan(self._ctx, *args, **kwargs)
        return g.finish([r async for r in self._responses(g.pages)])

    return calls.as_method(plan, method)


def _many(plan: Callable[Concatenate[calls.Context, P], calls.Many[T]]
          ) -> Callable[Concatenate[AsyncClient, P], Any]:
    async def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        many = plan(self._ctx, *args, **kwargs)  # every item checked before the first call
        out: list[T] = []
        for start, call in zip(many.starts, many.calls, strict=True):
            try:
                out.extend(await self._run(call))
            except ApiError as exc:
                raise calls.at_offset(exc, start, out) from None
        return out

    return calls.as_method(plan, method)


def _steps(plan: Callable[Concatenate[calls.Context, P], calls.Steps[T]]
           ) -> Callable[Concatenate[AsyncClient, P], Any]:
    async def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> T:
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
                if isinstance(step, calls.Call):
                    answer = await self._run(step)
                else:
                    answer = [item async for item in self._items(step)]
            except ApiError as exc:
                failed = exc

    return calls.as_method(plan, method)


class AsyncClient:
    """The asyncio Client: same constructor as `Client` (interceptors are grpc.aio ones; a
    `transport` answers `handle_async_request`, as cronwheel.client.testing.MockTransport does)."""

    def __init__(self, address: str | Sequence[str] = "127.0.0.1:7070", *, token: str | None = None,
                 tls: bool = False, ca_file: str | None = None, cert_file: str | None = None,
                 key_file: str | None = None, deadline_s: float = 10.0, retries: int = 5, backoff_s: float = 0.1,
                 interceptors: Sequence[Any] = (), clock: Clock | None = None,
                 transport: AsyncTransport | None = None) -> None:
        self.settings = Settings.of(address, token=token, tls=tls, ca_file=ca_file, cert_file=cert_file,
                                    key_file=key_file, deadline_s=deadline_s, retries=retries, backoff_s=backoff_s,
                                    interceptors=tuple(interceptors))
        chosen(self.settings, transport)
        self.clock = clock or SystemClock()
        self._ctx = calls.Context(self.clock)
        self.transport: AsyncTransport = transport or AsyncGrpcTransport(self.settings)
        self._current = 0

    # ------------------------------------------------------------------------------ transport

    async def _send(self, service: str, method: str, message: Any, safe: bool) -> Any:
        pauses = self.settings.pauses()
        index = self._current
        while True:
            try:
                resp = await self.transport.handle_async_request(request(self.settings, index, service, method,
                                                                          message))
            except grpc.RpcError as exc:
                pause = next(pauses, None) if retryable(exc, safe) else None
                if pause is None:
                    raise from_rpc_error(exc) from None
                index = (index + 1) % len(self.settings.addresses)
                await self.clock.sleep(pause)
                continue
            self._current = index
            return resp

    async def _run(self, call: calls.Call[T]) -> T:
        return call.convert(await self._send(call.service, call.method, call.request, call.safe))

    async def _responses(self, pages: calls.Pages[Any]) -> AsyncIterator[Any]:
        req = type(pages.request)()
        req.CopyFrom(pages.request)
        while True:
            resp = await self._send(pages.service, pages.method, req, True)
            yield resp
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    async def _items(self, pages: calls.Pages[T]) -> AsyncIterator[T]:
        async for resp in self._responses(pages):
            for item in pages.items(resp):
                yield item

    async def close(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    async def get_schedule(self, id_or_name: str, *, tenant: str | None = None) -> t.Schedule:
        """As Client.get_schedule: by id or by name."""
        if looks_like_uuid(id_or_name):
            return await self._run(calls.get_schedule_by_id(self._ctx, id_or_name))
        found = [s async for s in self.list_schedules(tenant=tenant, page_size=1000) if s.name == id_or_name]
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

    async def logs(self, execution_id: str, *, attempt: int | None = None, follow: bool = False,
                   poll_s: float = 0.25) -> AsyncIterator[t.LogLine]:
        """As Client.logs."""
        after = (0, 0)
        while True:
            page = await self._run(calls.logs_page(self._ctx, execution_id, attempt=attempt, after=after))
            for line in page.lines:
                after = (line.attempt, line.seq)
                yield line
            step = calls.logs_step(page, follow)
            if step == "end":
                return
            if step == "wait":
                await self.clock.sleep(poll_s)

    async def wait(self, execution_id: str, timeout: float | None = None, *, poll_s: float = 0.05,
                   poll_max_s: float = 1.0) -> t.Execution:
        """As Client.wait: the final execution, or TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        delay = poll_s
        while True:
            ex: t.Execution = await self.get_execution(execution_id)
            if ex.final:
                return ex
            if deadline is not None and self.clock.monotonic() + delay > deadline:
                raise TimeoutError(f"execution {execution_id} is still {ex.state} after {timeout} s")
            await self.clock.sleep(delay)
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

    async def events(self, since: int = 0, *, follow: bool = False, poll_s: float = 1.0,
                     tenant: str | None = None, schedule_id: str | None = None, execution_id: str | None = None,
                     kind: str | None = None, alerts_only: bool = False) -> AsyncIterator[t.Event]:
        """As Client.events."""
        last = since
        while True:
            pages = calls.events_page(since=last, tenant=tenant, schedule_id=schedule_id,
                                      execution_id=execution_id, kind=kind, alerts_only=alerts_only)
            async for ev in self._items(pages):
                last = ev.id
                yield ev
            if not follow:
                return
            await self.clock.sleep(poll_s)
