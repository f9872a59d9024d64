"""The server-side subcommands of `cronwheel`: migrate, dev, node, worker, secrets (a module of
`cronwheel.cli.main.MODULES`: `add_parser` adds them). The one module of cli/ that imports
cronwheel.cluster or cronwheel.storage (tests/unit/test_architecture.py, rule `cli`): the other
commands go through the Client, and what they need of the server is here (the offline token's
auth file, the console's exposure rule)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronwheel.cluster.retention.policy import RetentionConfig
    from cronwheel.cluster.webhooks.config import WebhookConfig
from cronwheel.errors import InvalidArgument


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get("CRONWHEEL_DSN", "")
    if not dsn:
        raise InvalidArgument("--dsn", "a PostgreSQL DSN is required (or set CRONWHEEL_DSN)")
    return str(dsn)


def _bounded(name: str, lo: float, hi: float, cast: type, what: str, unit: str = "") -> type:
    """An argparse type: `cast(text)` within lo..hi, or an error naming the flag."""
    def parse(text: str) -> Any:
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name} must be between {lo:g} and {hi:g}{unit}, got {text}")
        return v

    parse.__name__ = name
    return parse  # type: ignore[return-value]


def _positive_int(name: str, lo: int, hi: int) -> type:
    return _bounded(name, lo, hi, int, "an integer")


def _seconds(name: str, lo: float, hi: float) -> type:
    return _bounded(name, lo, hi, float, "a number of seconds", " seconds")


def _configure_migrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="PostgreSQL DSN (default: $CRONWHEEL_DSN)")
    p.add_argument("--partitions", type=_positive_int("--partitions", 1, 4096), default=64,
                   help="partition count, fixed when the cluster is created (default 64)")
    p.add_argument("--cluster", default="cronwheel",
                   help="the cluster this database serves, fixed when it is created (default cronwheel, "
                        "as `cronwheel node`)")


def cmd_migrate(args: argparse.Namespace) -> int:
    from cronwheel.storage.migrate import migrate

    res = migrate(_dsn(args), partitions=args.partitions, progress=lambda m: print(m, flush=True),
                  cluster=args.cluster)
    print(f"schema at version {res.current_version}; {len(res.applied)} migration(s) applied; "
          f"{res.partitions} partitions; cluster {res.cluster}")
    return 0


def _configure_secrets(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    k = sub.add_parser("new-key", help="print a new key line for a --secret-key-file (put it first to rotate)")
    k.add_argument("--key-id", default="", help="the key's id (default: 'k' and 8 random hex digits)")
    k.add_argument("--key-file", default="",
                   help="write the key line to this file (owner-only) instead of printing it, unless the file "
                        "already holds a key: then keep it (an init step that runs on every start)")
    r = sub.add_parser("rotate", help="re-encrypt every stored secret under the first key of the key ring, and "
                                      "report which keys the stored secrets need (idempotent; nodes may run)")
    r.add_argument("--dsn", help="PostgreSQL DSN (default: $CRONWHEEL_DSN)")
    r.add_argument("--secret-key-file", default="", help="the key ring, as the nodes' (or $CRONWHEEL_SECRET_KEY)")
    put = sub.add_parser("put", help="store a named secret of a tenant (HTTP targets' headers name it), its value "
                                     "read from stdin; replaces the value of that name (a rotation: the next call "
                                     "carries the new value)")
    put.add_argument("name", help="the secret's name (letters, digits, '_', '.', '-'; 1..128)")
    put.add_argument("--tenant", required=True, help="the tenant whose secret it is")
    put.add_argument("--dsn", help="PostgreSQL DSN (default: $CRONWHEEL_DSN)")
    put.add_argument("--secret-key-file", default="", help="the key ring, as the nodes' (or $CRONWHEEL_SECRET_KEY)")
    for q in (k, r, put):
        q.set_defaults(handler=cmd_secrets)


def _write_private(path: str, text: str) -> None:
    """Create `path` readable by its owner only, failing if it appeared meanwhile."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise InvalidArgument("--key-file", f"{path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(text)


def cmd_secrets(args: argparse.Namespace) -> int:
    import asyncio

    from cronwheel.secret_store import KEY_ENV, KEY_FILE_FLAG, SecretStore, load_keys, new_key_line

    if args.secrets_command == "new-key":
        line = new_key_line(args.key_id or None)
        if not args.key_file:
            print(line)
            return 0
        if os.path.exists(args.key_file) and load_keys(args.key_file, env={}) is not None:  # there, valid: keep it
            print(f"{args.key_file}: kept")
            return 0
        _write_private(args.key_file, line + "\n")
        print(f"{args.key_file}: new key made")
        return 0
    keys = load_keys(args.secret_key_file)
    if keys is None:
        raise InvalidArgument(KEY_FILE_FLAG, f"a key ring is required (or set ${KEY_ENV})")
    from cronwheel.storage import PgStore, StoreConfig
    from cronwheel.storage.secrets import SealReport

    if args.secrets_command == "put":
        return _put_secret(args, SecretStore(keys))

    async def rotate() -> tuple[dict[str, SealReport], dict[str, SealReport]]:
        async with PgStore(StoreConfig(dsn=_dsn(args), min_connections=1, max_connections=1,
                                       secrets=SecretStore(keys))) as store:
            return await store.seal_at_rest(), await store.seal_at_rest()  # the second pass: what is left

    done, left = asyncio.run(rotate())
    now: set[str] = set()
    for what, report in done.items():
        now |= set(left[what].by_key)
        print(f"{what}: {report.resealed} re-encrypted under key {keys.primary}; now, by key: "
              + (", ".join(f"{k or '(plaintext)'}: {n}" for k, n in left[what].by_key.items()) or "none"))
    if now <= {keys.primary}:
        print(f"every stored secret is encrypted with key {keys.primary}: once every node's key ring starts with "
              "it, the other keys may be removed")
    return 0


def _put_secret(args: argparse.Namespace, secrets: Any) -> int:
    """`cronwheel secrets put NAME --tenant T` (value on stdin): sealed with the key ring, never printed."""
    import asyncio
    import re
    import sys

    from cronwheel.storage import PgStore, StoreConfig

    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", args.name):
        raise InvalidArgument("name", "letters, digits, '_', '.', '-' only (1..128)")
    value = sys.stdin.read().rstrip("\n")
    if not value:
        raise InvalidArgument("stdin", "the secret's value is read from stdin, and it was empty")

    async def put() -> None:
        async with PgStore(StoreConfig(dsn=_dsn(args), min_connections=1, max_connections=1, secrets=secrets)) as store:
            await store.secrets.put(args.tenant, args.name, value)

    asyncio.run(put())
    print(f"secret {args.name} of tenant {args.tenant} stored (encrypted)")
    return 0


def _configure_dev(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=_positive_int("--nodes", 1, 16), default=3,
                   help="scheduler nodes to run (default 3)")
    p.add_argument("--partitions", type=_positive_int("--partitions", 1, 4096), default=16,
                   help="partitions of the dev cluster (default 16)")
    p.add_argument("--logs", action="store_true",
                   help="show every node and worker log line, prefixed by its process name")


def cmd_dev(args: argparse.Namespace) -> int:
    from cronwheel.devtools.dev import run_dev

    return run_dev(nodes=args.nodes, partitions=args.partitions, logs=args.logs)


def _configure_node(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="PostgreSQL DSN (default: $CRONWHEEL_DSN)")
    p.add_argument("--etcd", default=os.environ.get("CRONWHEEL_ETCD", ""),
                   help="comma-separated etcd endpoints host:port (default: $CRONWHEEL_ETCD)")
    p.add_argument("--etcd-cacert", default="",
                   help="PEM of the CA that signed etcd's certificate: reach etcd over TLS")
    p.add_argument("--etcd-cert", default="", help="PEM client certificate for etcd (with --etcd-key; implies TLS)")
    p.add_argument("--etcd-key", default="", help="PEM private key of --etcd-cert")
    p.add_argument("--etcd-user", default=os.environ.get("CRONWHEEL_ETCD_USER", ""),
                   help="etcd user, when etcd has auth enabled (default: $CRONWHEEL_ETCD_USER; the password: "
                        "$CRONWHEEL_ETCD_PASSWORD)")
    p.add_argument("--etcd-password", default=os.environ.get("CRONWHEEL_ETCD_PASSWORD", ""),
                   help="etcd password (prefer $CRONWHEEL_ETCD_PASSWORD: a flag shows in ps)")
    p.add_argument("--node-id", default=os.environ.get("CRONWHEEL_NODE_ID", ""),
                   help="unique node id (default: $CRONWHEEL_NODE_ID, else hostname-pid)")
    p.add_argument("--listen", default="127.0.0.1:0", help="gRPC listen address (default 127.0.0.1:0)")
    p.add_argument("--advertise", default="", help="address peers and clients use (default: the listen address)")
    p.add_argument("--cluster", default="cronwheel", help="cluster name, the etcd key prefix (default cronwheel)")
    p.add_argument("--lease-ttl", type=_positive_int("--lease-ttl", 2, 300), default=5,
                   help="etcd lease TTL in seconds (default 5)")
    p.add_argument("--unowned-alert-after", type=_seconds("--unowned-alert-after", 1.0, 86400.0), default=30.0,
                   help="seconds a partition may have no owner before the partition_unowned alert (default 30)")
    p.add_argument("--max-clock-skew", type=_seconds("--max-clock-skew", 0.1, 3600.0), default=2.0,
                   help="seconds this node's clock may differ from PostgreSQL's; beyond it the node releases its "
                        "partitions and claims nothing until it is back within (default 2)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    from cronwheel.cluster.firing.config import FiringConfig

    f = FiringConfig()  # the defaults are the config's own: one place
    p.add_argument("--misfire-grace", type=float, default=f.misfire_grace_s,
                   help="seconds a tick may be late and still fire normally; older ones get the misfire policy "
                        f"(default {f.misfire_grace_s:g})")
    p.add_argument("--horizon", type=float, default=f.horizon_s,
                   help=f"seconds of due work preloaded into the wheel (default {f.horizon_s:g})")
    p.add_argument("--metrics-listen", default="127.0.0.1:0",
                   help="host:port of the Prometheus metrics endpoint (default 127.0.0.1:0, a free port; '' disables)")
    p.add_argument("--auth-file", default=os.environ.get("CRONWHEEL_AUTH_FILE", ""),
                   help="JSON file of bearer tokens (sha256) -> tenant or admin (default: $CRONWHEEL_AUTH_FILE; "
                        "none: dev mode, every call is admin, refused beyond loopback without --insecure)")
    p.add_argument("--insecure", action="store_true",
                   help="without --auth-file, listen beyond loopback anyway: anyone who reaches the port is an admin")
    p.add_argument("--secret-key-file", default="",
                   help="the key ring that encrypts stored secrets (webhook signing secrets): one 'KEY_ID BASE64' "
                        "line per key, the first encrypts, all decrypt (or $CRONWHEEL_SECRET_KEY, the same text); "
                        "`cronwheel secrets new-key` makes one")
    p.add_argument("--tls-cert", default="", help="PEM certificate chain: serve gRPC over TLS (with --tls-key)")
    p.add_argument("--tls-key", default="", help="PEM private key of --tls-cert")
    p.add_argument("--retention-days", type=_positive_int("--retention-days", 1, 3650), default=30,
                   help="days events and ownership history are kept (and explain can look back); default 30")
    _configure_retention(p)
    p.add_argument("--unsafe-ignore-local-trust", action="store_true", help=argparse.SUPPRESS)
    _add_webhook_options(p)


def _add_webhook_options(p: argparse.ArgumentParser) -> None:
    """The `cronwheel node` flags that tune the webhook sender (cluster/webhooks/sender.py)."""
    from cronwheel.cluster.webhooks.config import WebhookConfig

    d = WebhookConfig()  # the defaults are the config's own: one place
    g = p.add_argument_group("webhooks")
    g.add_argument("--webhook-timeout", type=float, default=d.timeout_s,
                   help=f"seconds per delivery in all: connect, send and the whole answer (default {d.timeout_s:g})")
    g.add_argument("--webhook-lease", type=float, default=d.lease_s,
                   help=f"seconds a claimed delivery is held before another node may send it (default {d.lease_s:g})")
    g.add_argument("--webhook-max-attempts", type=int, default=d.max_attempts,
                   help=f"attempts before giving up (default {d.max_attempts})")
    g.add_argument("--webhook-backoff", type=float, default=d.backoff_initial_s,
                   help=f"initial retry backoff in seconds, multiplied by {d.backoff_multiplier:g} up to "
                        f"--webhook-backoff-max (default {d.backoff_initial_s:g})")
    g.add_argument("--webhook-backoff-max", type=float, default=d.backoff_max_s,
                   help=f"backoff cap in seconds (default {d.backoff_max_s:g})")
    g.add_argument("--webhook-poll", type=float, default=d.poll_s,
                   help=f"seconds between polls when idle (default {d.poll_s:g})")
    g.add_argument("--webhook-per-tenant", type=int, default=d.per_tenant,
                   help=f"deliveries of one tenant in flight on this node at most, of {d.batch} "
                        f"(default {d.per_tenant})")
    g.add_argument("--egress-allow", action="append", default=[], metavar="HOST_OR_CIDR",
                   help="let outbound requests (webhooks) reach this host name, address or network although "
                        "it is loopback, link-local, private or otherwise not global (repeatable; default: none)")


def _webhook_config(args: argparse.Namespace) -> WebhookConfig:
    """The webhook sender's config from the node's `--webhook-*` flags (`_add_webhook_options` adds them)."""
    from cronwheel.cluster.webhooks.config import WebhookConfig
    from cronwheel.egress import EgressPolicy

    return WebhookConfig(poll_s=args.webhook_poll, lease_s=args.webhook_lease, timeout_s=args.webhook_timeout,
                         max_attempts=args.webhook_max_attempts, backoff_initial_s=args.webhook_backoff,
                         backoff_max_s=args.webhook_backoff_max, retention_days=args.retention_days,
                         per_tenant=args.webhook_per_tenant, egress=EgressPolicy.parse(args.egress_allow))


def write_bootstrap(token_file: str, token: str, auth_file: str, entry: dict[str, Any]) -> None:
    """`token new --offline --token-file --auth-file` (cli/api.py): the nodes' auth file is server
    configuration. The entry goes into the auth file first (a node must accept the token before anyone
    holds it); each file is replaced whole (write, then rename), never seen half-written."""
    import json

    from cronwheel.cluster.api.auth import load_auth

    auth = Path(auth_file)
    doc = json.loads(auth.read_text()) if auth.is_file() else {"tokens": []}
    doc["tokens"].append(entry)
    for path, text, mode in ((auth, json.dumps(doc, indent=2) + "\n", 0o644), (Path(token_file), token + "\n", 0o600)):
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    load_auth(auth_file)  # what a node will read: refused here, not at the node's start


def exposure_refusal(listen: str, authenticated: bool, insecure: bool, *, without: str, remedy: str) -> str | None:
    """The node's rule (cluster/api/auth.py `exposure_refusal`), for `cronwheel console` too: the
    rest of cli/ reaches server code only through this module."""
    from cronwheel.cluster.api import auth

    return auth.exposure_refusal(listen, authenticated, insecure, without=without, remedy=remedy)


def _configure_retention(p: argparse.ArgumentParser) -> None:
    """Finished executions (cluster/retention; a schedule's own settings override these)."""
    env = os.environ.get
    p.add_argument("--retention-succeeded", default=env("CRONWHEEL_RETENTION_SUCCEEDED", "7d"),
                   help="keep succeeded, skipped and cancelled runs this long: 90m, 12h, 7d or forever "
                        "(default 7d; $CRONWHEEL_RETENTION_SUCCEEDED)")
    p.add_argument("--retention-failed", default=env("CRONWHEEL_RETENTION_FAILED", "30d"),
                   help="keep failed and dead runs this long (default 30d; $CRONWHEEL_RETENTION_FAILED)")
    p.add_argument("--retention-job-type", action="append",
                   default=[t for t in env("CRONWHEEL_RETENTION_JOB_TYPES", "").split(";") if t.strip()],
                   metavar="TYPE=SUCCEEDED[,FAILED]",
                   help="a job type's own windows, e.g. report=2d,14d (repeatable; "
                        "$CRONWHEEL_RETENTION_JOB_TYPES, ';'-separated)")
    from cronwheel.cluster.retention.policy import MAX_BATCH_ROWS, RetentionConfig

    d = RetentionConfig()  # the defaults are the config's own: one place
    p.add_argument("--retention-batch", type=_positive_int("--retention-batch", 1, MAX_BATCH_ROWS),
                   default=d.batch_rows, help=f"at most this many rows per prune transaction (default {d.batch_rows})")
    p.add_argument("--retention-gap-share", type=float, default=d.gap_share,
                   help="a prune batch waits for the fire loop to rest and is sized to take at most this share "
                        f"of the rest, 0-1 (default {d.gap_share:g})")
    p.add_argument("--retention-pause", type=float, default=d.pause_s,
                   help=f"seconds to pause after a prune batch that deleted (default {d.pause_s:g})")
    p.add_argument("--retention-idle", type=float, default=d.idle_s,
                   help=f"seconds between prune passes once nothing is left (default {d.idle_s:g})")
    p.add_argument("--no-pruning", action="store_true", help="never prune finished executions on this node")


def _retention(args: argparse.Namespace) -> RetentionConfig:
    from cronwheel.cluster.retention.policy import RetentionConfig, parse_type_windows, parse_window

    return RetentionConfig(
        succeeded_s=parse_window("--retention-succeeded", args.retention_succeeded),
        failed_s=parse_window("--retention-failed", args.retention_failed),
        by_type=tuple(parse_type_windows("--retention-job-type", t) for t in args.retention_job_type),
        enabled=not args.no_pruning, batch_rows=args.retention_batch, pause_s=args.retention_pause,
        idle_s=args.retention_idle, gap_share=args.retention_gap_share,
    ).validate()


def cmd_node(args: argparse.Namespace) -> int:
    import asyncio
    import socket

    from cronwheel import logs
    from cronwheel.cluster.coordination.clock_skew import ClockSkewConfig
    from cronwheel.cluster.coordination.etcd import EtcdSecurity
    from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
    from cronwheel.cluster.firing.config import FiringConfig
    from cronwheel.cluster.node import NodeConfig, serve
    from cronwheel.secret_store import load_keys

    endpoints = tuple(e.strip() for e in args.etcd.split(",") if e.strip())
    if not endpoints:
        raise InvalidArgument("--etcd", "at least one etcd endpoint is required (or set CRONWHEEL_ETCD)")
    keys = load_keys(args.secret_key_file)  # a bad key ring fails here, naming the flag (exit 2)
    node_id = args.node_id or f"{socket.gethostname()}-{os.getpid()}"
    etcd_security = EtcdSecurity(cacert=args.etcd_cacert, cert=args.etcd_cert, key=args.etcd_key,
                                 user=args.etcd_user, password=args.etcd_password).validate()
    extend_every_s = min(FiringConfig().extend_every_s, args.horizon / 4)
    try:
        lease = PartitionLeaseConfig.for_ttl(args.lease_ttl, cluster=args.cluster,
                                             unowned_alert_after_s=args.unowned_alert_after)
        config = NodeConfig(
            node_id=node_id, dsn=_dsn(args), etcd_endpoints=endpoints, etcd_security=etcd_security,
            listen=args.listen,
            advertise=args.advertise, lease=lease, ignore_local_trust=args.unsafe_ignore_local_trust,
            auth_file=args.auth_file, tls_cert=args.tls_cert, tls_key=args.tls_key, secret_keys=keys,
            metrics_listen=args.metrics_listen, retention_days=args.retention_days, retention=_retention(args),
            webhooks=_webhook_config(args), clock_skew=ClockSkewConfig(max_skew_s=args.max_clock_skew),
            firing=FiringConfig(horizon_s=args.horizon, extend_every_s=extend_every_s,
                                misfire_grace_s=args.misfire_grace,
                                # within what the wheel holds (validate's bound), also for a tiny horizon
                                queue_ahead_s=min(FiringConfig().queue_ahead_s, args.horizon - extend_every_s)),
        ).validate()
    except ValueError as exc:
        raise InvalidArgument("node", str(exc)) from exc
    from cronwheel.cluster.api.auth import exposure_refusal, load_auth, read_tls

    try:  # bad security configuration fails here, before anything starts
        load_auth(args.auth_file)
        read_tls(args.tls_cert, args.tls_key)
    except InvalidArgument as exc:
        raise InvalidArgument("--" + exc.field.replace("_", "-"), exc.message.split(": ", 1)[-1]) from None
    refused = exposure_refusal(args.listen, bool(args.auth_file), args.insecure,
                               without="without --auth-file (every caller would be an admin)",
                               remedy="give --auth-file FILE")
    if refused:
        raise InvalidArgument("--listen", refused)
    logs.setup(node=node_id, level=args.log_level)
    asyncio.run(serve(config))
    return 0


def _configure_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("module", nargs="?", default="",
                   help="Python module that defines a cronwheel.client.Worker (named `worker`); not with --http")
    p.add_argument("--http", action="store_true",
                   help="be an HTTP doer: call the HTTP targets of runs of type 'http' (docs/http-targets.md)")
    p.add_argument("--egress-allow", action="append", default=[], metavar="HOST_OR_CIDR",
                   help="--http: a non-public destination targets may reach (repeatable; as the node's)")
    p.add_argument("--dsn", default="", help="--http: PostgreSQL DSN to read the named secrets targets use "
                                             "($CRONWHEEL_DSN; a role that may read the secrets table only)")
    p.add_argument("--secret-key-file", default="", help="--http: the key ring that opens the named secrets "
                                                         "(or $CRONWHEEL_SECRET_KEY)")
    p.add_argument("--address", default=os.environ.get("CRONWHEEL_ADDRESS", ""),
                   help="node gRPC address host:port (default: $CRONWHEEL_ADDRESS, else the Worker's own)")
    p.add_argument("--worker-id", default="", help="worker id (default: the Worker's own)")
    p.add_argument("--concurrency", type=_positive_int("--concurrency", 1, 10000), default=None,
                   help="handlers run at once (default: the Worker's own)")
    p.add_argument("--token", default=os.environ.get("CRONWHEEL_TOKEN", ""), help="bearer token ($CRONWHEEL_TOKEN)")
    p.add_argument("--token-file", default="", help="a file holding the bearer token (instead of --token)")
    p.add_argument("--threads", type=_positive_int("--threads", 1, 1024), default=None,
                   help="threads for sync handlers (default: the Worker's own)")
    p.add_argument("--tls", action="store_true", help="connect with TLS (system roots unless --ca-file)")
    p.add_argument("--ca-file", default="", help="PEM of the CA that signed the node's certificate (implies --tls)")
    p.add_argument("--cert-file", default="", help="client certificate PEM (mutual TLS; with --key-file)")
    p.add_argument("--key-file", default="", help="client key PEM (with --cert-file)")
    p.add_argument("--connect-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up when no node answers for this long at start-up (default: the Worker's own)")
    p.add_argument("--queue", action="append", default=[], metavar="NAME[:SLOTS]",
                   help="lease from this queue, at most SLOTS of its runs at once if given (repeat; "
                        "default: the Worker's own, else 'default'): --queue long:2 --queue default")
    p.add_argument("--capability", action="append", default=[], metavar="KEY=VALUE",
                   help="advertise a capability (repeat): --capability gpu=a100 --capability region=eu")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _http_doer(args: argparse.Namespace) -> Any:
    """The Worker of `cronwheel worker --http` (cronwheel/client/http_doer.py), with its egress
    policy and, given --dsn (or $CRONWHEEL_DSN), the named secrets of the database, opened with
    the key ring (read on first use, inside the worker's loop)."""
    from cronwheel.client import Worker
    from cronwheel.client.http_doer import HttpDoer, http_worker
    from cronwheel.egress import EgressPolicy
    from cronwheel.secret_store import load_keys

    egress = EgressPolicy.parse(args.egress_allow)
    dsn = args.dsn or os.environ.get("CRONWHEEL_DSN", "")
    secrets = _DoerSecrets(dsn, load_keys(args.secret_key_file)) if dsn else None
    worker = Worker(worker_id=f"http-doer-{os.getpid()}")
    print(f"http doer: egress allows {list(egress.describe()) or 'public addresses only'}; "
          f"secrets {'from the database' if secrets else 'not available (no --dsn)'}", flush=True)
    return http_worker(worker, HttpDoer(egress, secrets, threads=args.concurrency or worker.concurrency))


class _DoerSecrets:
    """The doer's SecretProvider: the named secrets table (storage/secrets.py), opened with the
    doer's key ring; the pool is made on first use, on the worker's loop."""

    def __init__(self, dsn: str, keys: Any) -> None:
        self.dsn, self.keys = dsn, keys
        self._port: Any = None

    async def _open(self) -> Any:
        if self._port is None:
            from cronwheel.secret_store import SecretStore
            from cronwheel.storage import PgStore, StoreConfig

            store = PgStore(StoreConfig(dsn=self.dsn, min_connections=1, max_connections=4,
                                        secrets=SecretStore(self.keys)))
            await store.__aenter__()
            self._port = store.secrets
        return self._port

    async def get(self, tenant: str | None, name: str) -> str:
        return str(await (await self._open()).get(tenant, name))

    async def put(self, tenant: str | None, name: str, value: str) -> None:
        await (await self._open()).put(tenant, name, value)


def _worker_queues(flags: list[str]) -> dict[str, int | None]:
    """--queue NAME[:SLOTS] flags as Worker(queues=...)."""
    out: dict[str, int | None] = {}
    for flag in flags:
        name, _, slots = flag.rpartition(":")
        if not slots.isdigit():  # a queue name may hold ':' itself
            name, slots = flag, ""
        if not name or (slots and int(slots) < 1) or name in out:
            raise InvalidArgument("--queue", f"must be NAME or NAME:SLOTS with SLOTS >= 1, each queue once, "
                                             f"got {flag!r}")
        out[name] = int(slots) if slots else None
    return out


def cmd_worker(args: argparse.Namespace) -> int:
    import sys

    from cronwheel import logs
    from cronwheel.client import load_worker
    from cronwheel.client.worker import split_queues

    if args.http:
        if args.module:
            raise InvalidArgument("--http", "an HTTP doer runs no module: give --http or a module, not both")
        worker = _http_doer(args)
    elif not args.module:
        raise InvalidArgument("module", "required (or --http for an HTTP doer)")
    else:
        sys.path.insert(0, os.getcwd())
        try:
            worker = load_worker(args.module)
        except ImportError as exc:
            raise InvalidArgument("module", f"cannot import {args.module!r}: {exc}") from exc
        except LookupError as exc:
            raise InvalidArgument("module", str(exc)) from exc
    if args.address:
        worker.address = args.address
    if args.worker_id:
        worker.worker_id = args.worker_id
    if args.concurrency:
        worker.concurrency = args.concurrency
    if args.token_file:
        try:
            args.token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidArgument("--token-file", f"cannot read {args.token_file}: {exc.strerror or exc}") from None
        if not args.token:
            raise InvalidArgument("--token-file", f"{args.token_file} is empty")
    if args.token:
        worker.token = args.token
    if args.threads:
        worker.threads = args.threads
    if args.tls or args.ca_file:
        worker.tls = True
    if args.ca_file:
        worker.ca_file = args.ca_file
    if bool(args.cert_file) != bool(args.key_file):
        raise InvalidArgument("--cert-file" if not args.cert_file else "--key-file",
                              "--cert-file and --key-file go together")
    if args.cert_file:
        worker.cert_file, worker.key_file = args.cert_file, args.key_file
    if args.connect_timeout is not None:
        if args.connect_timeout <= 0:
            raise InvalidArgument("--connect-timeout", f"must be > 0, got {args.connect_timeout}")
        worker.connect_timeout_s = args.connect_timeout
    if args.queue:
        worker.queues, worker.queue_slots = split_queues(_worker_queues(args.queue))
    for cap in args.capability:
        if "=" not in cap or cap.startswith("="):
            raise InvalidArgument("--capability", f"must be KEY=VALUE, got {cap!r}")
    if args.capability:
        worker.capabilities = sorted(set(args.capability))
    logs.setup(node=worker.worker_id, level=args.log_level)
    print(f"worker {worker.worker_id} serving {sorted(worker.handlers)} from {worker.address}", flush=True)
    worker.run()
    return 0


def add_parser(subparsers: Any) -> None:
    for name, help_, configure, handler in (
        ("migrate", "apply database migrations (idempotent, safe from several nodes at once)", _configure_migrate,
         cmd_migrate),
        ("dev", "start a local cluster on embedded etcd and PostgreSQL; Ctrl-C stops it all", _configure_dev,
         cmd_dev),
        ("node", "run a scheduler node (SIGTERM hands its partitions over and exits)", _configure_node, cmd_node),
        ("worker", "run a worker: a module's handlers, leasing from a node (SIGTERM: finish or hand back, exit)",
         _configure_worker, cmd_worker),
        ("secrets", "the key that encrypts stored secrets: make a key, re-encrypt under a new one (rotation)",
         _configure_secrets, cmd_secrets),
    ):
        p = subparsers.add_parser(name, help=help_, description=help_)
        configure(p)
        p.set_defaults(handler=handler)
