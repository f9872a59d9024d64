"""The webhook signature: part of the wire contract, so both the sender (cluster/webhooks/) and
receivers (`cronwheel.client.verify_webhook_signature`) use this one definition. Hand-written
(not generated; tools/generate.py leaves it alone). Pure: the time is an argument.

Every delivery carries `Cronwheel-Signature: t=<unix seconds>,v1=<hex>`, where `<hex>` is
HMAC-SHA256 keyed with the webhook's secret over `f"{t}.{body}"` (the exact request body bytes),
as Stripe signs its webhooks. A receiver recomputes it over the raw body it read, compares in
constant time, and refuses a `t` too far from its own clock (replays).
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "Cronwheel-Signature"
DELIVERY_HEADER = "Cronwheel-Delivery"  # the delivery's id: the same on every retry (dedupe on it)
ATTEMPT_HEADER = "Cronwheel-Attempt"  # 1 for the first try, then 2, 3, ...
EVENT_HEADER = "Cronwheel-Event"  # the event's kind
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, t: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `f"{t}.{body}"` keyed with `secret`."""
    return hmac.new(secret.encode(), str(t).encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, t: int, body: bytes) -> str:
    """The value of the Cronwheel-Signature header of `body` sent at unix time `t`."""
    return f"t={t},v1={signature(secret, t, body)}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance_s: float = DEFAULT_TOLERANCE_S) -> bool:
    """Whether `header` (a Cronwheel-Signature value) signs `body` with `secret`, at a time
    within `tolerance_s` of `now` (unix seconds). Any v1 entry may match (secret rotation)."""
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [v for k, v in parts if k.strip() == "t"]
    if len(stamps) != 1 or not stamps[0].strip().isdigit():
        return False
    t = int(stamps[0])
    if abs(now - t) > tolerance_s:
        return False
    expected = signature(secret, t, body)
    return any(hmac.compare_digest(expected, v.strip()) for k, v in parts if k.strip() == "v1")
