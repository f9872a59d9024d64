"""HTTP targets' rules (cronwheel/http_target.py) and the doer's request (client/http_doer.py):
pure, no server. What a call does against a real server and node is tests/e2e/test_http_targets.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from cronwheel import http_target as ht
from cronwheel.client.http_doer import Call, request_body, request_headers
from cronwheel.cluster.commands.schedules import job_type_or_target
from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument
from cronwheel.v1.webhook_signature import verify

NOW = 1_800_000_000.0


def test_a_target_round_trips_through_its_json_with_defaults_filled() -> None:
    t = ht.parse({"url": "https://api.example.com/run", "headers": {"X-Team": "billing",
                                                                     "Authorization": {"secret": "api-key"}}})
    assert (t.method, t.timeout_s, t.body, t.signing_secret) == ("POST", ht.DEFAULT_TIMEOUT_S, None, "")
    assert ht.parse(t.to_json()) == t
    assert t.secrets() == ("api-key",)
    assert "api-key" in t.to_json() and json.loads(t.to_json())["headers"]["Authorization"] == {"secret": "api-key"}


@pytest.mark.parametrize(("doc", "field"), [
    ({}, "target.url"),
    ({"url": "ftp://example.com/x"}, "target.url"),
    ({"url": "https://user:pw@example.com/"}, "target.url"),
    ({"url": "https://example.com/", "method": "TRACE"}, "target.method"),
    ({"url": "https://example.com/", "timeout_s": 1801}, "target.timeout_s"),
    ({"url": "https://example.com/", "headers": {"Bad Name": "x"}}, "target.headers[Bad Name]"),
    ({"url": "https://example.com/", "headers": {"Idempotency-Key": "x"}}, "target.headers[Idempotency-Key]"),
    ({"url": "https://example.com/", "headers": {"cronwheel-attempt": "9"}}, "target.headers[cronwheel-attempt]"),
    ({"url": "https://example.com/", "headers": {"X": "a\r\nInjected: 1"}}, "target.headers[X]"),
    ({"url": "https://example.com/", "headers": {"X": {"secret": "no spaces"}}}, "target.headers[X]"),
    ({"url": "https://example.com/", "signing_secret": "a/b"}, "target.signing_secret"),
    ({"url": "https://example.com/", "body": "x" * (ht.MAX_BODY_BYTES + 1)}, "target.body"),
])
def test_a_bad_field_is_refused_naming_it(doc: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        ht.parse(doc)
    assert err.value.field == field


def test_the_egress_policy_refuses_a_loopback_url_as_stored_naming_target_url() -> None:
    with pytest.raises(InvalidArgument) as err:
        ht.parse({"url": "http://127.0.0.1:8080/"}, EgressPolicy())
    assert err.value.field == "target.url" and "refused by egress policy" in str(err.value)
    ht.parse({"url": "http://127.0.0.1:8080/"}, EgressPolicy.parse(["127.0.0.0/8"]))  # allowed by the operator


def test_job_type_and_target_are_exclusive_and_http_is_reserved() -> None:
    target = ht.parse({"url": "https://example.com/"}).to_json()
    assert job_type_or_target("", target) == ht.HTTP_TYPE
    with pytest.raises(InvalidArgument) as err:
        job_type_or_target("report", target)
    assert err.value.field == "target"
    with pytest.raises(InvalidArgument) as err:
        job_type_or_target("http", None)
    assert err.value.field == "job_type"
    assert job_type_or_target("report", None) == "report"


@pytest.mark.parametrize(("status", "retry_after", "kind", "after"), [
    (200, None, "succeeded", None),
    (204, None, "succeeded", None),
    (202, None, "accepted", None),
    (408, None, "retry", None),
    (429, "7", "retry", 7.0),
    (503, "2", "retry", 2.0),
    (500, "Thu, 15 Jan 2027 08:00:05 GMT", "retry", None),  # an HTTP date: checked below
    (400, "5", "failed", None),
    (404, None, "failed", None),
    (None, None, "retry", None),
])
def test_each_status_means_what_the_contract_says(status: int | None, retry_after: str | None, kind: str,
                                                   after: float | None) -> None:
    out = ht.outcome(status, b"body start", retry_after, NOW)
    assert out.kind == kind
    if after is not None:
        assert out.retry_after_s == after
    if kind == "failed":
        assert out.error == f"HTTP {status}: body start"
    if kind in ("succeeded", "accepted"):
        assert out.result == {"status": status, "body": "body start"}


def test_retry_after_as_a_date_is_seconds_from_now_and_is_capped() -> None:
    when = datetime.fromtimestamp(NOW + 90, UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert ht.parse_retry_after(when, NOW) == 90.0
    assert ht.parse_retry_after("99999999", NOW) == 86400.0
    assert ht.parse_retry_after("soon", NOW) is None


def test_a_refused_destination_is_retried_and_says_only_the_policy() -> None:
    out = ht.outcome(None, b"", None, NOW, refused=True)
    assert (out.kind, out.error) == ("retry", "refused by egress policy")


def test_the_request_carries_the_run_and_a_signature_a_receiver_verifies() -> None:
    t = ht.parse({"url": "https://example.com/", "signing_secret": "sign",
                  "headers": {"Authorization": {"secret": "tok"}, "X-Team": "billing"}})
    call = Call("0193-exec", datetime(2027, 1, 15, 8, 0, tzinfo=UTC), 3, 42, '{"n":1}')
    body = request_body(t, call)
    heads = request_headers(t, call, body, {"sign": "s3cret-signing", "tok": "Bearer abc"}, NOW)
    assert body == b'{"n":1}'
    assert heads["Idempotency-Key"] == "0193-exec" and heads["Cronwheel-Attempt"] == "3"
    assert heads["Cronwheel-Fencing-Token"] == "42" and heads["Cronwheel-Scheduled-For"] == "2027-01-15T08:00:00Z"
    assert heads["Authorization"] == "Bearer abc" and heads["X-Team"] == "billing"
    assert verify("s3cret-signing", heads["Cronwheel-Signature"], body, NOW)
    assert not verify("another", heads["Cronwheel-Signature"], body, NOW)


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://api.example.internal/run", True),
    ("https://API.Example.Internal./run", True),
    ("http://api.example.internal:8080/run", True),       # "api.example.internal": any port
    ("https://jobs.billing.internal/x", True),            # "*.billing.internal:443"
    ("http://jobs.billing.internal/x", False),            # port 80
    ("https://billing.internal/x", False),                # the glob needs a label before
    ("https://api.example.internal.evil.com/", False),
    ("https://93.184.216.34/", False),
])
def test_a_tenants_egress_rules_allow_only_their_hosts_and_ports(url: str, allowed: bool) -> None:
    rules = ("api.example.internal", "*.billing.internal:443")
    if allowed:
        ht.check_egress_rules(url, rules)
    else:
        with pytest.raises(InvalidArgument) as err:
            ht.check_egress_rules(url, rules)
        assert err.value.field == "target.url" and "egress rules" in str(err.value)
    ht.check_egress_rules(url, None)  # no rules: any (public) address


@pytest.mark.parametrize("rule", ["", "api example", "host:0", "host:70000", "a/b", "x" * 300])
def test_a_bad_egress_rule_is_refused_naming_it(rule: str) -> None:
    from cronwheel.cluster.commands.tenants import new_tenant

    with pytest.raises(InvalidArgument) as err:
        new_tenant("t", egress_rules=["ok.example.com", rule])
    assert err.value.field == "tenant.egress_rules[1]"
    assert new_tenant("t", egress_rules=["OK.example.com:443"]).egress_rules == ("ok.example.com:443",)


def test_a_targets_rate_and_burst_are_checked_and_kept() -> None:
    t = ht.parse({"url": "https://example.com/", "rate_per_s": 20, "burst": 5, "concurrency_limit": 5})
    assert (t.rate_per_s, t.burst, t.concurrency_limit) == (20.0, 5.0, 5)
    assert ht.parse(t.to_json()) == t
    for doc, field in (({"rate_per_s": 1e9}, "target.rate_per_s"), ({"burst": 5}, "target.burst"),
                       ({"rate_per_s": 1, "burst": 0.5}, "target.burst"),
                       ({"concurrency_limit": 10_001}, "target.concurrency_limit")):
        with pytest.raises(InvalidArgument) as err:
            ht.parse({"url": "https://example.com/", **doc})
        assert err.value.field == field
