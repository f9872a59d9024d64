"""Console sessions: who is logged in, with which token, and their CSRF token.

The browser holds only a random session id (cookie `cw_session`: HttpOnly, SameSite=Strict, and
Secure when the console is served over HTTPS); the bearer token the person typed stays in the
console process, inside the session's own `AsyncClient` (so it is never in a URL, a page, a log
line or the browser's storage). A console restart forgets every session: everyone logs in again.

Every POST must carry the session's CSRF token (form field `csrf` or header `X-CSRF-Token`,
compared in constant time); the login form, before any session exists, uses a double-submit
cookie (`cw_login`) instead.

A session idle for `IDLE` is dropped; so is a session whose token the cluster refuses
(UNAUTHENTICATED on any call: the person is sent back to the login page).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from cronwheel.client import AsyncClient
from cronwheel.clock import Clock

SESSION_COOKIE = "cw_session"
LOGIN_COOKIE = "cw_login"
IDLE = timedelta(hours=8)
MAX_SESSIONS = 10_000  # the oldest is dropped past this (a login flood cannot grow memory forever)


@dataclass
class Session:
    id: str
    csrf: str
    client: AsyncClient
    admin: bool
    who: str  # what the header shows: "admin", "tenant acme", "dev mode (no login)"
    tenant: str | None  # a tenant token's tenant, when known (from its schedules)
    last_seen: float
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) shown once

    def flash(self, text: str, kind: str = "ok") -> None:
        self.flashes.append((kind, text))

    def take_flashes(self) -> list[tuple[str, str]]:
        out, self.flashes = self.flashes, []
        return out


def same(a: str | None, b: str | None) -> bool:
    """Constant-time comparison of two secrets (False when either is missing)."""
    return bool(a) and bool(b) and hmac.compare_digest(str(a), str(b))


class SessionStore:
    """Sessions by id; task-safe on one event loop (no awaits inside)."""

    def __init__(self, clock: Clock, make_client: Callable[[str | None], AsyncClient]) -> None:
        self.clock = clock
        self.make_client = make_client
        self._by_id: dict[str, Session] = {}

    def create(self, client: AsyncClient, *, admin: bool, who: str, tenant: str | None) -> Session:
        while len(self._by_id) >= MAX_SESSIONS:
            oldest = min(self._by_id.values(), key=lambda s: s.last_seen)
            self._by_id.pop(oldest.id)
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), client, admin, who, tenant,
                    self.clock.monotonic())
        self._by_id[s.id] = s
        return s

    def get(self, session_id: str | None) -> Session | None:
        s = self._by_id.get(session_id or "")
        if s is None:
            return None
        now = self.clock.monotonic()
        if now - s.last_seen > IDLE.total_seconds():
            self._by_id.pop(s.id, None)
            return None
        s.last_seen = now
        return s

    def drop(self, session_id: str | None) -> Session | None:
        return self._by_id.pop(session_id or "", None)

    def all(self) -> list[Session]:
        return list(self._by_id.values())
