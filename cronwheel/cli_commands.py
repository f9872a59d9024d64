"""The server-side subcommands of `cronwheel`: migrate, dev, node, worker, secrets (a module of
`cronwheel.cli.MODULES`: `add_parser` adds them)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronwheel import cli_webhook

if TYPE_CHECKING:
    from cronwheel.cluster.retention.policy import RetentionConfig
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
    for q in (k, r):
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


def _configure_dev(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=_positive_int("--nodes", 1, 16), default=3,
                   help="scheduler nodes to run (default 3)")
    p.add_argument("--partitions", type=_positive_int("--partitions", 1, 4096), default=16,
                   help="partitions of the dev cluster (default 16)")
    p.add_argument("--logs", action="store_true",
                   help="show every node and worker log line, prefixed by its process name")


def cmd_dev(args: argparse.Namespace) -> int:
    from cronwheel.dev import run_dev

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
    cli_webhook.add_node_options(p)


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
            webhooks=cli_webhook.node_config(args), clock_skew=ClockSkewConfig(max_skew_s=args.max_clock_skew),
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
    p.add_argument("module", help="Python module that defines a cronwheel.client.Worker (named `worker`)")
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
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def cmd_worker(args: argparse.Namespace) -> int:
    import sys

    from cronwheel import logs
    from cronwheel.client import load_worker

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
