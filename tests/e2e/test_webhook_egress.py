"""Never exposed, against real node processes (issue 48, items 1-3): what a tenant's webhook may
reach (the egress check), one slow receiver stalling nobody else, the cap of webhooks per
tenant, and the event as its deliveries' outbox across a node killed in between.

Two clusters: `strict`, whose node allows no egress beyond global addresses (the default), and
`local`, whose nodes run with `--egress-allow 127.0.0.0/8` and the sender's default timings (a
10 s deadline per delivery, polls every 1 s), since every receiver here listens on loopback.

The address classes are tests/egress_cases.py's table; `SURFACES` is what sends: webhooks and
HTTP targets (issue 50), in the same parametrisation. (Nothing reaching the listener from a
target: no target was stored, so no run exists for a doer to call; the call-time check for
targets is tests/e2e/test_http_targets.py.)
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from cronwheel.client import Client, InvalidArgument, ResourceExhausted
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.token_format import hash_token
from tests.egress_cases import REFUSED_HOSTS

from .helpers import observe_for, run_cli, wait_until
from .webhook_receiver import Receiver, Trickler, serve_trickler

pytestmark = [pytest.mark.e2e]

TENANTS = ("a", "b", "c", "rebind", "cap", "term", "outbox")
TOKENS = {t: f"tok-egress-{t}-0123456789" for t in (*TENANTS, "admin")}
YEARLY = "0 0 1 1 *"
LOCAL_FLAGS = ("--egress-allow", "127.0.0.0/8")


def _cluster(tmp: str, *flags: str) -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        auth = c.workdir / "auth.json"
        auth.write_text(json.dumps({"tokens": [
            {"sha256": hash_token(tok), "name": f"{t}-ci",
             **({"admin": True} if t == "admin" else {"tenant": t})} for t, tok in TOKENS.items()]}))
        c.auth_file = auth  # type: ignore[attr-defined]
        c.start_node(f"{tmp}1", "--auth-file", str(auth), *flags)
        yield c


@pytest.fixture(scope="module")
def strict() -> Iterator[ProcessCluster]:
    yield from _cluster("s")


@pytest.fixture(scope="module")
def local() -> Iterator[ProcessCluster]:
    yield from _cluster("l", *LOCAL_FLAGS)


def client(c: ProcessCluster, tenant: str) -> Client:
    return Client([n.address for n in c.nodes.values() if n.alive() and n.address], token=TOKENS[tenant],
                  deadline_s=20)


def pause_one(cl: Client, name: str) -> None:
    cl.pause(cl.create_schedule(name, YEARLY, "job", timezone="UTC", misfire_policy="skip").id)


def machine_name_on_loopback() -> str:
    """A host name that resolves to 127.0.0.1 through the system resolver (/etc/hosts) but is
    not a literal or a local name, so that only the check at send time can see where it goes."""
    name = socket.gethostname()
    try:
        if socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)[0][4][0] == "127.0.0.1":
            return name
    except OSError:
        pass
    pytest.skip(f"this machine's name {name!r} does not resolve to 127.0.0.1")


# Per surface that sends: what stores a destination URL, the field a refusal names, and what the
# tenant has stored of that surface (nothing, after a refusal). Issue 50 added HTTP targets.
SURFACES: dict[str, tuple[Callable[[Client, str], object], str, Callable[[Client], list[Any]]]] = {
    "webhook": (lambda cl, url: cl.create_webhook(url, kinds=["schedule_paused"]), "url",
                lambda cl: list(cl.list_webhooks())),
    "target": (lambda cl, url: cl.create_schedule("to-target", YEARLY, "", timezone="UTC", misfire_policy="skip",
                                                  target={"url": url}), "schedule.target.url",
               lambda cl: [s for s in cl.list_schedules() if s.target is not None]),
}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("kind", "host"), REFUSED_HOSTS, ids=[f"{k}:{h}" for k, h in REFUSED_HOSTS])
def test_every_refused_address_class_is_refused_at_creation_naming_url_and_nothing_reaches_a_listener(
        strict: ProcessCluster, receiver: Receiver, surface: str, kind: str, host: str) -> None:
    port = receiver.url.rsplit(":", 1)[1].split("/")[0]
    create, field, stored = SURFACES[surface]
    with client(strict, "a") as cl:
        with pytest.raises(InvalidArgument) as err:
            create(cl, f"http://{host}:{port}/hook")
        assert err.value.field == field and "refused by egress policy" in str(err.value)
        assert stored(cl) == []  # nothing stored
        pause_one(cl, f"after-{surface}-{kind}-{host}")  # an event every refused subscription would have had
        # Longer than a poll of the sender (1 s): a stored subscription would have been sent.
        observe_for(1.2, lambda: receiver.requests() == [] or pytest.fail("a POST reached the listener"))


def test_a_name_resolving_to_loopback_at_send_time_is_not_called_and_the_tenant_sees_the_policy(
        strict: ProcessCluster, receiver: Receiver) -> None:
    name = machine_name_on_loopback()
    port = receiver.url.rsplit(":", 1)[1]
    with client(strict, "rebind") as cl:
        made = cl.create_webhook(f"http://{name}:{port}", kinds=["schedule_paused"])  # a name: accepted
        pause_one(cl, "rebound")
        (d,) = wait_until(lambda: [x for x in cl.list_deliveries(webhook_id=made.webhook.id) if x.state == "failed"],
                          15, "the delivery refused at send time")
        assert (d.attempts, d.last_error, d.last_status) == (1, "refused by egress policy", None)
    assert receiver.requests() == []
    log = [e for e in strict.nodes["s1"].log_events("webhook_attempt_failed") if e.get("refused")]
    assert log and "127.0.0.1" in log[-1]["error"], "the node's log says why"


def test_a_tenant_past_its_webhook_cap_gets_resource_exhausted(strict: ProcessCluster) -> None:
    from cronwheel.cluster.webhooks.subscriptions import MAX_WEBHOOKS_PER_TENANT

    with client(strict, "cap") as cl, client(strict, "b") as other:
        for i in range(MAX_WEBHOOKS_PER_TENANT):
            cl.create_webhook(f"https://hooks.example.com/{i}", kinds=["dead_letter"])
        with pytest.raises(ResourceExhausted, match=f"already has {MAX_WEBHOOKS_PER_TENANT} webhooks"):
            cl.create_webhook("https://hooks.example.com/one-more", kinds=["dead_letter"])
        assert len(list(cl.list_webhooks())) == MAX_WEBHOOKS_PER_TENANT
        other.create_webhook("https://hooks.example.com/b", kinds=["dead_letter"])  # another tenant's own cap


def test_each_node_reports_its_egress_list_and_status_flags_lists_that_differ(strict: ProcessCluster) -> None:
    with client(strict, "admin") as admin:
        assert [m.egress_allow for m in admin.status().members] == [()]
    auth = str(strict.auth_file)  # type: ignore[attr-defined]
    strict.start_node("s2", "--auth-file", auth, "--egress-allow", "10.0.0.0/8", "--egress-allow", "hooks.internal")
    try:
        env = {"CRONWHEEL_ADDRESS": strict.nodes["s1"].address, "CRONWHEEL_TOKEN": TOKENS["admin"]}
        out = wait_until(lambda: (r := run_cli("status", env=env)).returncode == 0 and "s2" in r.stdout and r.stdout,
                         20, "status listing both nodes")
        assert "WARNING egress allow lists differ" in out and "s1: (none)" in out
        assert "s2: 10.0.0.0/8, hooks.internal" in out
        with client(strict, "admin") as admin:
            lists = {m.node_id: m.egress_allow for m in admin.status().members}
        assert lists == {"s1": (), "s2": ("10.0.0.0/8", "hooks.internal")}
    finally:
        strict.stop_node("s2")


def test_egress_allow_lets_the_same_name_through(
        local: ProcessCluster, receiver: Receiver) -> None:
    name = machine_name_on_loopback()
    port = receiver.url.rsplit(":", 1)[1]
    with client(local, "rebind") as cl:
        made = cl.create_webhook(f"http://{name}:{port}", kinds=["schedule_paused"])
        pause_one(cl, "allowed")
        wait_until(lambda: [x for x in cl.list_deliveries(webhook_id=made.webhook.id) if x.state == "delivered"],
                   15, "the delivery through --egress-allow")
    assert len(receiver.requests()) == 1
    with client(local, "admin") as admin:
        assert [m.egress_allow for m in admin.status().members] == [("127.0.0.0/8",)]


def test_what_a_tenant_sees_of_a_failed_delivery_carries_no_internal_detail(
        local: ProcessCluster, receiver: Receiver) -> None:
    receiver.answer = lambda n: 500
    closed = socket.create_server(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: a connection refused
    with client(local, "c") as cl:
        answering = cl.create_webhook(receiver.url, kinds=["schedule_paused"]).webhook.id
        refusing = cl.create_webhook(f"http://127.0.0.1:{dead_port}/", kinds=["schedule_paused"]).webhook.id
        pause_one(cl, "errors")

        def both_failed() -> dict[str, Any] | None:
            got = {d.webhook_id: d for d in cl.list_deliveries() if d.last_error}
            return got if len(got) == 2 else None

        got = wait_until(both_failed, 20, "both failed attempts")
    assert (got[answering].last_status, got[answering].last_error) == (500, "delivery failed")
    assert (got[refusing].last_status, got[refusing].last_error) == (None, "delivery failed")
    logged = " ".join(str(e.get("error")) for e in local.nodes["l1"].log_events("webhook_attempt_failed"))
    assert "Internal Server Error" in logged and "Connection" in logged, "the detail stays in the node's log"


@pytest.fixture
def tricklers() -> Iterator[list[Trickler]]:
    gens = [serve_trickler(4.0) for _ in range(5)]
    yield [next(g) for g in gens]
    for g in gens:
        g.close()


def test_five_trickling_receivers_of_one_tenant_do_not_delay_another_tenants_delivery(
        local: ProcessCluster, tricklers: list[Trickler], receiver: Receiver) -> None:
    with client(local, "a") as a, client(local, "b") as b:
        for t in tricklers:
            a.create_webhook(t.url, kinds=["schedule_paused"])
        healthy = b.create_webhook(receiver.url, kinds=["schedule_paused"])
        pause_one(a, "slow-receivers")
        wait_until(lambda: sum(t.count() for t in tricklers) >= 4, 15, "tenant a's trickling requests in flight")
        pause_one(b, "healthy-receiver")
        got = wait_until(receiver.requests, 15, "tenant b's delivery")[0]
        event_at = datetime.fromisoformat(json.loads(got.body)["event"]["at"]).timestamp()
        lag = got.at - event_at
        print(f"tenant b's delivery arrived {lag:.2f} s after its event, "
              f"{sum(t.count() for t in tricklers)} trickling requests of tenant a in flight")  # shown with -s
        assert lag <= 2.0, f"arrived {lag:.2f} s after its event"
        (d,) = list(b.list_deliveries(webhook_id=healthy.webhook.id))
        assert d.attempts == 1


def test_sigterm_in_the_middle_of_a_trickling_send_exits_within_the_hand_over_time(
        local: ProcessCluster, tricklers: list[Trickler]) -> None:
    with client(local, "term") as cl:
        cl.create_webhook(tricklers[0].url, kinds=["schedule_paused"])
        pause_one(cl, "stuck-send")
        wait_until(lambda: tricklers[0].count() >= 1, 15, "the trickling request in flight")
    node = local.nodes["l1"]
    t0 = time.monotonic()
    node.signal(signal.SIGTERM)
    code = node.proc.wait(15)
    took = time.monotonic() - t0
    print(f"node exited {took:.2f} s after SIGTERM with a trickling send in flight")  # shown with -s
    assert code == 0 and took < 5.0, f"exit {code} after {took:.2f} s"


def test_a_node_killed_between_an_event_and_its_fan_out_loses_no_delivery(
        local: ProcessCluster, receiver: Receiver, tmp_path: Path) -> None:
    for n in list(local.nodes):  # the previous test may have left l1 stopped; nobody else may fan out
        if local.nodes[n].alive():
            local.stop_node(n)
    hold = tmp_path / "hold-fanout"
    hold.write_text("held: the window between an event and its deliveries' enqueue stays open")
    auth = str(local.auth_file)  # type: ignore[attr-defined]
    held = local.start_node_with("held", "--auth-file", auth, *LOCAL_FLAGS,
                                 env={"CRONWHEEL_TEST_WEBHOOK_HOLD_FANOUT": str(hold)})
    with client(local, "outbox") as cl:
        made = cl.create_webhook(receiver.url, kinds=["schedule_paused"])
        pause_one(cl, "outbox")
        (event,) = [e for e in cl.events(kind="schedule_paused")]  # committed
        observe_for(1.5, lambda: list(cl.list_deliveries()) == [] or pytest.fail("fanned out while held"))
    local.kill_node("held")  # SIGKILL inside the window
    assert not held.alive()
    local.start_node("l1", "--auth-file", auth, *LOCAL_FLAGS)
    with client(local, "outbox") as cl:
        (d,) = wait_until(lambda: [x for x in cl.list_deliveries(webhook_id=made.webhook.id)
                                   if x.state == "delivered"], 20, "the delivery owed by the committed event")
        assert d.event_id == event.id and len(receiver.requests()) == 1
