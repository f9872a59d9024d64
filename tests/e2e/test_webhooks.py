"""Push alerts against a real cluster (PostgreSQL, etcd, node processes) and a real local HTTP
receiver started by the test: deliveries are signed, retried with the same delivery id, survive
the death of the node sending them, and a dead man's switch alert arrives in time.

The nodes run with a short retry backoff and lease through their `--webhook-*` flags (config,
not sleeps): 50..200 ms backoff, a 3 s lease over a 2 s request timeout, polls every 100 ms; and
`--egress-allow 127.0.0.0/8`, since the receivers listen on loopback.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cronwheel.client import Client, InvalidArgument, NotFound, PermissionDenied, RetryPolicy, verify_webhook_signature
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.token_format import hash_token

from .helpers import observe_for, run_cli, wait_until
from .ops_helpers import value
from .webhook_receiver import Receiver

pytestmark = [pytest.mark.e2e]

TOKENS = {"admin": ("tok-wh-admin-0123456789", {"name": "ops", "admin": True})} | {
    t: (f"tok-wh-{t}-0123456789", {"name": f"{t}-ci", "tenant": t})
    for t in ("sig", "retry", "kill", "dms", "other", "cli", "work")}
FLAGS = ("--webhook-poll", "0.1", "--webhook-backoff", "0.05", "--webhook-backoff-max", "0.2",
         "--webhook-lease", "3", "--webhook-timeout", "2",
         "--egress-allow", "127.0.0.0/8")  # the receivers are local (tests/e2e/test_webhook_egress.py: not allowed)
YEARLY = "0 0 1 1 *"  # never fires during a test


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        entries = [{**e, "sha256": hash_token(tok)} for tok, e in TOKENS.values()]
        auth = c.workdir / "auth.json"
        auth.write_text(json.dumps({"tokens": entries}))
        for name in ("n1", "n2"):
            c.start_node(name, "--auth-file", str(auth), *FLAGS)
        c.auth_file = auth  # type: ignore[attr-defined]
        yield c


def client(c: ProcessCluster, who: str) -> Client:
    addresses = [n.address for n in c.nodes.values() if n.alive() and n.address]
    return Client(addresses, token=TOKENS[who][0], deadline_s=20)


def schedule(cl: Client, name: str, **extra: Any) -> str:
    return cl.create_schedule(name, YEARLY, "job", timezone="UTC", misfire_policy="skip", **extra).id


def test_a_delivery_is_signed_and_the_signature_verifies_with_the_secret_shown_at_creation(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    with client(cluster, "sig") as cl, client(cluster, "other") as other:
        made = cl.create_webhook(receiver.url, kinds=["schedule_paused"], description="ops channel")
        assert made.secret.startswith("whsec_") and made.webhook.tenant == "sig"
        assert other.create_webhook(receiver.url, kinds=["schedule_paused"]).webhook.tenant == "other"
        sid = schedule(cl, "nightly-report")
        cl.pause(sid)
        got = wait_until(receiver.requests, 15, "the delivery of schedule_paused")[0]
        header = got.headers["cronwheel-signature"]
        assert verify_webhook_signature(made.secret, header, got.body, now=time.time())
        assert not verify_webhook_signature("whsec_wrong-secret-0123", header, got.body, now=time.time())
        assert not verify_webhook_signature(made.secret, header, got.body + b" ", now=time.time())
        assert not verify_webhook_signature(made.secret, header, got.body, now=time.time() + 3600)  # a replay
        doc = json.loads(got.body)
        assert doc["text"] == "cronwheel: schedule paused: schedule nightly-report (tenant sig)"  # Slack's field
        assert doc["event"]["kind"] == "schedule_paused" and doc["event"]["schedule_id"] == sid
        assert doc["delivery_id"] == got.headers["cronwheel-delivery"] and got.headers["cronwheel-attempt"] == "1"
        assert got.headers["content-type"] == "application/json"
        (d,) = wait_until(lambda: [x for x in cl.list_deliveries(webhook_id=made.webhook.id)
                                   if x.state == "delivered"], 10, "the delivery recorded as delivered")
        assert (d.id, d.attempts, d.last_status, d.kind) == (doc["delivery_id"], 1, 200, "schedule_paused")
        # The other tenant's webhook, subscribed to the same kind, saw nothing of tenant sig's pause.
        observe_for(1.0, lambda: len(receiver.requests()) == 1 or pytest.fail("other tenant got an event"))
        assert list(other.list_deliveries()) == []


def test_a_receiver_failing_five_times_gets_the_event_once_more_per_retry_under_the_same_delivery_id(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    receiver.answer = lambda n: 500 if n < 5 else 200

    def attempts(outcome: str) -> float:
        return sum(value(n, "cronwheel_webhook_attempts_total", outcome=outcome)
                   for n in cluster.nodes.values() if n.alive())

    before = {o: attempts(o) for o in ("retry", "delivered", "failed")}
    with client(cluster, "retry") as cl:
        made = cl.create_webhook(receiver.url, kinds=["schedule_paused"])
        cl.pause(schedule(cl, "flaky-receiver"))
        wait_until(lambda: len(receiver.requests()) >= 6, 30, "six attempts",
                   detail=lambda: [r.headers["cronwheel-attempt"] for r in receiver.requests()])
        (d,) = wait_until(lambda: [x for x in cl.list_deliveries(webhook_id=made.webhook.id)
                                   if x.state == "delivered"], 10, "the delivery recorded as delivered")
        # Long enough for several more polls and backoffs (100 ms, <= 200 ms): no seventh request.
        observe_for(1.5, lambda: len(receiver.requests()) == 6 or pytest.fail("sent again after a 2xx"))
        got = receiver.requests()
        assert [r.headers["cronwheel-attempt"] for r in got] == ["1", "2", "3", "4", "5", "6"]
        assert {r.headers["cronwheel-delivery"] for r in got} == {d.id}
        assert {r.body for r in got} == {got[0].body}  # the same event, byte for byte
        assert (d.attempts, d.last_status, d.last_error) == (6, 200, None)
    # The senders counted what they decided: five retries, one delivery, no give-up.
    assert {o: attempts(o) - before[o] for o in before} == {"retry": 5, "delivered": 1, "failed": 0}


def test_a_node_killed_mid_delivery_loses_no_event(cluster: ProcessCluster, receiver: Receiver) -> None:
    receiver.answer = lambda n: None if n == 0 else 200  # hold the first request until the node is dead
    with client(cluster, "kill") as cl:
        made = cl.create_webhook(receiver.url, kinds=["schedule_paused"])
        cl.pause(schedule(cl, "sender-dies"))
        first = wait_until(receiver.requests, 15, "the first attempt")[0]
        (held,) = list(cl.list_deliveries(webhook_id=made.webhook.id))
        assert held.state == "pending" and held.attempts == 1 and held.node in cluster.nodes
        cluster.kill_node(held.node)  # SIGKILL while its request is in flight
        receiver.release.set()
        try:
            (d,) = wait_until(lambda: [x for x in cl.list_deliveries(webhook_id=made.webhook.id)
                                       if x.state == "delivered"], 20, "the delivery sent by the surviving node")
            got = receiver.requests()
            assert len(got) == 2 and got[1].headers["cronwheel-attempt"] == "2"
            assert got[1].headers["cronwheel-delivery"] == first.headers["cronwheel-delivery"] == d.id
            assert got[1].body == first.body
            assert d.attempts == 2 and d.node != held.node
        finally:
            cluster.start_node(held.node, "--auth-file", str(cluster.auth_file), *FLAGS)  # type: ignore[attr-defined]


def test_webhooks_follow_the_apis_tenancy_and_bad_input_names_its_field(cluster: ProcessCluster) -> None:
    with client(cluster, "other") as other, client(cluster, "cli") as cli, client(cluster, "admin") as admin:
        mine = other.create_webhook("https://example.invalid/hook", kinds=["dead_letter"]).webhook
        assert mine.id not in {w.id for w in cli.list_webhooks()}
        assert mine.id in {w.id for w in admin.list_webhooks()}
        with pytest.raises(NotFound):
            cli.delete_webhook(mine.id)
        with pytest.raises(NotFound):
            list(cli.list_deliveries(webhook_id=mine.id))
        with pytest.raises(PermissionDenied):
            cli.create_webhook("https://example.invalid/hook", tenant="other")
        with pytest.raises(NotFound):  # another tenant's schedule is as missing as no schedule
            cli.create_webhook("https://example.invalid/hook", schedule_id=schedule(other, "others-schedule"))
        for kw, field_name in ((dict(url="ftp://x/"), "url"), (dict(url="http://x/", kinds=["dead_letter", "nope"]),
                                                                "kinds[1]"), (dict(url="http://x/", secret="short"),
                                                                              "secret")):
            with pytest.raises(InvalidArgument) as err:
                cli.create_webhook(**kw)  # type: ignore[arg-type]
            assert err.value.field == field_name
        everything = admin.create_webhook("https://example.invalid/all").webhook
        assert everything.tenant is None  # an admin's webhook without a tenant: every tenant's events
        assert admin.delete_webhook(everything.id) == 0 and other.delete_webhook(mine.id) == 0


def test_the_cli_creates_lists_shows_deliveries_of_and_deletes_a_webhook(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    env = {"CRONWHEEL_ADDRESS": cluster.nodes["n1"].address, "CRONWHEEL_TOKEN": TOKENS["cli"][0]}
    made = run_cli("webhook", "create", "--url", receiver.url, "--kind", "schedule_paused", "--json", env=env)
    assert made.returncode == 0, made.stderr
    hook = json.loads(made.stdout)
    assert hook["secret"].startswith("whsec_") and hook["kinds"] == ["schedule_paused"]
    human = run_cli("webhook", "create", "--url", receiver.url, env=env)
    assert "secret: whsec_" in human.stdout and "shown only now" in human.stdout
    listed = json.loads(run_cli("webhook", "list", "--json", env=env).stdout)
    assert hook["id"] in {w["id"] for w in listed} and all("secret" not in w for w in listed)
    bad = run_cli("webhook", "create", "--url", "ftp://x/", env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("cronwheel: error: url:"), bad.stderr
    with client(cluster, "cli") as cl:
        cl.pause(schedule(cl, "cli-hook"))
    wait_until(lambda: json.loads(run_cli("webhook", "deliveries", "--webhook", hook["id"], "--state", "delivered",
                                          "--json", env=env).stdout), 15, "the delivery, through the CLI")
    text = run_cli("webhook", "deliveries", "--webhook", hook["id"], env=env).stdout
    assert "schedule_paused  delivered  attempts=1" in text
    gone = run_cli("webhook", "delete", hook["id"], env=env)
    assert gone.returncode == 0 and "deleted webhook" in gone.stdout
    again = run_cli("webhook", "delete", hook["id"], env=env)
    assert again.returncode == 1 and "not found" in again.stderr.lower(), again.stderr


def test_a_dead_letter_and_a_non_retryable_failure_decided_by_a_worker_reach_the_receiver(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    with client(cluster, "work") as cl:
        cl.create_webhook(receiver.url, kinds=["dead_letter", "execution_failed"])
        dead = cl.submit("fail", retry_policy=RetryPolicy(max_attempts=1)).id  # raises: the last attempt
        failed = cl.submit("bad").id  # raises NonRetryable
        cluster.start_worker("w-work", "tests.e2e.jobs_module", None, {}, "--token", TOKENS["work"][0])
        got = wait_until(lambda: len(receiver.requests()) >= 2 and receiver.requests(), 30, "both alerts")
        events = {json.loads(r.body)["event"]["execution_id"]: json.loads(r.body) for r in got}
        assert events[dead]["event"]["kind"] == "dead_letter" and "always fails" in events[dead]["text"]
        assert events[failed]["event"]["kind"] == "execution_failed"
        assert events[failed]["text"].endswith("NonRetryable: input can never work")  # the traceback's last line


@pytest.mark.slow
def test_a_dead_mans_switch_alert_reaches_the_receiver_within_its_interval_plus_5_s(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    from datetime import timedelta

    with client(cluster, "dms") as cl:
        made = cl.create_webhook(receiver.url)  # default kinds: the alerts (a tenant's: not the cluster's)
        assert set(made.webhook.kinds) == {"dead_letter", "no_success_alert", "misfire_refused", "execution_failed"}
        s = cl.create_schedule("must-succeed-every-minute", YEARLY, "job", timezone="UTC", misfire_policy="skip",
                               alert_if_no_success_within=timedelta(seconds=60))  # the API's minimum
        assert s.created_at is not None
        due = s.created_at.timestamp() + 60
        got = wait_until(receiver.requests, 60 + 5 + 10, "the no_success_alert delivery", interval_s=0.1)[0]
        doc = json.loads(got.body)
        assert doc["event"]["kind"] == "no_success_alert" and doc["event"]["schedule_id"] == s.id
        assert "has not succeeded within 60" in doc["text"]
        print(f"no_success_alert arrived {got.at - due:.2f} s after the switch was due")  # shown with -s
        assert due <= got.at <= due + 5, f"arrived {got.at - due:.2f} s after the switch was due"
        assert uuid.UUID(got.headers["cronwheel-delivery"])
