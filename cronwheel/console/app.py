"""The console's Starlette application: its routes, and `serve` (uvicorn) for `cronwheel console`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cronwheel.clock import Clock, SystemClock

from . import executions, overview, schedules
from .sessions import SESSION_COOKIE, Session
from .web import HERE, Console, Settings, login_page, page

log = logging.getLogger("cronwheel.console")


async def _home(console: Console, request: Request, session: Session) -> Response:
    return RedirectResponse("/overview" if session.admin else "/schedules", status_code=303)


async def _logout(console: Console, request: Request, session: Session) -> Response:
    await console.logout(request.cookies.get(SESSION_COOKIE))
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


def build(settings: Settings, clock: Clock | None = None) -> Starlette:
    console = Console(settings, clock or SystemClock())
    console.sampler = overview.Sampler(console)

    def r(path: str, handler: Any, methods: tuple[str, ...] = ("GET",), admin: bool = False) -> Route:
        return Route(path, page(console, handler, admin=admin), methods=list(methods))

    async def login(request: Request) -> Response:
        return await login_page(console, request)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [
        Route("/login", login, methods=["GET", "POST"]),
        Route("/healthz", healthz),
        r("/", _home),
        r("/logout", _logout, ("POST",)),
        r("/schedules", schedules.list_page),
        r("/schedules/bulk", schedules.bulk, ("POST",)),
        r("/schedules/new", schedules.edit, ("GET", "POST")),
        r("/schedules/{id}", schedules.detail),
        r("/schedules/{id}/timeline", schedules.timeline_part),
        r("/schedules/{id}/edit", schedules.edit, ("GET", "POST")),
        r("/schedules/{id}/delete", schedules.delete, ("GET", "POST")),
        r("/schedules/{id}/backfill", schedules.backfill, ("GET", "POST")),
        r("/schedules/{id}/{action:str}", schedules.act, ("POST",)),
        r("/executions", executions.list_page),
        r("/executions/bulk-retry", executions.bulk_retry, ("POST",)),
        r("/executions/{id}", executions.detail),
        r("/executions/{id}/log", executions.log_tab),
        r("/executions/{id}/log/more", executions.log_more),
        r("/executions/{id}/{action:str}", executions.act, ("POST",)),
        r("/overview", overview.overview_page, admin=True),
        r("/overview/live", overview.live_part, admin=True),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(console.sampler.run(), name="console-sampler")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await console.sampler.close()
            for s in console.sessions.all():
                await console.logout(s.id)

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    return ServerTiming(app, console.clock)  # type: ignore[return-value]


class ServerTiming:
    """ASGI wrapper: every response carries `Server-Timing: app;dur=<ms>`, the time from the
    request's arrival to its response headers (what bench.console measures, and what a browser's
    developer tools show)."""

    def __init__(self, app: Starlette, clock: Clock) -> None:
        self.app = app
        self.clock = clock
        self.state = app.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock.monotonic()

        async def timed(message: Any) -> None:
            if message["type"] == "http.response.start":
                ms = (self.clock.monotonic() - started) * 1000
                timing = (b"server-timing", f"app;dur={ms:.1f}".encode())
                message = {**message, "headers": [*message.get("headers", []), timing]}
            await send(message)

        await self.app(scope, receive, timed)


def serve(settings: Settings, host: str, port: int, *, cert_file: str | None = None,
          key_file: str | None = None) -> None:
    """Serve until interrupted; prints `console listening on URL` once it accepts connections."""
    import uvicorn

    scheme = "https" if cert_file else "http"
    config = uvicorn.Config(build(settings), host=host, port=port, log_level="warning", access_log=False,
                            ssl_certfile=cert_file, ssl_keyfile=key_file, lifespan="on")
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            shown = f"[{host}]" if ":" in host else host
            print(f"console listening on {scheme}://{shown}:{port}/", flush=True)
        await task

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # pragma: no cover
        print("console stopped", file=sys.stderr)
