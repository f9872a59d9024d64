"""What a webhook subscription may be: validated values (pure; bad input names its field).

Limits: a URL of at most `MAX_URL` characters, http(s) only, to a destination the node's egress
policy allows (cronwheel/egress.py: literal addresses and local names are judged here, host names
again at every send); at most `MAX_WEBHOOKS_PER_TENANT` webhooks per tenant, and as many for the
cluster's own (tenantless) ones: RESOURCE_EXHAUSTED past it.
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Iterable

from cronwheel.cluster.webhooks.payload import ALERT_KINDS, CLUSTER_KINDS, EVENT_KINDS, TENANT_ALERT_KINDS
from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument
from cronwheel.secret_store import SEALED_PREFIX, is_sealed

MAX_URL = 2000
MAX_WEBHOOKS_PER_TENANT = 100  # docs/operating.md ("Webhooks and egress")
SECRET_CHARS = (16, 200)


def url(value: str, egress: EgressPolicy) -> str:
    v = value.strip() if isinstance(value, str) else ""
    if not v:
        raise InvalidArgument("url", "is required")
    if len(v) > MAX_URL or any(ord(c) <= 32 or ord(c) == 127 for c in v):
        raise InvalidArgument("url", f"must be at most {MAX_URL} characters without spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(v)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise InvalidArgument("url", f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument("url", "must be an absolute http:// or https:// URL")
    egress.check_url(v, "url")
    return v


def kinds(values: Iterable[str], tenant: str | None = None) -> tuple[str, ...]:
    """The kinds subscribed to, deduplicated in the order given; none given: the alerts (a
    tenant's webhook: its tenant's alerts; cluster events have no tenant and never reach it)."""
    out: list[str] = []
    for i, k in enumerate(values):
        k = k.strip()
        if k not in EVENT_KINDS:
            raise InvalidArgument(f"kinds[{i}]", f"unknown event kind {k!r}; one of {', '.join(EVENT_KINDS)}")
        if tenant is not None and k in CLUSTER_KINDS:
            raise InvalidArgument(f"kinds[{i}]", f"{k} is a cluster event (no tenant): only a webhook without a tenant "
                                                 "(an admin's, without --tenant) receives it")
        if k not in out:
            out.append(k)
    return tuple(out) or (TENANT_ALERT_KINDS if tenant is not None else ALERT_KINDS)


def secret(value: str) -> str:
    """The secret given, or a new one (32 random bytes, hex) when empty."""
    if not value:
        return "whsec_" + secrets.token_hex(32)
    lo, hi = SECRET_CHARS
    if not lo <= len(value) <= hi or any(ord(c) <= 32 or ord(c) == 127 for c in value):
        raise InvalidArgument("secret", f"must be {lo}..{hi} characters without spaces or control characters")
    if is_sealed(value):  # it would be taken for a sealed value at rest
        raise InvalidArgument("secret", f"must not start with {SEALED_PREFIX!r}")
    return value
