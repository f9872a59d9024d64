"""Who is calling: bearer tokens mapped to a tenant or to the admin role, checked by one server
interceptor in front of every cronwheel.v1 service, which also maps domain errors to status
codes (the table is `grpc_errors.STATUS`, the one table of the node).

The auth file (`cronwheel node --auth-file PATH`, or $CRONWHEEL_AUTH_FILE) is JSON::

    {"tokens": [
        {"name": "acme-ci", "sha256": "<hex sha256 of the token>", "tenant": "acme"},
        {"name": "ops",     "sha256": "<hex sha256 of the token>", "admin": true},
        {"name": "ops-acme", "sha256": "...", "admin": true, "tenant": "acme"},
        {"name": "http-doer", "sha256": "...", "doer": true}
    ]}

A `doer` token is an HTTP doer's (`cronwheel worker --http`, issue 50): it may call
DispatchService only, and lease runs of type 'http' only, of every tenant.
Tokens are stored hashed (`printf %s "$TOKEN" | sha256sum`, or `cronwheel token new --offline`). Each
entry is a tenant token (`tenant`) or an admin token (`admin: true`; an optional `tenant` is
then the default tenant of what it creates). `name` is the actor recorded in audit events
(default "token-<first 8 hex digits>"). A bad file fails at start-up. The file is the bootstrap
for the first admin; the other tokens are made through the API (TenantService.CreateToken),
stored hashed in the `tokens` table and checked against every node's in-memory copy of it
(`tokens.TokenCache`, re-read every second: a revocation reaches every node within about 1 s).

Without an auth file the node runs in DEV MODE: no token is needed and every call is an admin
whose default tenant is "default" (what `cronwheel dev` uses). A warning is logged at start.
Dev mode is for loopback only (Redis' protected mode): a node asked to listen beyond loopback
without an auth file refuses to start unless `--insecure` says so (`exposure_refusal`, the one
rule, which `cronwheel console --no-login` follows too). `auth_mode` names what a node runs with
("tokens", "loopback-only", "insecure"); ClusterStatus shows it for every member.

Rules: no, malformed, unknown, revoked or expired token -> UNAUTHENTICATED; a tenant token
naming another tenant -> PERMISSION_DENIED; a tenant token on an admin-only RPC
(AdminService.ClusterStatus, every TenantService RPC: `admin_only`) -> PERMISSION_DENIED;
another tenant's object -> NOT_FOUND (the commands check it). Health and reflection need no
token, and neither does a node's self-view (`ClusterStatus` with metadata `x-cronwheel-local-only`,
answered with that node's own Member only: figures its public metrics endpoint shows too), which
is what a node asks its peers for: no caller's token ever leaves the node it was sent to (issue 48,
item 6: a member address written to etcd could be anyone's). The caller is available to
servicers as `current_caller()`; a call held open (a long poll) re-authenticates with
`authorization_check()`, so a revoked token's poll ends as its other calls are refused.

Concurrency: AuthConfig is immutable; the caller lives in a ContextVar set per call.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import logging
import re
import socket
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc

from cronwheel import errors as e
from cronwheel.clock import Clock
from cronwheel.cluster.api import requests
from cronwheel.cluster.api.grpc_errors import details, status_of
from cronwheel.cluster.api.handlers import responses, rewrap, wrapped_once
from cronwheel.cluster.api.tokens import TokenCache
from cronwheel.cluster.commands.values import text
from cronwheel.errors import InvalidArgument
from cronwheel.token_format import hash_token

log = logging.getLogger("cronwheel.cluster.api.auth")

PROTECTED_PREFIX = "/cronwheel.v1."
CLUSTER_STATUS = "/cronwheel.v1.AdminService/ClusterStatus"
ADMIN_ONLY = frozenset({CLUSTER_STATUS})
ADMIN_ONLY_SERVICES = ("/cronwheel.v1.TenantService/",)  # tenants and tokens
LOCAL_ONLY = "x-cronwheel-local-only"  # ClusterStatus: this node's own Member only (a peer's question)
# RPCs whose request carries its own credential instead of a bearer token: an HTTP target reports
# on the one run it was called for with the (execution id, fencing token) pair it received (issue 50).
TOKENLESS = frozenset({"/cronwheel.v1.DispatchService/ReportTargetRun"})
DOER_SERVICE = "/cronwheel.v1.DispatchService/"  # all a doer token may call (and lease 'http' runs only)


def admin_only(method: str) -> bool:
    """Whether an RPC (its full method name) is refused to tenant tokens: the one rule."""
    return method in ADMIN_ONLY or method.startswith(ADMIN_ONLY_SERVICES)

DEV_TENANT = "default"
_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller. `tenant`: a tenant token's tenant, or an admin's default tenant."""

    name: str
    tenant: str | None
    admin: bool = False
    doer: bool = False  # an HTTP doer's token: DispatchService only, runs of type 'http' of every tenant

    def scope(self) -> str | None:
        """The tenant the caller is confined to; None for an admin or a doer (every tenant)."""
        return None if self.admin or self.doer else self.tenant

    def owner(self, requested: str, field: str) -> str:
        """The tenant owning what the caller creates (a request's `tenant` field)."""
        req = requested.strip() if isinstance(requested, str) else requested
        if not self.admin:
            if req and req != self.tenant:
                raise e.PermissionDenied(f"{field}: a tenant token may only name its own tenant")
            assert self.tenant is not None
            return self.tenant
        if req:
            return text(field, req)
        if self.tenant:
            return self.tenant
        raise InvalidArgument(field, "required for admin callers")

    def filter(self, requested: str, field: str) -> str | None:
        """The tenant a listing is restricted to (None: every tenant, admins only)."""
        req = requested.strip()
        if not self.admin:
            if req and req != self.tenant:
                raise e.PermissionDenied(f"{field}: a tenant token may only name its own tenant")
            return self.tenant
        return text(field, req) if req else None


DEV_CALLER = Caller("dev", DEV_TENANT, admin=True)
SELF_VIEW_CALLER = Caller("self-view", None)  # a tokenless ClusterStatus local-only call: no tenant, no admin
TARGET_CALLER = Caller("http-target", None)  # a TOKENLESS call: the request's own credential is checked
_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("cronwheel_caller")
_RECHECK: contextvars.ContextVar[Callable[[], None]] = contextvars.ContextVar("cronwheel_recheck")


def current_caller() -> Caller:
    """The caller of the RPC being served (set by AuthInterceptor)."""
    try:
        return _CALLER.get()
    except LookupError:
        raise e.Unauthenticated("no authenticated caller") from None


def authorization_check() -> Callable[[], None]:
    """The current call's credential check, bound to the call: calling it (from any task: the
    call's own, or the token list's refresh listener) raises as the interceptor would have
    (Unauthenticated for a token revoked or expired since the call began). A call that holds for
    long (a waiting LeaseExecutions) hands it to the dispatcher, so a revocation ends it as it
    refuses new calls. A no-op outside an authenticated call. The calls of one token on one
    method get the same check (`CredentialCheck`), so whoever checks many held calls at once
    runs each distinct one once (polls.Polls.recheck)."""
    return _RECHECK.get(_no_check)


def _no_check() -> None:
    return None


@dataclass(frozen=True, slots=True)
class AuthConfig:
    tokens: Mapping[str, Caller] = field(default_factory=dict)  # sha256 hex -> caller
    dev: bool = False

    def authenticate(self, metadata: Any, db: TokenCache | None = None, now: datetime | None = None) -> Caller:
        """The caller of these metadata: an auth-file token, else (`db`) an API-made one, checked
        for expiry at `now`."""
        if self.dev:
            return DEV_CALLER
        return self.caller_of(bearer_digest(metadata), db, now)

    def caller_of(self, digest: str, db: TokenCache | None = None, now: datetime | None = None) -> Caller:
        """The caller of the token whose SHA-256 is `digest` (as `authenticate`, not in dev mode)."""
        caller = self.tokens.get(digest)
        if caller is None and db is not None and now is not None:
            tok = db.lookup(digest, now)
            caller = None if tok is None else Caller(tok.name, tok.tenant, tok.admin)
        if caller is None:
            raise e.Unauthenticated("unknown token")
        return caller


def self_view_only(metadata: Any) -> bool:
    """Whether a call asks for the answering node's own view only (LOCAL_ONLY metadata)."""
    return any(k == LOCAL_ONLY and v for k, v in (metadata or ()))


def bearer_digest(metadata: Any) -> str:
    """The SHA-256 (hex) of the bearer token in the metadata; Unauthenticated when there is none
    or it is malformed."""
    values = [v for k, v in (metadata or ()) if k == "authorization"]
    if not values:
        raise e.Unauthenticated("missing credentials: send metadata 'authorization: Bearer <token>'")
    value = values[0] if isinstance(values[0], str) else ""
    scheme, _, token = value.strip().partition(" ")
    if len(values) > 1 or scheme.lower() != "bearer" or not token.strip():
        raise e.Unauthenticated("malformed authorization metadata: expected 'Bearer <token>'")
    return hash_token(token.strip())


def load_auth(path: str | None) -> AuthConfig:
    """The auth config from a file; dev mode when `path` is empty. InvalidArgument("auth_file")
    for a missing or malformed file."""
    if not path:
        return AuthConfig(dev=True)
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InvalidArgument("auth_file", f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidArgument("auth_file", f"{path} is not JSON: {exc}") from None
    entries = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InvalidArgument("auth_file", f'{path}: expected {{"tokens": [...]}} with at least one token')
    tokens: dict[str, Caller] = {}
    for i, ent in enumerate(entries):
        where = f"{path}: tokens[{i}]"
        if not isinstance(ent, dict) or set(ent) - {"name", "sha256", "tenant", "admin", "doer"}:
            raise InvalidArgument("auth_file", f"{where}: expected an object with sha256, tenant, admin or doer, name")
        digest = ent.get("sha256")
        if not isinstance(digest, str) or not _HEX.match(digest.lower()):
            raise InvalidArgument("auth_file", f"{where}: sha256 must be 64 hex digits (the token's SHA-256)")
        admin = ent.get("admin", False)
        tenant = ent.get("tenant")
        if not isinstance(admin, bool) or (tenant is not None and (not isinstance(tenant, str) or not tenant.strip())):
            raise InvalidArgument("auth_file", f"{where}: admin must be true/false and tenant a non-empty string")
        doer = ent.get("doer", False)
        if doer is not False and (doer is not True or admin or tenant is not None):
            raise InvalidArgument("auth_file", f"{where}: doer: true stands alone (no tenant, no admin)")
        if not admin and tenant is None and not doer:
            raise InvalidArgument("auth_file", f"{where}: a token needs a tenant, admin: true or doer: true")
        name = ent.get("name") or f"token-{digest[:8].lower()}"
        if not isinstance(name, str):
            raise InvalidArgument("auth_file", f"{where}: name must be a string")
        if digest.lower() in tokens:
            raise InvalidArgument("auth_file", f"{where}: the same token appears twice")
        tokens[digest.lower()] = Caller(name, tenant.strip() if tenant else None, admin, doer)
    return AuthConfig(tokens=tokens)


# ---------------------------------------------------------------------------------- exposure

AUTH_TOKENS, AUTH_LOOPBACK_ONLY, AUTH_INSECURE = "tokens", "loopback-only", "insecure"


def is_loopback(listen: str) -> bool:
    """Whether a `host:port` listen address is reachable from this machine only: a loopback
    literal, or a name resolving to loopback addresses only. An empty host, 0.0.0.0, [::], any
    other address and a name that does not resolve are not."""
    host = listen.rpartition(":")[0].strip("[]") if ":" in listen else listen
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def exposure_refusal(listen: str, authenticated: bool, insecure: bool, *, without: str, remedy: str) -> str | None:
    """Why a server must not listen on `listen` (None: it may): beyond loopback, unauthenticated
    and not told `--insecure`. The line, for InvalidArgument("--listen", ...): `L is reachable
    beyond loopback <without>; <remedy>, or --insecure to serve it anyway`."""
    if authenticated or insecure or is_loopback(listen):
        return None
    return f"{listen} is reachable beyond loopback {without}; {remedy}, or --insecure to serve it anyway"


def auth_mode(auth_file: str, listen: str) -> str:
    """What a node runs with: "tokens" (an auth file), "loopback-only" (dev mode on loopback),
    "insecure" (dev mode beyond loopback, started with --insecure)."""
    if auth_file:
        return AUTH_TOKENS
    return AUTH_LOOPBACK_ONLY if is_loopback(listen) else AUTH_INSECURE


def abort_args(exc: e.CronwheelError) -> tuple[grpc.StatusCode, str]:
    """Status code and message of a domain error (the one table: grpc_errors.STATUS)."""
    return status_of(exc) or grpc.StatusCode.INTERNAL, exc.message


async def _fail(context: grpc.aio.ServicerContext[Any, Any], exc: Exception, method: str) -> None:
    """Ends a call that raised `exc` with its status (the one place errors are mapped); an abort
    the servicer made itself goes on as it is."""
    if isinstance(exc, grpc.aio.AbortError):
        raise exc
    if isinstance(exc, e.CronwheelError) and not isinstance(exc, e.Internal):
        code, message = abort_args(exc)
        await context.abort(code, message, trailing_metadata=details(exc, code))
    log.exception("unexpected error in RPC", extra={"event": "rpc_internal_error", "method": method})
    await context.abort(grpc.StatusCode.INTERNAL, "internal error (logged on the server)")


def _checked(request: Any) -> Any:
    """The request, refused (InvalidArgument) if it did not decode; a request stream is wrapped
    so each of its messages is checked as it arrives."""
    if hasattr(request, "__aiter__"):
        return _checked_stream(request)
    requests.check(request)
    return request


async def _checked_stream(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for item in stream:
        requests.check(item)
        yield item


Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class CredentialCheck:
    """A held call's credentials checked again (`authorization_check`): its token, by the digest
    taken when the call arrived, looked up as a new call's would be (revoked, expired, a stale
    token list: it raises), on its method. No metadata read, no hashing: a node checks every held
    call after each refresh of its token list, and re-hashing each call's token took 4 ms per
    1,000 held calls, once a second, on the event loop (issue 48, bench.long_polls). The calls of
    one token on one method share one check (the interceptor keeps it while a call holds it), so
    it is checked once for all of them."""

    interceptor: AuthInterceptor
    digest: str
    method: str

    def __call__(self) -> None:
        self.interceptor.caller(self.digest, self.method)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every call to a cronwheel.v1 service and maps its errors. `tokens`: the
    node's copy of the API-made tokens (None: the auth file's only); `clock`: their expiry."""

    def __init__(self, config: AuthConfig, tokens: TokenCache | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.tokens = tokens
        self.clock = clock
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        # One check per (token digest, method) while calls hold it (CredentialCheck).
        self._checks: weakref.WeakValueDictionary[tuple[str, str], CredentialCheck] = weakref.WeakValueDictionary()
        if config.dev:
            log.warning("authentication disabled (dev mode): every call is an admin of tenant 'default'",
                        extra={"event": "auth_dev_mode"})
        else:
            log.info("authentication enabled", extra={"event": "auth_enabled", "tokens": len(config.tokens)})

    def _authorize(self, context: grpc.aio.ServicerContext[Any, Any],
                   method: str) -> tuple[Caller, Callable[[], None]]:
        """The caller, and the check that authorizes it again later (`authorization_check`)."""
        metadata = context.invocation_metadata()
        if method == CLUSTER_STATUS and self_view_only(metadata):
            return SELF_VIEW_CALLER, _no_check  # AdminService answers it with this node's Member only
        if method in TOKENLESS:
            return TARGET_CALLER, _no_check  # ReportTargetRun: the run's (id, fencing token) is the credential
        if self.config.dev:
            return DEV_CALLER, _no_check
        digest = bearer_digest(metadata)
        caller = self.caller(digest, method)
        check = self._checks.get((digest, method))
        if check is None:
            check = self._checks[(digest, method)] = CredentialCheck(self, digest, method)
        return caller, check

    def caller(self, digest: str, method: str) -> Caller:
        """The caller of a token (its SHA-256) on `method`, or the error that refuses it."""
        now = self.clock.now() if self.clock is not None else None
        caller = self.config.caller_of(digest, self.tokens, now)
        if admin_only(method) and not caller.admin:
            raise e.PermissionDenied(f"{method.rsplit('/', 1)[-1]} is admin-only")
        if caller.doer and not method.startswith(DOER_SERVICE):
            raise e.PermissionDenied(f"{method.rsplit('/', 1)[-1]}: a doer token may call DispatchService only")
        return caller

    def _unary(self, inner: Behavior, method: str) -> Callable[..., Awaitable[Any]]:
        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            token = recheck = None
            try:  # inline, not an async context manager: this runs on every call
                caller, check = self._authorize(context, method)
                token = _CALLER.set(caller)
                recheck = _RECHECK.set(check)
                return await inner(_checked(request), context)
            except Exception as exc:
                await _fail(context, exc, method)
            finally:
                if token is not None:
                    _CALLER.reset(token)
                if recheck is not None:
                    _RECHECK.reset(recheck)

        return behavior

    def _streaming(self, inner: Behavior, method: str) -> Callable[..., AsyncIterator[Any]]:
        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            token = None
            try:
                token = _CALLER.set(self._authorize(context, method)[0])
                async for item in responses(inner(_checked(request), context)):
                    yield item
            except Exception as exc:
                await _fail(context, exc, method)
            finally:
                if token is not None:
                    _CALLER.reset(token)

        return behavior

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        return await wrapped_once(self._handlers, continuation, details, self._wrap)

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if not method.startswith(PROTECTED_PREFIX):
            return handler  # health, reflection
        return rewrap(handler, method, self._unary, self._streaming,
                      requests.tolerant(handler.request_deserializer))


# ---------------------------------------------------------------------------------- TLS


def read_tls(cert: str, key: str) -> tuple[bytes, bytes] | None:
    """(certificate chain, private key) PEM bytes, or None without TLS. InvalidArgument when only
    one is given or a file cannot be read."""
    if not cert and not key:
        return None
    if not cert or not key:
        raise InvalidArgument("tls_cert" if not cert else "tls_key", "TLS needs both --tls-cert and --tls-key")
    out = []
    for name, p in (("tls_cert", cert), ("tls_key", key)):
        try:
            out.append(Path(p).read_bytes())
        except OSError as exc:
            raise InvalidArgument(name, f"cannot read {p}: {exc.strerror or exc}") from None
    return out[0], out[1]


def server_credentials(cert: str, key: str) -> grpc.ServerCredentials | None:
    pair = read_tls(cert, key)
    return None if pair is None else grpc.ssl_server_credentials([(pair[1], pair[0])])


def peer_channel(address: str, cert: str) -> grpc.aio.Channel:
    """A channel to another node: TLS trusting our own certificate chain when TLS is on."""
    if not cert:
        return grpc.aio.insecure_channel(address)
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=Path(cert).read_bytes()))
