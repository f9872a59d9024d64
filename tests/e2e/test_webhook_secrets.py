"""Webhook secrets are never exposed (issue 48, item 4), against node, CLI and receiver processes:
stored as ciphertext, absent from every log, API answer, CLI output, event, delivered request and
text column of a test run, yet signing works; a node without the key refuses to start with one
line; the key rotates (docs/operating.md "Secrets")."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronwheel.client import Client, verify_webhook_signature
from cronwheel.devtools.harness import NodeProc, ProcessCluster
from cronwheel.secret_store import key_id_of, new_key_line

from .helpers import run_cli, wait_until
from .webhook_receiver import Receiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FLAGS = ("--egress-allow", "127.0.0.0/8",  # the receivers are on loopback
         "--webhook-poll", "0.1", "--webhook-backoff", "0.05", "--webhook-backoff-max", "0.2",
         "--webhook-lease", "3", "--webhook-timeout", "2")
YEARLY = "0 0 1 1 *"  # never fires during a test


def key_file(c: ProcessCluster, name: str, *lines: str) -> str:
    path = c.workdir / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def known_secret(what: str) -> str:
    return f"whsec_{what}-{uuid.uuid4().hex}"


def text_columns(c: ProcessCluster) -> str:
    """Every text-like column of every table, as a pg_dump of the data would show them."""
    cols = c.sql("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
                 "AND data_type IN ('text', 'character varying', 'jsonb', 'json', 'ARRAY', 'bytea')")
    out = []
    for table, column in cols:
        out += [str(v) for (v,) in c.sql(f'SELECT "{column}"::text FROM "{table}"')]  # noqa: S608 - catalog names
    return "\n".join(out)


def node_output(n: NodeProc) -> str:
    return n.log_path.read_text() + "\n".join(n.lines)


def refusal(n: NodeProc, timeout_s: float = 30) -> tuple[int, list[str], str]:
    """A node that must refuse to start: its exit code, the lines of its stderr that are not JSON
    log records, and all of its stderr."""
    code = n.proc.wait(timeout_s)
    err = n.log_path.read_text()
    return code, [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("{")], err


def pause_and_receive(cl: Client, receiver: Receiver, name: str, count: int) -> list[bytes]:
    sid = cl.create_schedule(name, YEARLY, "job", timezone="UTC", misfire_policy="skip").id
    seen = len(receiver.requests())
    cl.pause(sid)
    got = wait_until(lambda: receiver.requests()[seen:] if len(receiver.requests()) >= seen + count else None, 20,
                     f"{count} deliveries of {name}'s schedule_paused")
    return [r.headers["cronwheel-signature"].encode() + b"\n" + r.body for r in got]


def verifies(secret: str, receiver: Receiver) -> bool:
    return any(verify_webhook_signature(secret, r.headers["cronwheel-signature"], r.body, now=time.time())
               for r in receiver.requests())


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProcessCluster]:
    with ProcessCluster(partitions=4, lease_ttl_s=3) as c:
        k1 = key_file(c, "k1.key", new_key_line("k1"))
        c.start_node("s1", "--secret-key-file", k1, "--log-level", "DEBUG", *FLAGS)
        yield c


def test_a_known_secret_appears_in_no_log_answer_output_event_request_or_column_and_signing_works(
        cluster: ProcessCluster, receiver: Receiver) -> None:
    by_cli, by_client = known_secret("cli"), known_secret("client")
    env = {"CRONWHEEL_ADDRESS": cluster.nodes["s1"].address}
    outputs = []

    def cli(*args: str) -> str:
        r = run_cli(*args, env=env)
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout + r.stderr)
        return r.stdout

    made_cli = json.loads(cli("webhook", "create", "--url", receiver.url, "--kind", "schedule_paused",
                              "--secret", by_cli, "--json"))
    assert "secret" not in made_cli  # a secret given is never echoed
    assert "never shown" in cli("webhook", "create", "--url", receiver.url, "--kind", "schedule_resumed",
                                "--secret", by_cli)
    answers: list[object] = []
    with Client(cluster.nodes["s1"].address) as cl:
        made = cl.create_webhook(receiver.url, kinds=["schedule_paused"], secret=by_client)
        assert made.secret == ""
        answers.append(made)
        pause_and_receive(cl, receiver, "secret-run", 2)  # one delivery to each webhook
        assert verifies(by_cli, receiver) and verifies(by_client, receiver)  # signing works
        wait_until(lambda: len([d for d in cl.list_deliveries() if d.state == "delivered"]) >= 2, 10,
                   "both deliveries recorded as delivered")
        answers += [list(cl.list_webhooks()), list(cl.list_deliveries()), list(cl.events()), cl.status()]
    for args in (("webhook", "list"), ("webhook", "list", "--json"), ("webhook", "deliveries"),
                 ("webhook", "deliveries", "--json"), ("events",), ("events", "--json"), ("status",)):
        cli(*args)
    stored = [s for (s,) in cluster.sql("SELECT secret FROM webhooks")]
    assert len(stored) == 3 and {key_id_of(s) for s in stored} == {"k1"}  # ciphertext, under the node's key
    delivered = b"\n".join(r.body + json.dumps(r.headers).encode() for r in receiver.requests()).decode()
    everything = {"node logs": node_output(cluster.nodes["s1"]), "CLI outputs": "\n".join(outputs),
                  "API answers": repr(answers), "delivered requests": delivered,
                  "text columns": text_columns(cluster)}
    assert '"event": "node_started"' in everything["node logs"]  # the logs (at DEBUG) were read
    for secret in (by_cli, by_client):
        for where, text in everything.items():
            assert secret not in text, f"the secret appears in the {where}"
            assert secret.removeprefix("whsec_") not in text, f"the secret appears in the {where}"


def test_a_node_without_the_key_refuses_to_start_with_one_line(cluster: ProcessCluster) -> None:
    with Client(cluster.nodes["s1"].address) as cl:
        cl.create_webhook("http://127.0.0.1:9/refusal", secret=known_secret("refusal"))
    node = cluster.start_node("nokey", *FLAGS, wait=False)
    code, lines, err = refusal(node)
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("cronwheel: error: secrets: ") and "encrypted with key k1" in lines[0], lines
    assert "--secret-key-file" in lines[0] and "Traceback" not in err
    assert cluster.sql("SELECT count(*) FROM partition_history WHERE owner = 'nokey'") == [(0,)]


def test_the_key_rotates_new_key_first_reseals_then_the_old_key_goes(receiver: Receiver, tmp_path: Path) -> None:
    k1, k2, k3 = new_key_line("k1"), new_key_line("k2"), new_key_line("k3")
    with ProcessCluster(partitions=4, lease_ttl_s=3, workdir=tmp_path) as c:
        c.start_node("r1", "--secret-key-file", key_file(c, "old.key", k1), *FLAGS)
        secret = known_secret("rotated")
        with Client(c.nodes["r1"].address) as cl:
            cl.create_webhook(receiver.url, kinds=["schedule_paused"], secret=secret)
        assert [key_id_of(s) for (s,) in c.sql("SELECT secret FROM webhooks")] == ["k1"]
        # 1. every node learns the new key (after the old: they still seal with k1); 2. new key first.
        c.stop_node("r1")
        c.start_node("r2", "--secret-key-file", key_file(c, "both.key", k1, k2), *FLAGS)
        c.stop_node("r2")
        c.start_node("r3", "--secret-key-file", key_file(c, "rotated.key", k2, k1), *FLAGS)
        assert [key_id_of(s) for (s,) in c.sql("SELECT secret FROM webhooks")] == ["k2"]  # re-sealed at start
        c.stop_node("r3")
        # 3. the old key goes: a node with the new key alone signs with the same secret.
        c.start_node("r4", "--secret-key-file", key_file(c, "new.key", k2), *FLAGS)
        with Client(c.nodes["r4"].address) as cl:
            pause_and_receive(cl, receiver, "after-rotation", 1)
        assert verifies(secret, receiver)
        # `cronwheel secrets rotate` does the same without a node (here while r4 runs: k3 first, k2 after).
        r = run_cli("secrets", "rotate", "--dsn", c.dsn, "--secret-key-file", key_file(c, "k3.key", k3, k2))
        assert r.returncode == 0, r.stderr
        assert "webhook secrets: 1 re-encrypted under key k3; now, by key: k3: 1" in r.stdout, r.stdout
        assert "the other keys may be removed" in r.stdout and secret not in r.stdout + r.stderr
        assert [key_id_of(s) for (s,) in c.sql("SELECT secret FROM webhooks")] == ["k3"]
        stale = c.start_node("r5", "--secret-key-file", key_file(c, "stale.key", k2), *FLAGS, wait=False)
        code, lines, err = refusal(stale)
        assert code == 1 and len(lines) == 1 and "encrypted with key k3" in lines[0], err
