"""What the API subcommands share: argument types, the connection flags, the Client they call
(`client_for`), and how a refusal is told to the user (`describe_error`): the API's field path
becomes the flag the user typed (FLAGS, the one table), a bad zone gets the closest real one,
an unreachable node gets a hint. The exit code is cronwheel.cli's business (`exit_code`).

gRPC is imported only when a command runs (`client_for`), after GRPC_VERBOSITY is set: a TLS
handshake failure is then one line of ours, not C-core log lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronwheel.errors import CronwheelError, InvalidArgument, Unavailable
from cronwheel.v1 import enums

if TYPE_CHECKING:
    from cronwheel.client import Client

DEFAULT_ADDRESS = "127.0.0.1:7070"
# The words the flags take: the contract's enum words (the Client's StrEnum values), derived.
PRIORITIES, MISFIRE, OVERLAP = list(enums.PRIORITY.values()), list(enums.MISFIRE.values()), list(enums.OVERLAP.values())
DST_GAP, DST_REPEATED = list(enums.DST_GAP.values()), list(enums.DST_REPEATED.values())
STATES = list(enums.STATE.values())
_DUR = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}

# API field path (relative to the request, "schedule."/"spec." stripped; the Client's keyword
# names too) -> the flag a user types. "COMMAND:path" entries win for that command.
FLAGS: dict[str, str] = {
    "name": "--name", "cron": "--cron", "timezone": "--timezone", "job_type": "--job-type",
    "payload": "--payload", "payload_json": "--payload", "priority": "--priority",
    "retry_policy.max_attempts": "--max-attempts", "max_attempts": "--max-attempts",
    "retry_policy.initial_backoff": "--backoff-initial", "initial_backoff": "--backoff-initial",
    "retry_policy.backoff_multiplier": "--backoff-multiplier", "backoff_multiplier": "--backoff-multiplier",
    "retry_policy.max_backoff": "--backoff-max", "max_backoff": "--backoff-max",
    "timeout": "--attempt-timeout", "attempt_timeout": "--attempt-timeout",
    "misfire_policy": "--misfire-policy", "max_catch_up": "--max-catch-up", "overlap_policy": "--overlap-policy",
    "dst_policy.gap": "--dst-gap", "dst_policy.repeated_hour": "--dst-repeated", "jitter": "--jitter",
    "jitter_s": "--jitter", "alert_if_no_success_within": "--alert-if-no-success-within",
    "range": "--start/--end", "range.start_time": "--start", "range.start": "--start",
    "range.end_time": "--end", "range.end": "--end",
    "explain:range": "--since/--until", "explain:range.start_time": "--since", "explain:range.start": "--since",
    "explain:range.end_time": "--until", "explain:range.end": "--until",
    "run_at": "--run-at", "idempotency_key": "--idempotency-key", "concurrency_key": "--concurrency-key",
    "concurrency_limit": "--concurrency-limit", "type": "--type", "tenant": "--tenant",
    "queue": "--queue", "required_capabilities": "--requires",
    "schedule_id": "SCHEDULE", "exec:schedule_id": "--schedule", "events:schedule_id": "--schedule",
    "execution_id": "EXECUTION_ID", "events:execution_id": "--execution", "expected_version": "--expected-version",
    "additional_attempts": "--attempts", "count": "--count", "after": "--after", "start_time": "--after",
    "page_size": "--limit", "states": "--state", "after_id": "--since", "kind": "--kind", "address": "--address",
    "ca_file": "--tls-ca", "keep_last": "--keep-last", "keep_succeeded_for": "--keep-succeeded-for",
    "keep_failed_for": "--keep-failed-for", "target": "--target",
    "unique.args_keys": "--unique-keys", "unique.period": "--unique-period", "unique.states": "--unique-states",
    # tenant and token commands (cli.tenant, `token` in cli.api)
    "tenant:tenant.id": "TENANT", "tenant:tenant_id": "TENANT", "tenant:tenant": "TENANT",
    "tenant.max_concurrency": "--max-concurrency", "max_concurrency": "--max-concurrency",
    "tenant.rate_per_s": "--rate-per-s", "rate_per_s": "--rate-per-s", "tenant.burst": "--burst", "burst": "--burst",
    "tenant.weight": "--weight", "weight": "--weight", "tenant.max_schedules": "--max-schedules",
    "max_schedules": "--max-schedules", "tenant.max_executions_per_day": "--max-executions-per-day",
    "max_executions_per_day": "--max-executions-per-day", "tenant.egress_rules": "--egress-rules",
    "egress_rules": "--egress-rules",
    "expires_at": "--expires-in", "expires_in": "--expires-in", "token_id": "TOKEN_ID", "token:tenant": "--tenant",
}
_PREFIXES = re.compile(r"^(schedule|spec|jobs\[\d+\])\.")


# ---------------------------------------------------------------------------------- arguments


def duration_arg(text: str) -> timedelta:
    m = _DUR.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 30, 30s, 5m, 2h or 1d, got {text!r}")
    return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])


def seconds_arg(text: str) -> float:
    return duration_arg(text).total_seconds()


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


def json_arg(text: str) -> Any:
    """A JSON document, or @file to read one, as a Python value."""
    where = "the argument"
    if text.startswith("@"):
        where = text[1:]
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{where} is not JSON: {exc}") from None


def count_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def number_arg(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _ambiguous_timeout(text: str) -> None:
    raise argparse.ArgumentTypeError(
        "is ambiguous: say --attempt-timeout for a job's per-attempt time limit, or --call-timeout for how "
        "long the CLI waits for the node")


def connection_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection")
    g.add_argument("--address", default=os.environ.get("CRONWHEEL_ADDRESS", DEFAULT_ADDRESS),
                   help=f"node address host:port, or several comma-separated (fail-over) "
                        f"(default: $CRONWHEEL_ADDRESS, else {DEFAULT_ADDRESS})")
    g.add_argument("--token", default=os.environ.get("CRONWHEEL_TOKEN", ""), help="bearer token ($CRONWHEEL_TOKEN)")
    g.add_argument("--tls", action="store_true", help="use TLS, trusting the system's CA certificates")
    g.add_argument("--tls-ca", default="", help="use TLS, trusting this PEM CA certificate")
    g.add_argument("--call-timeout", type=seconds_arg, default=10.0, metavar="DURATION",
                   help="how long each call may wait for the node (default 10s)")
    g.add_argument("--timeout", type=_ambiguous_timeout, help=argparse.SUPPRESS)
    g.add_argument("--json", action="store_true",
                   help="print the result as JSON (numbers as numbers, times ISO 8601 UTC, durations in seconds, "
                        "enums as the flags' words)")
    p.set_defaults(describe_error=describe_error, help_of=p.prog)


def subcommands(p: argparse.ArgumentParser, dest: str) -> Any:
    return p.add_subparsers(dest=dest, required=True, parser_class=type(p), metavar="ACTION")


def leaf(sub: Any, name: str, help_: str, handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
    connection_flags(p)
    p.set_defaults(handler=handler)
    return p


def positive_arg(text: str) -> int:
    n = count_arg(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def schedule_ref(p: argparse.ArgumentParser, nargs: str | None = None) -> None:
    """The SCHEDULE positional (an id or a name) and the --tenant that disambiguates a name."""
    p.add_argument("schedule", metavar="SCHEDULE", nargs=nargs, default=None, help="the schedule's id or name")
    if not any("--tenant" in a.option_strings for a in p._actions):
        p.add_argument("--tenant", default="", help="with a name: the tenant that owns it (admin tokens)")


# ---------------------------------------------------------------------------------- the Client


def check_address(address: str) -> None:
    """Refuse the address mistakes gRPC would only time out on, with what was probably meant."""
    for a in (x.strip() for x in address.split(",")):
        if not a:
            continue
        m = re.match(r"^([a-z][a-z0-9+.-]*)://(.*)$", a, re.I)
        if m and m.group(1).lower() in ("http", "https", "grpc", "grpcs", "tcp"):
            rest = m.group(2).rstrip("/")
            hint = rest if ":" in rest else f"{rest}:7070"
            tls = " with --tls or --tls-ca" if m.group(1).lower() in ("https", "grpcs") else ""
            raise InvalidArgument("--address", f"give host:port, not a URL: did you mean {hint}{tls}?")
        if a.startswith(("unix:", "dns:", "ipv4:", "ipv6:")) or a.count(":") > 1:
            continue  # gRPC target names and bare IPv6 are passed through
        if ":" not in a:
            raise InvalidArgument("--address", f"{a!r} has no port: did you mean {a}:7070?")


def client_for(args: argparse.Namespace) -> Client:
    """The Client the command calls, from the connection flags."""
    check_address(args.address)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # before grpc starts: no C-core log lines
    os.environ.setdefault("GRPC_TRACE", "")
    from cronwheel.client import Client

    return Client(args.address, token=args.token or None, tls=bool(args.tls or args.tls_ca),
                  ca_file=args.tls_ca or None, deadline_s=args.call_timeout, retries=2)


def resolve(client: Client, args: argparse.Namespace, ref: str | None = None) -> str:
    """The id of the schedule the user named (an id, or a name looked up in --tenant)."""
    from cronwheel.client.client import looks_like_uuid

    ref = args.schedule if ref is None else ref
    if looks_like_uuid(ref):
        return ref
    return client.get_schedule(ref, tenant=getattr(args, "tenant", "") or None).id


# ---------------------------------------------------------------------------------- errors


def flag_for(field: str, command: str) -> str | None:
    path = _PREFIXES.sub("", field)
    item = re.sub(r"\[\d+\]$", "", path)  # unique.states[2] -> unique.states
    return FLAGS.get(f"{command}:{path}") or FLAGS.get(path) or FLAGS.get(item)


def closest_zone(text: str) -> str | None:
    """The IANA zone the user probably meant: the same name in another case, else the closest."""
    import difflib
    import zoneinfo

    by_lower = {z.lower(): z for z in zoneinfo.available_timezones()}
    if text.strip().lower() in by_lower:
        return by_lower[text.strip().lower()]
    near = difflib.get_close_matches(text.strip().lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[near[0]] if near else None


def _unavailable(exc: CronwheelError, args: argparse.Namespace) -> str:
    text, address = exc.message, args.address
    low = text.lower()
    if "ssl" in low or "handshake" in low or "certificate" in low or "tls" in low:
        return (f"node {address} unavailable: the TLS handshake failed (check --tls-ca, and that the node serves "
                f"TLS for this name)")
    if "socket closed" in low and not (args.tls or args.tls_ca):
        return (f"node {address} unavailable: it closed the connection; if it serves TLS, add --tls-ca FILE "
                f"(or --tls)")
    if "connection refused" in low or "failed to connect" in low or "connect failed" in low:
        return (f"node {address} unavailable: nothing is listening there; start one with `cronwheel dev` "
                f"or pass --address")
    return f"node {address} unavailable: {text}"


def describe_error(exc: CronwheelError, args: argparse.Namespace) -> str:
    """The one line a failed API command prints: flags, not field paths; hints where they help."""
    code = getattr(exc, "code", "")
    if isinstance(exc, InvalidArgument) and not code:  # the CLI's own check of the command line
        return f"{exc.message} (see `{args.help_of} --help`)"
    if isinstance(exc, InvalidArgument):
        msg, field = exc.message, getattr(exc, "field", "")
        flag = flag_for(field, args.command) if field else None
        if flag:
            msg = flag + msg[len(field):]
            for sub in ("start_time", "end_time"):  # "range: start_time must be before end_time"
                inner = flag_for(f"{field}.{sub}", args.command)
                if inner:
                    msg = msg.replace(sub, inner)
            if flag == "--timezone" and getattr(args, "timezone", None):
                zone = closest_zone(args.timezone)
                if zone and zone != args.timezone:
                    msg += f" (did you mean {zone}?)"
        return msg
    if isinstance(exc, Unavailable) and code:
        return _unavailable(exc, args)
    if code == "DEADLINE_EXCEEDED":
        return f"node {args.address} did not answer within --call-timeout ({args.call_timeout:g} s)"
    return f"{code.lower()}: {exc.message}" if code else exc.message
