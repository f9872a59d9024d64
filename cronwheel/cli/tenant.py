"""`cronwheel tenant create|update|get|list|queue`: tenants' limits and quotas through the public Client
(admin tokens only).

    cronwheel tenant create acme --rate-per-s 100 --burst 200 --weight 3 --max-schedules 50
    cronwheel tenant update acme --max-executions-per-day 100000 --rate-per-s none
    cronwheel tenant get acme
    cronwheel tenant list
    cronwheel tenant queue acme long --max-concurrency 2 --weight 1

`none` clears --rate-per-s (no rate limit), --burst (one second's worth) and the quotas (no
quota). `update` changes only the flags given. Every command takes the connection flags
(`--address`, `--token`, `--tls`/`--tls-ca`, `--call-timeout`, `--json`).
"""

from __future__ import annotations

import argparse
from typing import Any

from cronwheel.cli.flags import client_for, leaf, subcommands
from cronwheel.cli.format import show

HELP = "tenants' limits and quotas: create, update, get, list, queue (admin)"
_NONE = ("none", "unlimited")


def _optional(kind: type) -> Any:
    def parse(text: str) -> Any:
        if text.strip().lower() in _NONE:
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a number' if kind is float else 'a whole number'} or "
                                             f"'none', got {text!r}") from None
    return parse


def _rules(text: str) -> list[str]:
    return [] if text.strip().lower() == "none" else [r.strip() for r in text.split(",") if r.strip()]


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


# flag name (without --) -> (Client keyword, argparse type, help)
FIELDS: dict[str, tuple[str, Any, str]] = {
    "max-concurrency": ("max_concurrency", _whole, "runs at once in the cluster (default 1000)"),
    "rate-per-s": ("rate_per_s", _optional(float), "starts per second ('none': no rate limit, the default)"),
    "burst": ("burst", _optional(float), "starts at once after a quiet time ('none': one second's worth)"),
    "weight": ("weight", _whole, "share of the starts when tenants compete (default 1)"),
    "max-schedules": ("max_schedules", _optional(int), "quota of live schedules ('none': no quota)"),
    "max-executions-per-day": ("max_executions_per_day", _optional(int),
                               "quota of executions created per UTC day ('none': no quota)"),
    "egress-rules": ("egress_rules", _rules,
                     "where its HTTP targets may point: comma-separated HOST_GLOB or HOST_GLOB:PORT "
                     "('none': any public address, the default)"),
}


def _fields(p: argparse.ArgumentParser) -> None:
    for flag, (dest, kind, help_) in FIELDS.items():
        p.add_argument(f"--{flag}", dest=dest, type=kind, default=argparse.SUPPRESS, help=help_)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    return {dest: getattr(args, dest) for dest, _, _ in FIELDS.values() if hasattr(args, dest)}


def _table(tenants: list[Any]) -> None:
    def opt(v: Any) -> str:
        return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

    for t in tenants:
        print(f"{t.id}  max_concurrency={t.max_concurrency}  rate_per_s={opt(t.rate_per_s)}  burst={opt(t.burst)}  "
              f"weight={t.weight}  max_schedules={opt(t.max_schedules)}  "
              f"max_executions_per_day={opt(t.max_executions_per_day)}"
              + (f"  egress_rules={','.join(t.egress_rules)}" if t.egress_rules else ""))
        for x in t.queues:
            print(f"  queue {x.name}  max_concurrency={opt(x.max_concurrency)}  weight={x.weight}")


def _queue(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        queues = client.set_tenant_queue(args.tenant, args.queue, max_concurrency=args.max_concurrency,
                                         weight=args.weight)
    return show(args, queues, lambda: [print(f"queue {x.name}  max_concurrency="
                                             f"{'-' if x.max_concurrency is None else x.max_concurrency}"
                                             f"  weight={x.weight}") for x in queues])


def _create(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        t = client.create_tenant(args.tenant, **_given(args))
    return show(args, t, lambda: _table([t]))


def _update(args: argparse.Namespace) -> int:
    from cronwheel.cli.main import UsageError

    changes = _given(args)
    if not changes:
        raise UsageError(f"give at least one of {', '.join('--' + f for f in FIELDS)}", "cronwheel tenant update")
    with client_for(args) as client:
        t = client.update_tenant(args.tenant, **changes)
    return show(args, t, lambda: _table([t]))


def _get(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        t = client.get_tenant(args.tenant)
    return show(args, t, lambda: _table([t]))


def _list(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        tenants = list(client.list_tenants())
    return show(args, tenants, lambda: _table(tenants))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser("tenant", help=HELP, description=HELP)
    sub = subcommands(p, "tenant_command")
    for name, help_, handler, fields in (("create", "create a tenant with its limits and quotas", _create, True),
                                         ("update", "change the limits and quotas given", _update, True),
                                         ("get", "show one tenant", _get, False)):
        q = leaf(sub, name, help_, handler)
        q.add_argument("tenant", metavar="TENANT")
        if fields:
            _fields(q)
    leaf(sub, "list", "list tenants", _list)
    q = leaf(sub, "queue", "set a queue's limits for a tenant (replaces what was set)", _queue)
    q.add_argument("tenant", metavar="TENANT")
    q.add_argument("queue", metavar="QUEUE")
    q.add_argument("--max-concurrency", type=_optional(int), default=None,
                   help="the tenant's runs of the queue at once ('none', the default: only the tenant's limit)")
    q.add_argument("--weight", type=_whole, default=None, help="share among the tenant's queues (default 1)")
    return p
