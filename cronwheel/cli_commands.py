"""The subcommands of `cronwheel` (registered into cronwheel.cli)."""

from __future__ import annotations

import argparse
import os

from cronwheel.cli import command
from cronwheel.errors import InvalidArgument


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get("CRONWHEEL_DSN", "")
    if not dsn:
        raise InvalidArgument("--dsn", "a PostgreSQL DSN is required (or set CRONWHEEL_DSN)")
    return str(dsn)


def _positive_int(name: str, lo: int, hi: int) -> type:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name} must be between {lo} and {hi}, got {v}")
        return v

    parse.__name__ = name
    return parse  # type: ignore[return-value]


def _configure_migrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="PostgreSQL DSN (default: $CRONWHEEL_DSN)")
    p.add_argument("--partitions", type=_positive_int("--partitions", 1, 4096), default=64,
                   help="partition count, fixed when the cluster is created (default 64)")


@command("migrate", "apply database migrations (idempotent, safe from several nodes at once)", _configure_migrate)
def cmd_migrate(args: argparse.Namespace) -> int:
    from cronwheel.storage.migrate import migrate

    res = migrate(_dsn(args), partitions=args.partitions, progress=lambda m: print(m, flush=True))
    print(f"schema at version {res.current_version}; {len(res.applied)} migration(s) applied; "
          f"{res.partitions} partitions")
    return 0


def _configure_dev(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=_positive_int("--nodes", 1, 16), default=3,
                   help="scheduler nodes to run (default 3)")
    p.add_argument("--partitions", type=_positive_int("--partitions", 1, 4096), default=16,
                   help="partitions of the dev cluster (default 16)")


@command("dev", "start a local cluster on embedded etcd and PostgreSQL; Ctrl-C stops it all", _configure_dev)
def cmd_dev(args: argparse.Namespace) -> int:
    from cronwheel.dev import run_dev

    return run_dev(nodes=args.nodes, partitions=args.partitions)
