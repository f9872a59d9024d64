"""`cronwheel schedule create|update|list|get|pause|resume|trigger|backfill|delete|preview`: each a
call of cronwheel.client.Client (see cli.flags for the common flags). A SCHEDULE argument is
an id or a name (with an admin token that sees several tenants, --tenant says whose)."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from typing import Any

from cronwheel.cli.flags import (
    DST_GAP,
    DST_REPEATED,
    MISFIRE,
    OVERLAP,
    PRIORITIES,
    client_for,
    count_arg,
    duration_arg,
    instant_arg,
    json_arg,
    leaf,
    number_arg,
    positive_arg,
    resolve,
    schedule_ref,
    subcommands,
)
from cronwheel.cli.format import details, plain, print_schedules, show
from cronwheel.errors import InvalidArgument

# flag dest -> the Client's keyword (update_schedule: policy fields one by one, the rest unchanged)
_SIMPLE = ("name", "cron", "timezone", "job_type", "misfire_policy", "payload", "priority", "overlap_policy",
           "max_catch_up", "jitter", "attempt_timeout", "alert_if_no_success_within", "keep_last",
           "keep_succeeded_for", "keep_failed_for", "target", "queue", "required_capabilities")
_RETRY = {"max_attempts": "max_attempts", "backoff_initial": "initial_backoff",
          "backoff_multiplier": "backoff_multiplier", "backoff_max": "max_backoff"}
_DST = {"dst_gap": "dst_gap", "dst_repeated": "dst_repeated_hour"}


def _schedule_fields(p: argparse.ArgumentParser, create: bool) -> None:
    p.add_argument("--name", required=create, help="unique per tenant, 1..200 characters")
    p.add_argument("--cron", help="5 or 6 fields, @hourly aliases, H fields (required unless --parent)")
    p.add_argument("--timezone", "--tz", dest="timezone",
                   help="IANA zone, e.g. Europe/Berlin (required unless --parent)")
    p.add_argument("--job-type", help="the job type workers lease (required unless --target)")
    p.add_argument("--target", type=json_arg, metavar="JSON",
                   help="an HTTP target instead of a job type (docs/http-targets.md): JSON or @file.json, e.g. "
                        '\'{"url": "https://svc.internal/run", "headers": {"Authorization": {"secret": "tok"}}}\'')
    p.add_argument("--misfire-policy", choices=MISFIRE, help=" | ".join(MISFIRE) + " (required unless --parent)")
    p.add_argument("--payload", type=json_arg, help="JSON payload, or @file.json")
    p.add_argument("--priority", choices=PRIORITIES, help=" | ".join(PRIORITIES))
    p.add_argument("--overlap-policy", choices=OVERLAP, help=" | ".join(OVERLAP))
    p.add_argument("--max-catch-up", type=count_arg, help="catch_up: most missed ticks replayed (1..1000)")
    p.add_argument("--max-attempts", type=count_arg, help="attempts per execution, the first included (1..1000)")
    p.add_argument("--backoff-initial", type=duration_arg, metavar="DURATION",
                   help="delay before the first retry (0..24h; default 30s)")
    p.add_argument("--backoff-multiplier", type=number_arg, metavar="FACTOR",
                   help="delay factor after each further failure (1..100; default 4)")
    p.add_argument("--backoff-max", type=duration_arg, metavar="DURATION",
                   help="longest delay between attempts (default 6h)")
    p.add_argument("--jitter", type=duration_arg, help="spread each run within this window (<= 1h)")
    p.add_argument("--attempt-timeout", type=duration_arg, metavar="DURATION",
                   help="the job's per-attempt time limit (1s..7d; default none)")
    p.add_argument("--alert-if-no-success-within", type=duration_arg, metavar="DURATION",
                   help="dead man's switch: raise an alert when no run succeeded for this long")
    p.add_argument("--keep-last", type=count_arg, metavar="N",
                   help="retention: keep at most the last N finished runs (default: no count limit)")
    p.add_argument("--keep-succeeded-for", type=duration_arg, metavar="DURATION",
                   help="retention: keep succeeded/skipped/cancelled runs this long (default: the cluster's, 7d)")
    p.add_argument("--keep-failed-for", type=duration_arg, metavar="DURATION",
                   help="retention: keep failed/dead runs this long (default: the cluster's, 30d)")
    p.add_argument("--queue", help="the queue its runs wait in (default: default)")
    p.add_argument("--requires", dest="required_capabilities", action="append", metavar="KEY=VALUE",
                   help="a capability the workers of its runs must advertise (repeat): --requires gpu=a100")
    p.add_argument("--dst-gap", choices=DST_GAP, help=" | ".join(DST_GAP))
    p.add_argument("--dst-repeated", choices=DST_REPEATED, help=" | ".join(DST_REPEATED))


def _given(args: argparse.Namespace, names: Any) -> dict[str, Any]:
    return {k: getattr(args, k) for k in names if getattr(args, k) is not None}


def _schedule_create(args: argparse.Namespace) -> int:
    from cronwheel.client import DstPolicy, RetryPolicy

    kw = _given(args, _SIMPLE)
    if not args.parent:  # a child schedule (--parent) has no timing of its own
        for flag in ("cron", "timezone", "misfire_policy"):
            if kw.get(flag) is None:
                raise InvalidArgument(f"--{flag.replace('_', '-')}", "is required (unless --parent)")
    retry = {_RETRY[k]: v for k, v in _given(args, _RETRY).items()}
    dst = _given(args, _DST)
    with client_for(args) as cw:
        parent = resolve(cw, args, args.parent) if args.parent else None
        kw.setdefault("timezone", "")
        kw.setdefault("misfire_policy", None)
        s = cw.create_schedule(
            kw.pop("name"), kw.pop("cron", ""), kw.pop("job_type", ""), **kw, tenant=args.tenant or None,
            id=args.id or None, paused=args.paused, retry_policy=RetryPolicy(**retry) if retry else None,
            dst_policy=DstPolicy(gap=dst.get("dst_gap"), repeated_hour=dst.get("dst_repeated")) if dst else None,
            parent_schedule_id=parent)
    return show(args, s, lambda: details(s))


def _schedule_update(args: argparse.Namespace) -> int:
    changes = _given(args, _SIMPLE) | {_RETRY[k]: v for k, v in _given(args, _RETRY).items()} | {
        _DST[k]: v for k, v in _given(args, _DST).items()}
    if not changes:
        raise InvalidArgument("update", "name at least one field to change, e.g. --cron")
    with client_for(args) as cw:
        s = cw.update_schedule(resolve(cw, args), expected_version=args.expected_version, **changes)
    return show(args, s, lambda: details(s))


def _schedule_list(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        it = cw.list_schedules(tenant=args.tenant or None, job_type=args.job_type or None, paused=args.paused,
                               page_size=min(max(args.limit, 1), 1000) if not args.all else 1000)
        items = list(it if args.all else itertools.islice(it, args.limit + 1))
    more = not args.all and len(items) > args.limit
    items = items[:args.limit] if more else items
    return show(args, items, lambda: print_schedules(items, more))


def _schedule_get(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        s = cw.get_schedule(args.schedule, tenant=args.tenant or None)
    return show(args, s, lambda: details(s))


def _pause_resume(paused: bool) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with client_for(args) as cw:
            call = cw.pause if paused else cw.resume
            s = call(resolve(cw, args), reason=args.reason, expected_version=args.expected_version)
        return show(args, s, lambda: details(s))

    return run


def _schedule_trigger(args: argparse.Namespace) -> int:
    kw: dict[str, Any] = {} if args.payload is None else {"payload": args.payload}
    with client_for(args) as cw:
        ex = cw.trigger(resolve(cw, args), overlap_policy=args.overlap_policy,
                        idempotency_key=args.idempotency_key or None, reason=args.reason, **kw)
    return show(args, ex, lambda: details(ex))


def _schedule_backfill(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        b = cw.backfill(resolve(cw, args), args.start, args.end, reason=args.reason)
    return show(args, b, lambda: print(f"created {b.created_count} execution(s); "
                                       f"{b.existing_count} tick(s) already had one"))


def _schedule_delete(args: argparse.Namespace) -> int:
    with client_for(args) as cw:
        sid = resolve(cw, args)
        n = cw.delete(sid, expected_version=args.expected_version, cancel_pending=args.cancel_pending,
                      reason=args.reason)
    out = {"id": sid, "cancelled_count": n}
    return show(args, out, lambda: print(f"deleted {sid}; {n} execution(s) cancelled"))


def _schedule_preview(args: argparse.Namespace) -> int:
    from cronwheel.client import DstPolicy

    with client_for(args) as cw:
        if args.schedule:
            if args.cron or args.timezone:
                raise InvalidArgument("SCHEDULE", "give a schedule, or --cron and --timezone, not both")
            ticks = cw.preview(resolve(cw, args), count=args.count, after=args.after)
        else:
            if not args.cron or not args.timezone:
                raise InvalidArgument("SCHEDULE", "give a schedule id or name, or --cron and --timezone")
            dst = DstPolicy(gap=args.dst_gap, repeated_hour=args.dst_repeated)
            ticks = cw.preview(cron=args.cron, timezone=args.timezone, dst_policy=dst, seed_id=args.id or None,
                               count=args.count, after=args.after)

    def lines() -> None:
        for t in ticks:
            print(plain(t.scheduled_for), t.local_time, t.note)

    return show(args, ticks, lines)


def _ref_leaf(sub: Any, name: str, help_: str, handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    p = leaf(sub, name, help_, handler)
    schedule_ref(p)
    return p


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("schedule", help="manage schedules: create, update, list, get, pause, resume, "
                                               "trigger, backfill, delete, preview")
    sub = subcommands(p, "action")
    c = leaf(sub, "create", "create a schedule", _schedule_create)
    _schedule_fields(c, create=True)
    c.add_argument("--tenant", default="", help="owning tenant (admin tokens; tenant tokens: their own)")
    c.add_argument("--id", default="", help="client-chosen UUID (default: server-assigned)")
    c.add_argument("--paused", action="store_true", help="create it paused")
    c.add_argument("--parent", default="", metavar="SCHEDULE",
                   help="a child schedule: no cron of its own, it runs once per successful run of this schedule "
                        "(id or name), with that run's scheduled time")
    u = _ref_leaf(sub, "update", "change the fields given (others unchanged)", _schedule_update)
    _schedule_fields(u, create=False)
    u.add_argument("--expected-version", type=count_arg, default=0, help="refuse unless at this version")
    ls = leaf(sub, "list", "list schedules", _schedule_list)
    ls.add_argument("--tenant", default="")
    ls.add_argument("--job-type", default="")
    state = ls.add_mutually_exclusive_group()
    state.add_argument("--paused", dest="paused", action="store_const", const=True, default=None)
    state.add_argument("--active", dest="paused", action="store_const", const=False)
    ls.add_argument("--limit", type=positive_arg, default=100, help="show at most this many (default 100)")
    ls.add_argument("--all", action="store_true", help="show every one (follows every page)")
    _ref_leaf(sub, "get", "show one schedule", _schedule_get)
    for name, paused in (("pause", True), ("resume", False)):
        pr = _ref_leaf(sub, name, f"{name} a schedule", _pause_resume(paused))
        pr.add_argument("--reason", default="")
        pr.add_argument("--expected-version", type=count_arg, default=0)
    t = _ref_leaf(sub, "trigger", "run a schedule now (a manual execution)", _schedule_trigger)
    t.add_argument("--payload", type=json_arg, help="payload of this run only (JSON or @file)")
    t.add_argument("--overlap-policy", choices=OVERLAP, help="override the overlap policy for this run")
    t.add_argument("--idempotency-key", default="")
    t.add_argument("--reason", default="")
    b = _ref_leaf(sub, "backfill", "run the ticks of a past range that have no execution", _schedule_backfill)
    b.add_argument("--start", type=instant_arg, required=True, help="first tick (inclusive), ISO 8601")
    b.add_argument("--end", type=instant_arg, required=True, help="end (exclusive), ISO 8601, not in the future")
    b.add_argument("--reason", default="")
    d = _ref_leaf(sub, "delete", "delete a schedule", _schedule_delete)
    d.add_argument("--cancel-pending", action="store_true", help="also cancel its unfinished executions")
    d.add_argument("--expected-version", type=count_arg, default=0)
    d.add_argument("--reason", default="")
    pv = leaf(sub, "preview", "next fire times of a schedule, or of --cron/--timezone", _schedule_preview)
    schedule_ref(pv, nargs="?")
    pv.add_argument("--cron")
    pv.add_argument("--timezone", "--tz", dest="timezone")
    pv.add_argument("--id", default="", help="the UUID seeding H fields (unsaved spec)")
    pv.add_argument("--dst-gap", choices=DST_GAP)
    pv.add_argument("--dst-repeated", choices=DST_REPEATED)
    pv.add_argument("--count", type=positive_arg, default=10)
    pv.add_argument("--after", type=instant_arg, help="ticks strictly after this time (default now)")
