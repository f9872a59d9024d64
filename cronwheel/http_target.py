"""HTTP targets (issue 50): a schedule or a one-off job that calls a service instead of naming a
job type for SDK workers. The one definition of a target's rules and of what its answer means;
the API validates with it (cluster/commands), the doer (cronwheel/client/http_doer.py, which
builds the request) calls with it. Pure: no I/O, the time is an argument.

A target is stored as JSON on the schedule and copied to each run (migration 0023); its runs
have the reserved job type `http`. Header values are literal text or `{"secret": NAME}`, a
secret of the tenant that only the doer resolves, at call time (a rotation applies to the next
call), and that no answer, log or event holds.

What a call sends (besides the target's own headers):

    Idempotency-Key: <execution id>            the same on every attempt of the run
    Cronwheel-Execution: <execution id>
    Cronwheel-Scheduled-For: <RFC 3339 UTC>
    Cronwheel-Attempt: <1, 2, ...>
    Cronwheel-Fencing-Token: <n>               with the id, the credential of ReportTargetRun
    Cronwheel-Signature: t=<unix s>,v1=<hex>   with a signing secret, as webhooks are signed

What the answer means (`outcome`): 2xx succeeded (202: accepted, the target reports the end
itself), the start of the body kept as the result; 408, 429, 5xx, no answer (connection error,
timeout): retryable, `Retry-After` (seconds or an HTTP date) the earliest next attempt; any other
status: failed, not retryable, with the status and the start of the body as the error.
"""

from __future__ import annotations

import email.utils
import fnmatch
import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument

HTTP_TYPE = "http"  # the reserved job type of a target's runs
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 1800
MAX_CONCURRENCY = 10000
MAX_URL = 2000
MAX_HEADERS = 50
MAX_HEADER_VALUE = 8192
MAX_BODY_BYTES = 256 * 1024
RESULT_BYTES = 4096  # the start of an answer's body kept as the result or the error
# What a target's own headers may not set: what every call carries (Idempotency-Key and the
# Cronwheel-* headers, cronwheel/client/http_doer.py) and what the connection decides.
RESERVED_HEADERS = frozenset(("idempotency-key", "host", "content-length", "transfer-encoding", "connection"))
RESERVED_PREFIX = "cronwheel-"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")  # secrets.name's CHECK (migration 0021)


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A header value held in the secret store: the tenant's secret `name`."""

    name: str


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """A validated target. `body` None: the run's payload as JSON. Immutable."""

    url: str
    method: str = "POST"
    headers: Mapping[str, str | SecretRef] = field(default_factory=dict)
    body: str | None = None
    timeout_s: int = DEFAULT_TIMEOUT_S
    signing_secret: str = ""
    concurrency_limit: int | None = None  # the most calls of the tenant to this origin open at once
    rate_per_s: float | None = None  # the most calls of the tenant to this origin started per second
    burst: float | None = None  # its token bucket's size (None: one second's worth)

    def to_json(self) -> str:
        heads = {k: ({"secret": v.name} if isinstance(v, SecretRef) else v) for k, v in self.headers.items()}
        return json.dumps({"url": self.url, "method": self.method, "headers": heads, "body": self.body,
                           "timeout_s": self.timeout_s, "signing_secret": self.signing_secret,
                           **({} if self.concurrency_limit is None else {"concurrency_limit": self.concurrency_limit}),
                           **({} if self.rate_per_s is None else {"rate_per_s": self.rate_per_s}),
                           **({} if self.burst is None else {"burst": self.burst})},
                          separators=(",", ":"), sort_keys=True)

    def secrets(self) -> tuple[str, ...]:
        """The names of the secrets a call resolves (signing secret first)."""
        names = [v.name for v in self.headers.values() if isinstance(v, SecretRef)]
        return tuple(dict.fromkeys(([self.signing_secret] if self.signing_secret else []) + names))


def parse(doc: Mapping[str, Any] | str, egress: EgressPolicy | None = None, prefix: str = "target") -> HttpTarget:
    """A target from its JSON (stored, or as the API's HttpTarget converts it), every field
    checked; field names are `prefix`.field. With `egress`, the URL is checked as stored."""
    d: Mapping[str, Any] = json.loads(doc) if isinstance(doc, str) else doc
    url = d.get("url") or ""
    if not isinstance(url, str) or not url:
        raise InvalidArgument(f"{prefix}.url", "required")
    if len(url) > MAX_URL:
        raise InvalidArgument(f"{prefix}.url", f"must be at most {MAX_URL} characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"{prefix}.url", "must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise InvalidArgument(f"{prefix}.url", "must not carry credentials (name a secret in a header)")
    if egress is not None:
        egress.check_url(url, f"{prefix}.url")
    method = (d.get("method") or "POST").upper()
    if method not in METHODS:
        raise InvalidArgument(f"{prefix}.method", f"must be one of {', '.join(METHODS)}, got {method[:20]!r}")
    body = d.get("body")
    if body is not None and len(str(body).encode()) > MAX_BODY_BYTES:
        raise InvalidArgument(f"{prefix}.body", f"must be at most {MAX_BODY_BYTES} bytes")
    timeout_s = d.get("timeout_s") or DEFAULT_TIMEOUT_S
    if not isinstance(timeout_s, int) or not 1 <= timeout_s <= MAX_TIMEOUT_S:
        raise InvalidArgument(f"{prefix}.timeout_s",
                              f"must be 1..{MAX_TIMEOUT_S} (0: {DEFAULT_TIMEOUT_S}), got {timeout_s}")
    signing = d.get("signing_secret") or ""
    if signing and not _SECRET_NAME.match(signing):
        raise InvalidArgument(f"{prefix}.signing_secret", "a secret name: letters, digits, '_', '.', '-' (1..128)")
    limit = d.get("concurrency_limit") or None
    if limit is not None and (not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY):
        raise InvalidArgument(f"{prefix}.concurrency_limit", f"must be 1..{MAX_CONCURRENCY} (0: no limit), got {limit}")
    rate, burst = _rate(d.get("rate_per_s"), d.get("burst"), prefix)
    return HttpTarget(url, method, _headers(d.get("headers") or {}, prefix), body, timeout_s, signing, limit,
                      rate, burst)


def _rate(rate: Any, burst: Any, prefix: str) -> tuple[float | None, float | None]:
    """A target's token bucket: rate_per_s 0.001..100,000 (0 or none: no limit), burst 1..1,000,000
    (0 or none: one second's worth) and only with a rate."""
    out = []
    for name, v, lo, hi in (("rate_per_s", rate, 0.001, 100_000.0), ("burst", burst, 1.0, 1_000_000.0)):
        if not v:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise InvalidArgument(f"{prefix}.{name}", f"must be {lo:g}..{hi:g} (0: none), got {v!r}")
        out.append(float(v))
    if out[1] is not None and out[0] is None:
        raise InvalidArgument(f"{prefix}.burst", "needs rate_per_s")
    return out[0], out[1]


def _headers(raw: Mapping[str, Any], prefix: str) -> dict[str, str | SecretRef]:
    if len(raw) > MAX_HEADERS:
        raise InvalidArgument(f"{prefix}.headers", f"at most {MAX_HEADERS} headers")
    out: dict[str, str | SecretRef] = {}
    for name, value in raw.items():
        where = f"{prefix}.headers[{name[:100]}]"
        if not _TOKEN.match(name):
            raise InvalidArgument(where, "a header name must be an HTTP token of 1..100 characters")
        if name.lower() in RESERVED_HEADERS or name.lower().startswith(RESERVED_PREFIX):
            raise InvalidArgument(where, "is set by cronwheel on every call")
        if isinstance(value, Mapping):
            ref = value.get("secret")
            if set(value) != {"secret"} or not isinstance(ref, str) or not _SECRET_NAME.match(ref):
                raise InvalidArgument(where, 'a value or {"secret": NAME}: letters, digits, "_", ".", "-" (1..128)')
            out[name] = SecretRef(ref)
        elif isinstance(value, str):
            if len(value) > MAX_HEADER_VALUE or any(c in value for c in "\r\n\0"):
                raise InvalidArgument(where, f"at most {MAX_HEADER_VALUE} characters, no CR, LF or NUL")
            out[name] = value
        else:
            raise InvalidArgument(where, 'a value or {"secret": NAME}')
    return out


_RULE = re.compile(r"^[A-Za-z0-9*?.-]{1,253}(:[0-9]{1,5})?$")


def egress_rule(rule: str, field: str) -> str:
    """A tenant's egress rule checked: "HOST_GLOB" or "HOST_GLOB:PORT" (`*` and `?` globs)."""
    r = rule.strip().lower() if isinstance(rule, str) else ""
    if not _RULE.match(r) or (":" in r and not 1 <= int(r.rsplit(":", 1)[1]) <= 65535):
        raise InvalidArgument(field, f"{str(rule)[:100]!r}: expected HOST_GLOB or HOST_GLOB:PORT "
                                     "(e.g. api.example.internal:443, *.example.com)")
    return r


def check_egress_rules(url: str, rules: tuple[str, ...] | None, field: str = "target.url") -> None:
    """Refuse `url` unless a tenant's rules allow it (None or none: any public address, which
    the egress policy judges). A rule matches the URL's host (a glob, ignoring case) and, when it
    names one, its port (the scheme's default when the URL has none)."""
    if not rules:
        return
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for rule in rules:
        glob, _, p = rule.partition(":")
        if fnmatch.fnmatchcase(host, glob) and (not p or int(p) == port):
            return
    raise InvalidArgument(field, f"refused by the tenant's egress rules: {host}:{port} matches none of "
                                 f"{', '.join(rules)}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an answer means for the run. kind: "succeeded", "accepted" (202: the target reports),
    "retry" or "failed"; `result`: the JSON result (succeeded, accepted); `error`: the error
    text; `retry_after_s`: the earliest next attempt, from now (None: the policy's backoff)."""

    kind: str
    result: Any = None
    error: str = ""
    retry_after_s: float | None = None


def outcome(status: int | None, body: bytes, retry_after: str | None, now_s: float, *,
            refused: bool = False) -> Outcome:
    """The outcome of one call: `status` None when there was no HTTP answer (`refused`: the
    egress policy refused the destination, nothing was sent). `now_s`: unix seconds."""
    if refused:
        return Outcome("retry", error="refused by egress policy")
    if status is None:
        return Outcome("retry", error="delivery failed (no answer within the target's timeout, or no connection)")
    start = body[:RESULT_BYTES].decode(errors="replace")
    if 200 <= status < 300:
        result = {"status": status, "body": start}
        return Outcome("accepted" if status == 202 else "succeeded", result=result)
    error = f"HTTP {status}: {start}" if start else f"HTTP {status}"
    if status in (408, 429) or status >= 500:
        return Outcome("retry", error=error, retry_after_s=parse_retry_after(retry_after, now_s))
    return Outcome("failed", error=error)


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None if absent or bad.
    Capped at a day (a target cannot park a run for ever)."""
    if not value:
        return None
    v = value.strip()
    if v.isdigit():
        return min(float(v), 86400.0)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return min(max(0.0, when.timestamp() - now_s), 86400.0)
