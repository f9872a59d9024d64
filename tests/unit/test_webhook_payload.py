"""What a webhook delivery sends (pure): the signature scheme, the body, the subscription rules."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from cronwheel.cluster.webhooks import payload, subscriptions
from cronwheel.cluster.webhooks.config import WebhookConfig
from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument
from cronwheel.v1.webhook_signature import signature_header, verify

DELIVERY = uuid.UUID("00000000-0000-4000-8000-000000000001")
WEBHOOK = uuid.UUID("00000000-0000-4000-8000-000000000002")


def event(kind: str = "dead_letter", **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(event_id=41, at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC), tenant="acme", kind=kind,
                                schedule_id=uuid.UUID(int=7), schedule_name="nightly",
                                execution_id=uuid.UUID(int=9), partition=3, actor="reaper", alert=True,
                                data='{"attempts": 5, "error": "boom"}')
    return {**base, **kw}


def test_the_signature_header_is_t_and_v1_hmac_sha256_of_t_dot_body_as_stripe_signs() -> None:
    body = b'{"text":"hi"}'
    header = signature_header("whsec_abc", 1_764_579_600, body)
    expected = hmac.new(b"whsec_abc", b"1764579600." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1764579600,v1={expected}"


def test_verify_accepts_the_signed_body_and_refuses_tampering_another_secret_and_stale_times() -> None:
    body = b'{"a":1}'
    header = signature_header("s" * 20, 1000, body)
    assert verify("s" * 20, header, body, now=1000 + 299)
    assert not verify("s" * 20, header, body + b" ", now=1000)
    assert not verify("t" * 20, header, body, now=1000)
    assert not verify("s" * 20, header, body, now=1000 + 301)  # default tolerance 300 s
    assert not verify("s" * 20, "v1=abc", body, now=1000)
    assert verify("s" * 20, header.replace(",v1=", ",v1=00,v1="), body, now=1000)  # any v1 may match


def test_the_body_carries_slacks_text_and_the_structured_event_and_is_the_same_on_every_retry() -> None:
    doc = json.loads(payload.body(DELIVERY, WEBHOOK, event()))
    assert doc["text"] == ("cronwheel: execution 00000000-0000-0000-0000-000000000009 is dead after 5 attempts "
                           "of schedule nightly (tenant acme): boom")
    assert doc["delivery_id"] == str(DELIVERY) and doc["event"]["data"] == {"attempts": 5, "error": "boom"}
    assert doc["event"]["at"] == "2026-12-01T09:00:00+00:00" and doc["event"]["kind"] == "dead_letter"
    assert payload.body(DELIVERY, WEBHOOK, event()) == payload.body(DELIVERY, WEBHOOK, event())


@pytest.mark.parametrize(("kind", "data", "text"), [
    ("no_success_alert", '{"within_s": 3600, "last_success_at": null}',
     "cronwheel: schedule nightly (tenant acme) has not succeeded within 3600 s (last success: never)"),
    ("misfire_refused", '{"refused": 2}',
     "cronwheel: schedule nightly (tenant acme) missed its time: 2 tick(s) refused by its misfire policy"),
    ("schedule_paused", "{}", "cronwheel: schedule paused: schedule nightly (tenant acme)"),
])
def test_each_alert_reads_as_one_line_for_a_person(kind: str, data: str, text: str) -> None:
    assert json.loads(payload.body(DELIVERY, WEBHOOK, event(kind, data=data)))["text"] == text


def test_a_request_is_signed_at_its_send_time_and_names_delivery_attempt_and_kind() -> None:
    body = payload.body(DELIVERY, WEBHOOK, event())
    r = payload.request("https://x.example/h", "s" * 20, DELIVERY, 3, "dead_letter", body, now_s=1000.9)
    assert r.headers["Cronwheel-Delivery"] == str(DELIVERY) and r.headers["Cronwheel-Attempt"] == "3"
    assert r.headers["Cronwheel-Event"] == "dead_letter" and r.headers["Content-Type"] == "application/json"
    assert verify("s" * 20, r.headers["Cronwheel-Signature"], body, now=1000)


def test_no_kinds_subscribes_to_the_alerts_and_an_unknown_kind_names_its_index() -> None:
    tenant_alerts = ("dead_letter", "no_success_alert", "misfire_refused", "execution_failed")
    assert subscriptions.kinds([]) == (*tenant_alerts, "partition_unowned")
    assert subscriptions.kinds([], tenant="acme") == tenant_alerts, "a cluster event never reaches a tenant"
    assert subscriptions.kinds(["dead_letter", " dead_letter"]) == ("dead_letter",)
    with pytest.raises(InvalidArgument) as err:
        subscriptions.kinds(["dead_letter", "fired"])
    assert err.value.field == "kinds[1]"


@pytest.mark.parametrize("url", ["", "ftp://x/", "hooks.slack.com/x", "http:///x", "http://x:99999/", "http://a b/"])
def test_a_url_must_be_absolute_http_or_https(url: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        subscriptions.url(url, EgressPolicy())
    assert err.value.field == "url"


def test_a_secret_is_generated_when_not_given_and_checked_when_given() -> None:
    a, b = subscriptions.secret(""), subscriptions.secret("")
    assert a != b and a.startswith("whsec_") and len(a) == 6 + 64
    assert subscriptions.secret("x" * 16) == "x" * 16
    with pytest.raises(InvalidArgument):
        subscriptions.secret("short")
    with pytest.raises(InvalidArgument, match="secret: must not start with 'cwsec1:'"):
        subscriptions.secret("cwsec1:k1:looks-sealed-at-rest")  # would be taken for a sealed value


def test_a_lease_not_longer_than_the_request_timeout_is_refused() -> None:
    WebhookConfig().validate()
    with pytest.raises(ValueError, match="lease_s"):
        WebhookConfig(timeout_s=10, lease_s=10).validate()


def test_the_verification_snippet_in_docs_operating_md_verifies_a_real_signature() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text()
    section = doc.split("**Verifying a delivery.**", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/operating.md", "exec"), scope)  # noqa: S102 - our own documentation
    import time

    body = b'{"text":"hello"}'
    header = signature_header("whsec_doc", int(time.time()), body)
    assert scope["verify"]("whsec_doc", header, body)
    assert not scope["verify"]("whsec_doc", header, body + b"!")


def test_a_tenants_webhook_cannot_subscribe_to_a_cluster_event_and_is_told_why() -> None:
    with pytest.raises(InvalidArgument) as err:
        subscriptions.kinds(["dead_letter", "partition_unowned"], tenant="acme")
    assert err.value.field == "kinds[1]" and "cluster event" in err.value.message
    assert subscriptions.kinds(["partition_unowned"]) == ("partition_unowned",)
    with pytest.raises(InvalidArgument) as err:
        subscriptions.kinds(["token_revoked"], tenant="acme")
    assert err.value.field == "kinds[0]"
    assert subscriptions.kinds(["token_revoked", "tenant_updated"]) == ("token_revoked", "tenant_updated")


def test_the_partition_unowned_text_says_which_partition_how_long_and_what_it_means() -> None:
    ev = {"kind": "partition_unowned", "schedule_name": None, "schedule_id": None, "tenant": None, "partition": 5,
          "execution_id": None}
    line = payload.text(ev, {"unowned_for_s": 31.2, "threshold_s": 30.0, "last_owner": "n2", "epoch": 9})
    assert line == ("cronwheel: partition 5 has had no owner for 31.2 s (alert after 30.0 s, last owned by n2): "
                    "its ticks are not firing")
