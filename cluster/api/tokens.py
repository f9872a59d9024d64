"""Every node's in-memory copy of the API-made tokens (the `tokens` table), so that checking a
token costs no database round trip and a revocation reaches every node without a restart.

Refresh: `run()` re-reads the live (not revoked) tokens every `REFRESH_S` (the one place this
interval is defined; the node passes its Clock), and the TenantService refreshes its own node
at once after a create or a revoke. So a token revoked through any node is refused by every
node within REFRESH_S plus one read of the table (about 1 s), and a new token works everywhere
within the same time.

Expiry is checked per call against the Clock (`lookup(digest, now)`): exact, no refresh needed.

Calls held open (long polls) re-check their token before each claim, and the `listeners` (the
node wires the dispatcher's `recheck`) are called after each refresh, so a poll of a revoked
token ends within about REFRESH_S of the revocation, not at its next wake-up.

Fail closed: when the table could not be read for `STALE_S` (the database is unreachable), the
copy may be missing revocations, so API-made tokens are refused with UNAVAILABLE ("token list
is stale") until a read succeeds again; the auth file's tokens keep working (they are the
bootstrap and need no database).

Concurrency: one task (`run`) replaces the dict as a whole; readers on the same event loop see
the old or the new dict, never a half-built one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwheel import errors as e
from cronwheel.clock import Clock

log = logging.getLogger("cronwheel.cluster.api.tokens")

REFRESH_S = 1.0  # how often every node re-reads the token table (a revocation's reach)
STALE_S = 10.0  # API-made tokens are refused once the copy is older than this


@dataclass(frozen=True, slots=True)
class DbToken:
    name: str
    tenant: str | None
    admin: bool
    expires_at: datetime | None


Source = Callable[[], Awaitable[list[dict[str, Any]]]]  # storage.tokens.TokensPort.live


class TokenCache:
    def __init__(self, source: Source, clock: Clock, interval_s: float = REFRESH_S,
                 stale_s: float = STALE_S) -> None:
        self.source = source
        self.clock = clock
        self.interval_s = interval_s
        self.stale_s = stale_s
        self._tokens: Mapping[str, DbToken] = {}
        self._read_at: float | None = None  # monotonic time of the last successful read
        # Called after each successful read: long calls re-check their tokens (Dispatcher.recheck)
        self.listeners: list[Callable[[], None]] = []

    async def refresh(self) -> None:
        """Re-read the live tokens (raises the storage error when the read fails)."""
        started = self.clock.monotonic()
        got = await self.source()
        self._tokens = {r["sha256"]: DbToken(r["name"], r["tenant"], r["admin"], r["expires_at"]) for r in got}
        self._read_at = started
        for listener in self.listeners:
            listener()

    async def run(self) -> None:
        failing = False
        while True:
            try:
                await self.refresh()
                if failing:
                    log.info("token list read again", extra={"event": "tokens_refreshed"})
                failing = False
            except (e.Unavailable, e.Internal) as exc:
                if not failing:
                    log.warning("cannot read the token list: %s", exc, extra={"event": "tokens_refresh_failed"})
                failing = True
            await self.clock.sleep(self.interval_s)

    def lookup(self, digest: str, now: datetime) -> DbToken | None:
        """The live token with this SHA-256, or None. Unauthenticated when it expired;
        Unavailable when the copy is too old to trust."""
        tok = self._tokens.get(digest)
        if tok is None:
            return None
        if self._read_at is None or self.clock.monotonic() - self._read_at > self.stale_s:
            raise e.Unavailable("tokens", f"token list is stale (not read for over {self.stale_s:g} s)")
        if tok.expires_at is not None and tok.expires_at <= now:
            raise e.Unauthenticated("token expired")
        return tok
