"""What a delivery sends, as values (pure: no I/O, the time is an argument).

The body is JSON that Slack's incoming webhooks accept as it is: `text` is the human line Slack
shows; the other top-level fields are the structured event for programs. It is a function of the
delivery and its (immutable) event only, so every retry sends the same bytes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwheel.v1.webhook_signature import (
    ATTEMPT_HEADER,
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    signature_header,
)

# The kinds of event a webhook may subscribe to: every kind the cluster appends to its event log
# (admin.proto Event.kind). The alerts are the default subscription. The cluster's events have
# no tenant (partitions; the admin audit of tenants and tokens): only a webhook without a tenant
# may subscribe to them, and the cluster's alert is in its default subscription.
TENANT_ALERT_KINDS = ("dead_letter", "no_success_alert", "misfire_refused", "execution_failed")
CLUSTER_ALERT_KINDS = ("partition_unowned",)
CLUSTER_AUDIT_KINDS = ("tenant_created", "tenant_updated", "token_created", "token_revoked")
CLUSTER_KINDS = (*CLUSTER_ALERT_KINDS, *CLUSTER_AUDIT_KINDS)
ALERT_KINDS = (*TENANT_ALERT_KINDS, *CLUSTER_ALERT_KINDS)
EVENT_KINDS = (*ALERT_KINDS, "misfire_skipped", "schedule_created", "schedule_updated", "schedule_deleted",
               "schedule_paused", "schedule_resumed", "schedule_triggered", "schedule_backfilled",
               "execution_cancelled", "execution_retried", *CLUSTER_AUDIT_KINDS)
USER_AGENT = "cronwheel-webhooks/1"


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP POST to make."""

    url: str
    body: bytes
    headers: Mapping[str, str]


def body(delivery_id: uuid.UUID, webhook_id: uuid.UUID, event: Mapping[str, Any]) -> bytes:
    """The JSON body of a delivery of `event` (a claimed row: data as JSON text)."""
    data = json.loads(event["data"]) if isinstance(event["data"], str) else dict(event["data"] or {})
    doc = {
        "text": text(event, data),
        "delivery_id": str(delivery_id),
        "webhook_id": str(webhook_id),
        "event": {
            "id": event["event_id"],
            "kind": event["kind"],
            "at": _iso(event["at"]),
            "alert": bool(event["alert"]),
            "tenant": event["tenant"],
            "schedule_id": _str(event["schedule_id"]),
            "schedule_name": event["schedule_name"],
            "execution_id": _str(event["execution_id"]),
            "partition": event["partition"],
            "actor": event["actor"],
            "data": data,
        },
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def text(event: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """The one line a person reads (Slack's `text`)."""
    kind = event["kind"]
    who = f"schedule {event['schedule_name']}" if event["schedule_name"] else (
        f"schedule {event['schedule_id']}" if event["schedule_id"] else "")
    tenant = f" (tenant {event['tenant']})" if event["tenant"] else ""
    if kind == "dead_letter":
        what = f"execution {event['execution_id']} is dead after {data.get('attempts', '?')} attempts"
        if who:
            what += f" of {who}"
        return f"cronwheel: {what}{tenant}: {_error_line(data)}"
    if kind == "execution_failed":
        what = f"execution {event['execution_id']} failed (not retryable)"
        if who:
            what += f" in {who}"
        return f"cronwheel: {what}{tenant}: {_error_line(data)}"
    if kind == "no_success_alert":
        last = data.get("last_success_at") or "never"
        return (f"cronwheel: {who}{tenant} has not succeeded within {data.get('within_s', '?')} s "
                f"(last success: {last})")
    if kind in ("misfire_refused", "misfire_skipped"):
        verb = "refused" if kind == "misfire_refused" else "skipped"
        n = data.get("refused" if kind == "misfire_refused" else "skipped", "?")
        return f"cronwheel: {who}{tenant} missed its time: {n} tick(s) {verb} by its misfire policy"
    if kind == "partition_unowned":
        last = f", last owned by {data['last_owner']}" if data.get("last_owner") else ""
        return (f"cronwheel: partition {event['partition']} has had no owner for {data.get('unowned_for_s', '?')} s "
                f"(alert after {data.get('threshold_s', '?')} s{last}): its ticks are not firing")
    subject = who or (f"execution {event['execution_id']}" if event["execution_id"] else "the cluster")
    return f"cronwheel: {kind.replace('_', ' ')}: {subject}{tenant}"


def request(url: str, secret: str, delivery_id: uuid.UUID, attempt: int, kind: str, payload: bytes,
            now_s: float) -> Request:
    """The signed POST of `payload` for this attempt (signed at `now_s`, unix seconds)."""
    return Request(url, payload, {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        SIGNATURE_HEADER: signature_header(secret, int(now_s), payload),
        DELIVERY_HEADER: str(delivery_id),
        ATTEMPT_HEADER: str(attempt),
        EVENT_HEADER: kind,
    })


def _error_line(data: Mapping[str, Any]) -> str:
    """The last line of an error (a traceback's is the exception), at most 300 characters."""
    lines = [ln.strip() for ln in str(data.get("error") or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _iso(v: datetime | None) -> str | None:
    return v.isoformat() if v is not None else None


def _str(v: object) -> str | None:
    return str(v) if v is not None else None
