"""The API subcommands of `cronwheel` besides `schedule` (cli.schedule) and `explain`
(cli.explain), each a call of cronwheel.client.Client:

    cronwheel status
    cronwheel job submit
    cronwheel exec list|get|logs|retry|cancel
    cronwheel events [--follow] [--alerts-only]
    cronwheel token new|list|revoke (bearer tokens through the API; `new --offline`: an auth-file entry)

Every API command takes the connection flags of cli.flags: `--address` ($CRONWHEEL_ADDRESS,
default 127.0.0.1:7070; several comma-separated for fail-over), `--token` ($CRONWHEEL_TOKEN),
`--tls` / `--tls-ca FILE`, `--call-timeout DURATION` and `--json` (see cli.format). A job's
own time limit is `--attempt-timeout`; a bare `--timeout` is refused as ambiguous. Exit codes and
error lines: cronwheel.cli.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from cronwheel.cli.flags import (
    PRIORITIES,
    STATES,
    client_for,
    connection_flags,
    count_arg,
    duration_arg,
    instant_arg,
    json_arg,
    leaf,
    number_arg,
    positive_arg,
    resolve,
    subcommands,
)
from cronwheel.cli.format import (
    details,
    event_line,
    log_line,
    plain,
    print_executions,
    print_status,
    print_upstreams,
    show,
)

# ---------------------------------------------------------------------------------- status


def _status(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        st = cw.status()
    return show(args, st, lambda: print_status(st))


# ---------------------------------------------------------------------------------- jobs and executions


def _retry_policy(args: argparse.Namespace) -> Any:
    from cronwheel.client import RetryPolicy

    given = {k: getattr(args, f) for k, f in (("max_attempts", "max_attempts"), ("initial_backoff", "backoff_initial"),
                                             ("backoff_multiplier", "backoff_multiplier"),
                                             ("max_backoff", "backoff_max")) if getattr(args, f) is not None}
    return RetryPolicy(**given) if given else None


def _unique(args: argparse.Namespace) -> Any:
    from cronwheel.client import Unique

    keys = [k for k in (args.unique_keys or "").split(",") if k]
    states = [s.strip() for s in (args.unique_states or "").split(",") if s.strip()]
    if not (args.unique or keys or args.unique_period is not None or states):
        return None
    return Unique(by_args=args.unique, args_keys=keys, period=args.unique_period, states=states)


def _job_submit(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        ex = cw.submit(args.type, args.payload, run_at=args.run_at, delay=args.delay, priority=args.priority,
                       idempotency_key=args.idempotency_key or None, retry_policy=_retry_policy(args),
                       attempt_timeout=args.attempt_timeout, tenant=args.tenant or None, unique=_unique(args),
                       concurrency_key=args.concurrency_key or None, concurrency_limit=args.concurrency_limit,
                       depends_on=args.after or (), dependency_policy="always" if args.run_anyway else None,
                       queue=args.queue or None, required_capabilities=args.requires)
    return show(args, ex, lambda: details(ex))


def _exec_list(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        schedule = resolve(cw, args, args.schedule) if args.schedule else None
        it = cw.list_executions(tenant=args.tenant or None, schedule_id=schedule, type=args.type or None,
                                states=args.state or (), page_size=1000 if args.all else min(max(args.limit, 1), 1000))
        items = list(it if args.all else itertools.islice(it, args.limit + 1))
    more = not args.all and len(items) > args.limit
    items = items[:args.limit] if more else items
    return show(args, items, lambda: print_executions(items, more))


def _exec_get(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        ex = cw.get_execution(args.execution_id)
    return show(args, ex, lambda: (details(ex), print_upstreams(ex)))


def _exec_retry(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        ex = cw.retry(args.execution_id, additional_attempts=args.attempts, run_at=args.run_at, reason=args.reason)
    return show(args, ex, lambda: details(ex))


def _exec_cancel(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        ex = cw.cancel(args.execution_id, reason=args.reason)
    return show(args, ex, lambda: details(ex))


def _exec_logs(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        for line in cw.logs(args.execution_id, attempt=args.attempt, follow=args.follow, poll_s=args.poll):
            print(json.dumps(plain(line)) if args.json else log_line(line), flush=args.follow)
    return 0


def _job_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("job", help="one-off jobs: submit")
    sub = subcommands(p, "action")
    s = leaf(sub, "submit", "submit a one-off job, now, at --run-at or after --delay", _job_submit)
    s.add_argument("--type", required=True, help="the job type workers lease")
    s.add_argument("--payload", type=json_arg, help="JSON payload, or @file.json")
    when = s.add_mutually_exclusive_group()
    when.add_argument("--run-at", type=instant_arg, help="when to run (ISO 8601; default now)")
    when.add_argument("--delay", type=duration_arg, metavar="DURATION", help="run this long from now")
    s.add_argument("--priority", choices=PRIORITIES, help=" | ".join(PRIORITIES))
    s.add_argument("--idempotency-key", default="", help="submit once per key (default: a random one)")
    s.add_argument("--tenant", default="")
    s.add_argument("--concurrency-key", default="", metavar="KEY",
                   help="at most --concurrency-limit runs with this key at once (e.g. customer:42)")
    s.add_argument("--concurrency-limit", type=count_arg, metavar="N",
                   help="runs with --concurrency-key at once (>= 1)")
    s.add_argument("--after", action="append", metavar="EXECUTION_ID|KEY",
                   help="wait for this execution (its id, or its idempotency key) to succeed first; repeat for "
                        "several (the job is WAITING until the last of them succeeded)")
    s.add_argument("--run-anyway", action="store_true",
                   help="with --after: run once every upstream finished, even if one did not succeed (default: "
                        "an upstream that fails, dies or is cancelled cancels this job)")
    s.add_argument("--queue", default="", help="the queue it waits in (default: default)")
    s.add_argument("--requires", action="append", default=[], metavar="KEY=VALUE",
                   help="a capability the worker must advertise (repeat): --requires gpu=a100")
    s.add_argument("--max-attempts", type=count_arg, help="attempts, the first included (1..1000; default 5)")
    s.add_argument("--backoff-initial", type=duration_arg, metavar="DURATION",
                   help="delay before the first retry (default 30s)")
    s.add_argument("--backoff-multiplier", type=number_arg, metavar="FACTOR",
                   help="delay factor after each further failure (1..100; default 4)")
    s.add_argument("--backoff-max", type=duration_arg, metavar="DURATION", help="longest delay (default 6h)")
    s.add_argument("--attempt-timeout", type=duration_arg, metavar="DURATION",
                   help="the job's per-attempt time limit (1s..7d; default none)")
    s.add_argument("--unique", action="store_true",
                   help="unique job by its payload: while one with the same type and payload is scheduled, queued, "
                        "running or waiting to retry, return it instead of creating another")
    s.add_argument("--unique-keys", metavar="KEY,...",
                   help="unique job by these top-level payload keys only (implies --unique)")
    s.add_argument("--unique-period", type=duration_arg, metavar="DURATION",
                   help="unique within a period bucket of run_at (UTC epoch multiples; default for ever)")
    s.add_argument("--unique-states", metavar="STATE,...",
                   help="the states that keep a second one out (default scheduled,queued,running,retry_scheduled; "
                        "a list must include those and may add succeeded, failed, dead, cancelled, skipped)")


def _exec_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("exec", help="executions: list, get, logs, retry, cancel")
    sub = subcommands(p, "action")
    ls = leaf(sub, "list", "list executions, newest first", _exec_list)
    ls.add_argument("--schedule", default="", help="only this schedule's (id or name)")
    ls.add_argument("--state", action="append", choices=STATES, help="only these states (repeatable)")
    ls.add_argument("--type", default="")
    ls.add_argument("--tenant", default="")
    ls.add_argument("--limit", type=positive_arg, default=100, help="show at most this many (default 100)")
    ls.add_argument("--all", action="store_true", help="show every one (follows every page)")
    leaf(sub, "get", "show one execution", _exec_get).add_argument("execution_id", metavar="EXECUTION_ID")
    r = leaf(sub, "retry", "bring a dead, failed, cancelled or skipped execution back", _exec_retry)
    r.add_argument("execution_id", metavar="EXECUTION_ID")
    r.add_argument("--attempts", type=positive_arg, default=1, help="more attempts to allow (default 1)")
    r.add_argument("--run-at", type=instant_arg, help="when (default now)")
    r.add_argument("--reason", default="")
    lg = leaf(sub, "logs", "what an execution's handler logged, per attempt, in order (--follow: until it ends)",
              _exec_logs)
    lg.add_argument("execution_id", metavar="EXECUTION_ID")
    lg.add_argument("--attempt", type=positive_arg, default=None, metavar="N", help="only attempt N's lines")
    lg.add_argument("--follow", "-f", action="store_true",
                    help="keep printing new lines of a running execution until it is final")
    lg.add_argument("--poll", type=lambda s: duration_arg(s).total_seconds(), default=0.25, metavar="DURATION",
                    help="with --follow: how often to ask (default 250ms)")
    c = leaf(sub, "cancel", "cancel an execution (a running one is asked to stop)", _exec_cancel)
    c.add_argument("execution_id", metavar="EXECUTION_ID")
    c.add_argument("--reason", default="")


# ---------------------------------------------------------------------------------- events


def _events(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        schedule = resolve(cw, args, args.schedule) if args.schedule else None
        for ev in cw.events(args.since, follow=args.follow, poll_s=args.poll, tenant=args.tenant or None,
                            schedule_id=schedule, execution_id=args.execution or None, kind=args.kind or None,
                            alerts_only=args.alerts_only):
            print(json.dumps(plain(ev)) if args.json else event_line(ev), flush=args.follow)
    return 0


def _events_parser(subparsers: Any) -> None:
    help_ = "the audit and alert log, oldest first (--follow: keep printing new ones; Ctrl-C stops)"
    p = subparsers.add_parser("events", help=help_, description=help_ + "; --json prints one JSON object a line")
    p.add_argument("--follow", "-f", action="store_true", help="keep polling for new events")
    p.add_argument("--alerts-only", action="store_true", help="only alerts (missed ticks, dead man's switch, ...)")
    p.add_argument("--since", type=count_arg, default=0, metavar="EVENT_ID", help="only events after this id")
    p.add_argument("--schedule", default="", help="only this schedule's (id or name)")
    p.add_argument("--execution", default="", help="only this execution's")
    p.add_argument("--kind", default="", help="only this kind, e.g. schedule.paused")
    p.add_argument("--tenant", default="")
    p.add_argument("--poll", type=lambda s: duration_arg(s).total_seconds(), default=1.0, metavar="DURATION",
                   help="with --follow: how often to ask (default 1s)")
    connection_flags(p)
    p.set_defaults(handler=_events)


# ---------------------------------------------------------------------------------- tokens


def _token_who(args: argparse.Namespace) -> None:
    from cronwheel.cli.main import UsageError

    if not args.admin and not args.tenant:
        raise UsageError("give --tenant NAME or --admin", "cronwheel token new")


def _token_offline(args: argparse.Namespace) -> int:
    """`token new --offline`: a random token and its auth-file entry (the bootstrap; no server).
    With --token-file and --auth-file (docker-compose's `auth-init`): the token is written to the
    one (mode 0600) and its entry added to the other, once: an existing token file is kept."""
    from cronwheel.cli.main import UsageError
    from cronwheel.token_format import hash_token, new_secret

    if args.expires_in is not None:
        raise UsageError("--expires-in needs a token made through the API (auth-file tokens never expire)",
                         "cronwheel token new")
    if bool(args.token_file) != bool(args.auth_file):
        raise UsageError("--token-file and --auth-file go together (with --offline)", "cronwheel token new")
    if args.token_file and _kept(args.token_file, args.auth_file):
        return 0
    token = new_secret()
    entry: dict[str, Any] = {"name": args.name or (args.tenant or "admin"), "sha256": hash_token(token)}
    if args.tenant:
        entry["tenant"] = args.tenant
    if args.admin:
        entry["admin"] = True
    if args.token_file:
        from cronwheel.cli.commands import write_bootstrap

        write_bootstrap(args.token_file, token, args.auth_file, entry)
        print(f"token written to {args.token_file}; its entry added to {args.auth_file}")
    elif args.json:
        print(json.dumps({"token": token, "entry": entry}))
    else:
        print(f"token (give it to the client; it is not stored): {token}")
        print(f"auth-file entry (add to \"tokens\"): {json.dumps(entry)}")
    return 0


def _kept(token_file: str, auth_file: str) -> bool:
    """Whether a bootstrap token exists already (then nothing is written, whatever runs again)."""
    from pathlib import Path

    if Path(token_file).is_file() and Path(token_file).read_text().strip():
        print(f"token kept: {token_file} exists (its entry is in {auth_file})")
        return True
    return False



def _token_new(args: argparse.Namespace) -> int:
    _token_who(args)
    if args.offline:
        return _token_offline(args)
    if args.token_file or args.auth_file:
        from cronwheel.cli.main import UsageError

        raise UsageError("--token-file and --auth-file need --offline", "cronwheel token new")
    with client_for(args) as client:
        made = client.create_token(args.name or (args.tenant or "admin"), tenant=args.tenant or None,
                                   admin=args.admin, expires_in=args.expires_in)
    if args.json:
        print(json.dumps({"token": plain(made.token), "secret": made.secret}, indent=2))
        return 0
    tok = made.token
    print(f"token {tok.id}  name={tok.name}  {'admin' if tok.admin else 'tenant'}={tok.tenant or '*'}  "
          f"expires={tok.expires_at.isoformat() if tok.expires_at else 'never'}")
    print(f"secret (shown only now; every node accepts it within a second): {made.secret}")
    return 0


def _token_list(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        tokens = list(client.list_tokens(tenant=args.tenant or None, include_revoked=args.all))

    def table() -> None:
        for t in tokens:
            state = f"revoked {t.revoked_at.isoformat()}" if t.revoked_at else (
                f"expires {t.expires_at.isoformat()}" if t.expires_at else "no expiry")
            print(f"{t.id}  {t.name}  {'admin' if t.admin else 'tenant'}={t.tenant or '*'}  {state}")

    return show(args, tokens, table)


def _token_revoke(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        tok = client.revoke_token(args.token_id)
    return show(args, tok, lambda: print(f"token {tok.id} ({tok.name}) revoked: every node refuses it within "
                                         "a second"))


def _token_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("token", help="bearer tokens: new, list, revoke (admin; through the API)")
    sub = subcommands(p, "action")
    n = sub.add_parser("new", help="make a token through the API (prints its secret once); --offline: an auth-file "
                                   "entry",
                       description="make a bearer token through the API: stored hashed, accepted by every node "
                                   "within a second, printed once. With --offline: a random token and its "
                                   "auth-file entry (the bootstrap for the first admin; no server involved)")
    who = n.add_mutually_exclusive_group()
    who.add_argument("--tenant", default="", help="the tenant the token acts for")
    who.add_argument("--admin", action="store_true", help="an admin token (every tenant)")
    n.add_argument("--name", default="", help="actor name recorded in audit events")
    n.add_argument("--expires-in", type=duration_arg, default=None, metavar="DURATION",
                   help="the token stops working after this long, e.g. 30d (default: never)")
    n.add_argument("--offline", action="store_true",
                   help="print an auth-file entry instead (no server; for --auth-file)")
    n.add_argument("--token-file", default="", help="with --offline and --auth-file: write the token to this file "
                                                    "(mode 0600) and add its entry to --auth-file; kept if it exists")
    n.add_argument("--auth-file", default="", help="with --offline --token-file: the auth file to add the entry to")
    connection_flags(n)
    n.set_defaults(handler=_token_new)
    ls = leaf(sub, "list", "list API-made tokens (never their secrets)", _token_list)
    ls.add_argument("--tenant", default="", help="only this tenant's tokens")
    ls.add_argument("--all", action="store_true", help="include revoked tokens")
    rv = leaf(sub, "revoke", "revoke a token: every node refuses it within a second", _token_revoke)
    rv.add_argument("token_id", metavar="TOKEN_ID")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("status", help="show the cluster: members, partition owners and epochs, queue "
                                             "depths (admin)")
    connection_flags(p)
    p.set_defaults(handler=_status)
    _job_parser(subparsers)
    _exec_parser(subparsers)
    _events_parser(subparsers)
    _token_parser(subparsers)

