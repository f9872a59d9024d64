"""`cronwheel webhook create|list|delete|deliveries`: push alerts from the shell, through the
public Client (cronwheel.client). The node's `--webhook-*` tuning flags are a server command's
(cli/commands.py `_add_webhook_options`).

    cronwheel webhook create --url https://hooks.slack.com/services/T/B/X     # the alerts, to Slack
    cronwheel webhook create --url https://ops.example/hook --kind dead_letter --schedule ID
    cronwheel webhook list
    cronwheel webhook deliveries --webhook ID --state failed
    cronwheel webhook delete ID

`create` prints a generated signing secret once (it cannot be read later; one given with
`--secret` is never printed). Every command takes
`--address` ($CRONWHEEL_ADDRESS), `--token` ($CRONWHEEL_TOKEN), `--tls`/`--ca-file` and `--json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from typing import Any

from cronwheel.cli.flags import client_for, connection_flags


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="webhook_command", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="subscribe a URL to events (prints the secret once)")
    c.add_argument("--url", required=True, help="where to POST the events (http:// or https://)")
    c.add_argument("--kind", action="append", default=[], dest="kinds",
                   help="an event kind to deliver (repeat; default: the alerts dead_letter, no_success_alert, "
                        "misfire_refused, execution_failed, and partition_unowned without a tenant)")
    c.add_argument("--tenant", default="", help="only this tenant's events (admin tokens; default: every tenant)")
    c.add_argument("--schedule", default="", help="only this schedule's events (its id)")
    c.add_argument("--secret", default="", help="the signing secret (default: generated)")
    c.add_argument("--description", default="", help="free text, e.g. 'ops channel'")
    ls = sub.add_parser("list", help="list webhooks (without secrets)")
    ls.add_argument("--tenant", default="", help="only this tenant's webhooks")
    d = sub.add_parser("delete", help="delete a webhook and its pending deliveries")
    d.add_argument("webhook_id")
    dl = sub.add_parser("deliveries", help="list deliveries, newest first: state, attempts, last error")
    dl.add_argument("--webhook", default="", help="only this webhook's")
    dl.add_argument("--event", type=int, default=0, help="only this event's (its id)")
    dl.add_argument("--state", choices=["pending", "delivered", "failed"], default=None)
    dl.add_argument("--tenant", default="", help="only this tenant's webhooks' deliveries")
    dl.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    for q in (c, ls, d, dl):
        connection_flags(q)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `webhook` to a subparsers object; the handler is set as `handler` (for a cli.py that
    dispatches on it)."""
    p = subparsers.add_parser("webhook", help=HELP, description=HELP)
    configure(p)
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.webhook_command == "create":
            made = client.create_webhook(args.url, kinds=args.kinds, tenant=args.tenant or None,
                                         schedule_id=args.schedule or None, secret=args.secret or None,
                                         description=args.description)
            shown = {"secret": made.secret} if made.secret else {}  # a --secret given is never echoed
            if args.json:
                _print_json({**_plain(made.webhook), **shown})
            else:
                w = made.webhook
                secret = (f"{made.secret}\n  (the secret is shown only now: keep it to verify signatures)"
                          if made.secret else "the one given with --secret (never shown)")
                print(f"webhook {w.id} -> {w.url}\n  kinds: {', '.join(w.kinds)}"
                      f"\n  tenant: {w.tenant or '(every tenant)'}\n  schedule: {w.schedule_id or '(any)'}"
                      f"\n  secret: {secret}")
        elif args.webhook_command == "list":
            hooks = list(client.list_webhooks(tenant=args.tenant or None))
            if args.json:
                _print_json([_plain(w) for w in hooks])
            for w in [] if args.json else hooks:
                print(f"{w.id}  {w.url}  kinds={','.join(w.kinds)}  tenant={w.tenant or '*'}"
                      f"  schedule={w.schedule_id or '*'}  {w.description}".rstrip())
        elif args.webhook_command == "delete":
            dropped = client.delete_webhook(args.webhook_id)
            if args.json:
                _print_json({"deleted": args.webhook_id, "dropped_pending": dropped})
            else:
                print(f"deleted webhook {args.webhook_id} ({dropped} pending deliveries dropped)")
        else:
            found = []
            for d in client.list_deliveries(webhook_id=args.webhook or None, event_id=args.event,
                                            state=args.state, tenant=args.tenant or None,
                                            page_size=max(1, min(args.limit, 1000))):
                found.append(d)
                if len(found) >= args.limit:
                    break
            if args.json:
                _print_json([_plain(d) for d in found])
            for d in [] if args.json else found:
                err = f"  last: {d.last_status or '-'} {d.last_error or ''}".rstrip() if d.state != "delivered" else ""
                print(f"{d.id}  event {d.event_id} {d.kind}  {d.state}  attempts={d.attempts}"
                      f"  webhook={d.webhook_id}{err}")
    return 0


def _plain(v: Any) -> dict[str, Any]:
    return {k: (x.isoformat() if isinstance(x, datetime) else list(x) if isinstance(x, tuple) else
                str(x) if hasattr(x, "value") else x) for k, x in dataclasses.asdict(v).items()}


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, default=str))


HELP = "push alerts: webhook subscriptions and their deliveries"
