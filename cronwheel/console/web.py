"""What every console page shares: the console's settings, the session of a request (login,
CSRF), rendering a template, and turning a Client error into a page.

A handler is wrapped with `page`: it gets the request's Session (or the person is sent to the
login page), a POST is refused with 403 unless it carries the session's CSRF token, and an
UNAUTHENTICATED answer from the cluster (a token that expired or was revoked) ends the session
and goes back to the login page. Other Client errors become an error page saying what failed, never
a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from cronwheel.client import ApiError, AsyncClient, PermissionDenied, Unauthenticated
from cronwheel.clock import Clock

from .sessions import LOGIN_COOKIE, SESSION_COOKIE, Session, SessionStore, same

log = logging.getLogger("cronwheel.console")
HERE = Path(__file__).parent


@dataclass
class Settings:
    """How the console reaches the cluster and serves its pages."""

    addresses: list[str]
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    no_login: bool = False  # dev mode: every visitor uses the console's own (empty or --token-file) token
    token: str | None = None  # the console's own token (dev mode and the overview sampler)
    deadline_s: float = 10.0
    extra: dict[str, Any] = field(default_factory=dict)

    def client(self, token: str | None) -> AsyncClient:
        return AsyncClient(self.addresses, token=token or None, tls=self.tls, ca_file=self.ca_file,
                           cert_file=self.cert_file, key_file=self.key_file, deadline_s=self.deadline_s, retries=2)


class Console:
    """The state of one console process: settings, sessions, templates, the overview sampler."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.sessions = SessionStore(clock, settings.client)
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
        self.env.filters.update(when=when, ago=self.ago, span=span, pretty=pretty)
        self.dev_session: Session | None = None
        self.sampler: Any = None  # overview.Sampler, set by app.build

    def ago(self, dt: datetime | None) -> str:
        if dt is None:
            return "—"
        d = (self.clock.now() - dt).total_seconds()
        word = "ago" if d >= 0 else "from now"
        d = abs(d)
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if d >= size:
                return f"{d / size:.0f} {unit} {word}"
        return f"{d:.0f} s {word}"

    def render(self, request: Request, template: str, session: Session | None, status: int = 200,
               **ctx: Any) -> HTMLResponse:
        body = self.env.get_template(template).render(
            request=request, s=session, csrf=session.csrf if session else "", dev=self.settings.no_login,
            flashes=session.take_flashes() if session else [], now=self.clock.now(), path=request.url.path,
            qs=lambda **kw: qs(request, **kw), **ctx)
        return HTMLResponse(body, status_code=status)

    async def login(self, token: str | None) -> Session:
        """A session for `token` once the cluster accepted it (Unauthenticated otherwise): one
        schedules page of size 1 proves the token; ClusterStatus tells an admin from a tenant."""
        client = self.settings.client(token)
        try:
            first = await client.schedules_page(page_size=1)
            try:
                await client.status()
                admin = True
            except PermissionDenied:
                admin = False
        except BaseException:
            await client.close()
            raise
        tenant = None if admin or not first.items else first.items[0].tenant
        who = "admin" if admin else (f"tenant {tenant}" if tenant else "tenant token")
        if self.settings.no_login:
            who = "dev mode (no login)"
        return self.sessions.create(client, admin=admin, who=who, tenant=tenant)

    async def session_of(self, request: Request) -> Session | None:
        s = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if s is None and self.settings.no_login:
            s = await self.login(self.settings.token)
            request.state.new_session = s
        return s

    async def logout(self, session_id: str | None) -> None:
        s = self.sessions.drop(session_id)
        if s is not None:
            await s.client.close()


def set_session_cookie(request: Request, response: Response, session: Session) -> None:
    response.set_cookie(SESSION_COOKIE, session.id, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")


def qs(request: Request, **changes: Any) -> str:
    """The current query string with `changes` applied (None removes a key), for links that keep
    the filters."""
    params = dict(request.query_params)
    for k, v in changes.items():
        if v is None or v == "":
            params.pop(k, None)
        else:
            params[k] = str(v)
    return "?" + urlencode(params) if params else "?"


def when(dt: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return "—" if dt is None else dt.astimezone(UTC).strftime(fmt) + (" UTC" if "%S" in fmt else "")


def span(d: timedelta | None) -> str:
    if d is None:
        return "—"
    s = d.total_seconds()
    return f"{s * 1000:.0f} ms" if abs(s) < 1 else f"{s:.1f} s" if abs(s) < 120 else f"{s / 60:.1f} min"


def pretty(v: Any) -> str:
    return "—" if v is None else json.dumps(v, indent=2, sort_keys=True, default=str)


Handler = Callable[[Console, Request, Session], Awaitable[Response]]


def login_redirect(request: Request, why: str = "") -> RedirectResponse:
    target = "/login" + ("?" + urlencode({"why": why}) if why else "")
    resp = RedirectResponse(target, status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


def page(console: Console, handler: Handler, *, admin: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """The request's session, CSRF on POST, and the Client's errors as pages (see the module doc)."""

    async def endpoint(request: Request) -> Response:
        try:
            session = await console.session_of(request)
        except Unauthenticated:
            return console.render(request, "error.html", None, 503, title="The console's token was refused",
                                  message="dev mode: the cluster refused the console's own token")
        if session is None:
            return login_redirect(request)
        if request.method == "POST":
            form = await request.form()
            sent = form.get("csrf") or request.headers.get("x-csrf-token")
            if not same(str(sent) if sent else None, session.csrf):
                log.warning("console: POST %s refused: missing or wrong CSRF token", request.url.path)
                return console.render(request, "error.html", session, 403, title="Refused",
                                      message="This form has no valid CSRF token (it may come from another site, "
                                              "or from before a restart of the console). Reload the page and retry.")
        if admin and not session.admin:
            return console.render(request, "error.html", session, 403, title="Admins only",
                                  message="This page needs an admin token.")
        try:
            resp = await handler(console, request, session)
        except Unauthenticated:
            await console.logout(session.id)
            return login_redirect(request, "expired")
        except ApiError as exc:
            return console.render(request, "error.html", session, _status(exc), title=f"{exc.code}",
                                  message=str(exc))
        new = getattr(request.state, "new_session", None)
        if new is not None:
            set_session_cookie(request, resp, new)
        return resp

    return endpoint


def _status(exc: ApiError) -> int:
    return {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 409,
            "ALREADY_EXISTS": 409, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504}.get(exc.code, 500)


async def login_page(console: Console, request: Request) -> Response:
    """GET: the form (with a fresh double-submit CSRF cookie); POST: check the token with the
    cluster, start a session, go to the page asked for."""
    import secrets

    if console.settings.no_login:
        return RedirectResponse("/", status_code=303)
    error = ""
    if request.method == "POST":
        form = await request.form()
        if not same(str(form.get("csrf", "")), request.cookies.get(LOGIN_COOKIE)):
            return console.render(request, "error.html", None, 403, title="Refused",
                                  message="The login form has no valid CSRF token. Reload the page and retry.")
        token = str(form.get("token", "")).strip()
        if not token:
            error = "Paste a token."
        else:
            try:
                session = await console.login(token)
            except Unauthenticated:
                error = "The cluster refused this token (unknown, revoked or expired)."
            except ApiError as exc:
                error = f"Could not check the token: {exc}"
            else:
                log.info("console: login as %s", session.who)
                done = RedirectResponse("/", status_code=303)
                set_session_cookie(request, done, session)
                done.delete_cookie(LOGIN_COOKIE, path="/login")
                return done
    nonce = secrets.token_urlsafe(24)
    why = request.query_params.get("why")
    notice = "Your session ended: the cluster no longer accepts its token. Log in again." if why == "expired" else ""
    resp = console.render(request, "login.html", None, 401 if error else 200, login_csrf=nonce, error=error,
                          notice=notice)
    resp.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                    path="/login")
    return resp
