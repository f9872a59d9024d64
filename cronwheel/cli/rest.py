"""`cronwheel rest`: the REST/JSON API (docs/rest.md) in front of a cluster.

    cronwheel rest --address NODE[,NODE...] [--listen 127.0.0.1:7090] [--insecure] [--tls | --tls-ca FILE]

A process of its own that calls the nodes over gRPC (cluster/api/rest_server.py says why): callers
send `Authorization: Bearer <token>` exactly as on gRPC. Beyond loopback it listens only when the
nodes require tokens, or with `--insecure` (the node's rule, cluster/api/auth.py
`exposure_refusal`). Prints `rest api listening on http://HOST:PORT` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from cronwheel.cli.flags import DEFAULT_ADDRESS, check_address
from cronwheel.cli.main import EXIT_OK

HELP = "the REST/JSON API (and /openapi.json) in front of a cluster"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=os.environ.get("CRONWHEEL_ADDRESS", DEFAULT_ADDRESS),
                   help="node address(es), comma-separated ($CRONWHEEL_ADDRESS)")
    p.add_argument("--listen", default="127.0.0.1:7090", help="host:port to serve HTTP on")
    p.add_argument("--insecure", action="store_true",
                   help="listen beyond loopback even if the nodes run without an auth file (every caller an admin)")
    p.add_argument("--tls", action="store_true", help="reach the nodes over TLS, trusting the system's CAs")
    p.add_argument("--tls-ca", default=None, help="reach the nodes over TLS, trusting this PEM CA certificate")


def run(args: argparse.Namespace) -> int:
    from cronwheel.cluster.api.rest_server import RestConfig, RestServer

    check_address(args.address)
    config = RestConfig(listen=args.listen, addresses=tuple(a.strip() for a in args.address.split(",") if a.strip()),
                        insecure=args.insecure, tls=bool(args.tls), ca_file=args.tls_ca)
    server = RestServer(config)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.stop)
        task = asyncio.create_task(server.run(), name="rest-server")
        bound = asyncio.create_task(server.bound.wait(), name="rest-bound")
        await asyncio.wait({task, bound}, return_when=asyncio.FIRST_COMPLETED)
        if server.bound.is_set():
            print(f"rest api listening on {server.url}", flush=True)
        else:
            bound.cancel()
        await task

    asyncio.run(main())
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `rest` to the `cronwheel` subparsers (cronwheel.cli MODULES) with its handler."""
    p: argparse.ArgumentParser = subparsers.add_parser("rest", help=HELP, description=HELP)
    configure(p)
    p.set_defaults(handler=run)
    return p
