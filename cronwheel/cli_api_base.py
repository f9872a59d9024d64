"""Plumbing shared by the API subcommands (cli_api, cli_api_schedule): argument types, the
connection flags every command takes, the gRPC channel with the caller's token, and the mapping
of gRPC refusals to one line and an exit code (INVALID_ARGUMENT -> 2; UNAVAILABLE and
DEADLINE_EXCEEDED -> 3; anything else -> 1)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cronwheel.cli import EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE, fail
from cronwheel.errors import InvalidArgument
from cronwheel.v1 import enums

DEFAULT_ADDRESS = "127.0.0.1:7070"
# flag word -> proto enum number, derived from the generated stubs (cronwheel.v1.enums)
PRIORITIES = enums.by_name(enums.PRIORITY)
MISFIRE = enums.by_name(enums.MISFIRE)
OVERLAP = enums.by_name(enums.OVERLAP)
DST_GAP = enums.by_name(enums.DST_GAP)
DST_REPEATED = enums.by_name(enums.DST_REPEATED)
STATES = enums.by_name(enums.STATE)
_DUR = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


# ---------------------------------------------------------------------------------- arguments


def duration_arg(text: str) -> float:
    m = _DUR.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 30, 30s, 5m, 2h or 1d, got {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def instant_arg(text: str) -> datetime:
    if text.strip().lower() == "now":
        from cronwheel.clock import SystemClock

        return SystemClock().now()
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time like 2026-01-31T09:00:00Z, got {text!r}") from None
    if dt.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset: add Z or +HH:MM")
    return dt.astimezone(UTC)


def json_arg(text: str) -> str:
    """A JSON document, or @file to read one."""
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc.strerror}") from None
    return text


def connection_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection")
    g.add_argument("--address", default=os.environ.get("CRONWHEEL_ADDRESS", DEFAULT_ADDRESS),
                   help=f"node gRPC address (default: $CRONWHEEL_ADDRESS, else {DEFAULT_ADDRESS})")
    g.add_argument("--token", default=os.environ.get("CRONWHEEL_TOKEN", ""), help="bearer token ($CRONWHEEL_TOKEN)")
    g.add_argument("--tls-ca", default="", help="use TLS, trusting this PEM CA certificate")
    g.add_argument("--timeout", type=duration_arg, default=10.0, help="seconds to wait for the node (default 10)")
    g.add_argument("--json", action="store_true", help="print the response as JSON")


def subcommands(p: argparse.ArgumentParser, dest: str) -> Any:
    return p.add_subparsers(dest=dest, required=True, parser_class=type(p), metavar="ACTION")


def leaf(sub: Any, name: str, help_: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
    connection_flags(p)
    p.set_defaults(func=func)
    return p


def enum_arg(table: dict[str, int]) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if text not in table:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(table)}, got {text!r}")
        return table[text]

    return parse


# ---------------------------------------------------------------------------------- calls


class Api:
    """A channel to one node and its stubs, with the caller's token."""

    def __init__(self, args: argparse.Namespace) -> None:
        import grpc

        from cronwheel.v1 import admin_pb2_grpc, scheduler_pb2_grpc

        if args.tls_ca:
            try:
                with open(args.tls_ca, "rb") as f:
                    creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            except OSError as exc:
                raise InvalidArgument("--tls-ca", f"cannot read {args.tls_ca}: {exc.strerror}") from None
            self.channel = grpc.secure_channel(args.address, creds)
        else:
            self.channel = grpc.insecure_channel(args.address)
        self.metadata = (("authorization", f"Bearer {args.token}"),) if args.token else ()
        self.timeout = args.timeout
        self.scheduler = scheduler_pb2_grpc.SchedulerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    def __call__(self, method: Callable[..., Any], request: Any) -> Any:
        return method(request, metadata=self.metadata, timeout=self.timeout)


def all_pages(api: Api, rpc: Any, req: Any, field: str, everything: bool) -> Any:
    """Call a List RPC; with `everything`, follow next_page_token and gather every page's
    `field` into the first response."""
    resp = api(rpc, req)
    while everything and resp.next_page_token:
        req.page_token = resp.next_page_token
        more = api(rpc, req)
        getattr(resp, field).extend(getattr(more, field))
        resp.next_page_token = more.next_page_token
    return resp


def api_command(func: Callable[[Api, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run `func` with an Api; gRPC refusals become one line and an exit code."""

    def run(args: argparse.Namespace) -> int:
        import grpc

        api = Api(args)
        try:
            return func(api, args)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            text = (exc.details() if hasattr(exc, "details") else "") or str(code)
            line = " ".join(text.split())
            if code is grpc.StatusCode.INVALID_ARGUMENT:
                return fail(line, EXIT_USAGE)
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return fail(f"node {args.address} unavailable: {line}", EXIT_UNAVAILABLE)
            return fail(f"{code.name.lower()}: {line}", EXIT_FAILED)
        finally:
            api.channel.close()

    return run


def dispatch(args: argparse.Namespace) -> int:
    return int(args.func(args))
