"""`cronwheel console`: the web console (cronwheel.console) in front of a cluster.

    cronwheel console --address NODE[,NODE...] [--listen 127.0.0.1:7080] [--token-file FILE]

People log in with their own token (a tenant's or an admin's); `--token-file` gives the console
a token of its own, used to sample the overview's charts (an admin token) and, with `--no-login`
(dev mode, the cluster without auth), for every visitor; `--no-login` beyond loopback needs
`--insecure` (the node's rule, cluster/api/auth.py `exposure_refusal`). `--tls`/`--tls-ca` (as every API command)
and `--cert-file`/`--key-file` (mutual TLS) reach a cluster over TLS; `--https-cert`/`--https-key`
serve the console over HTTPS (its cookies are then marked Secure).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from cronwheel.cli.flags import DEFAULT_ADDRESS, check_address
from cronwheel.cli.main import EXIT_OK, UsageError

HELP = "the web console: schedules, runs, ticks and the cluster in a browser"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=os.environ.get("CRONWHEEL_ADDRESS", DEFAULT_ADDRESS),
                   help="node address(es), comma-separated ($CRONWHEEL_ADDRESS)")
    p.add_argument("--listen", default="127.0.0.1:7080", help="host:port to serve the console on")
    p.add_argument("--token-file", default=None, help="a file holding the console's own token")
    p.add_argument("--no-login", action="store_true",
                   help="dev mode: no login page, every visitor uses the console's token (every page says so)")
    p.add_argument("--insecure", action="store_true",
                   help="with --no-login, listen beyond loopback anyway: every visitor acts with the console's token")
    p.add_argument("--tls", action="store_true", help="reach the nodes over TLS, trusting the system's CAs")
    p.add_argument("--tls-ca", default=None, help="reach the nodes over TLS, trusting this PEM CA certificate")
    p.add_argument("--cert-file", default=None, help="client certificate (mutual TLS)")
    p.add_argument("--key-file", default=None)
    p.add_argument("--https-cert", default=None, help="serve the console over HTTPS with this certificate")
    p.add_argument("--https-key", default=None)


def run(args: argparse.Namespace) -> int:
    from cronwheel.cli.commands import exposure_refusal
    from cronwheel.console.app import serve
    from cronwheel.console.web import Settings

    check_address(args.address)
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen: expected host:port, got {args.listen!r}")
    refused = exposure_refusal(args.listen, not args.no_login, args.insecure,
                               without="with --no-login (every visitor would act with the console's token)",
                               remedy="drop --no-login")
    if refused:
        raise UsageError(f"--listen: {refused}")
    token = None
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise UsageError(f"--token-file: {exc.strerror}: {args.token_file}") from None
    if bool(args.https_cert) != bool(args.https_key):
        raise UsageError("--https-cert and --https-key go together")
    settings = Settings(addresses=[a.strip() for a in args.address.split(",") if a.strip()],
                        tls=bool(args.tls or args.tls_ca), ca_file=args.tls_ca, cert_file=args.cert_file,
                        key_file=args.key_file, no_login=args.no_login, token=token)
    serve(settings, host.strip("[]") or "127.0.0.1", int(port), cert_file=args.https_cert, key_file=args.https_key)
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `console` to the `cronwheel` subparsers (cronwheel.cli.main MODULES) with its handler."""
    p: argparse.ArgumentParser = subparsers.add_parser("console", help=HELP, description=HELP)
    configure(p)
    p.set_defaults(handler=run)
    return p
