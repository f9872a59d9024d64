"""`cronwheel explain SCHEDULE [--since T] [--until T] [--json]`: why did (or didn't) it fire?

One line per tick the schedule's expression, zone and DST policy define in the window, with
what happened and why (Client.explain, every page). SCHEDULE is an id or a name. Default window:
the last hour, or since the schedule's creation when that is more recent (an hour of
not_yet_created lines would hide the ticks that matter).

`cronwheel explain EXECUTION_ID`: an id that names no schedule but an execution explains that
execution: its state and reason, and what it waits (or waited) for (issue 52: its upstreams,
each one's state and the outcome it resolved the wait with).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronwheel.cli.flags import client_for, connection_flags, instant_arg, resolve, schedule_ref
from cronwheel.cli.format import plain, print_upstreams, table
from cronwheel.clock import SystemClock

if TYPE_CHECKING:
    from cronwheel.client import Client


def _created(cw: Client, sid: str) -> datetime | None:
    """When the schedule was created (None: not known, e.g. deleted: explain still answers)."""
    from cronwheel.client.errors import NotFound

    try:
        return cw.get_schedule(sid).created_at
    except NotFound:
        return None


def _execution(cw: Client, ref: str) -> Any:
    """The execution `ref` names when it names no schedule (None: it names neither, or a schedule)."""
    from cronwheel.client.client import looks_like_uuid
    from cronwheel.client.errors import NotFound

    if not looks_like_uuid(ref):
        return None
    try:
        cw.get_schedule(ref)
        return None
    except NotFound:
        pass
    try:
        return cw.get_execution(ref)
    except NotFound:
        return None


def _explain_execution(args: argparse.Namespace, ex: Any) -> int:
    if args.json:
        print(json.dumps(plain(ex), indent=2))
        return 0
    why = f": {ex.state_reason}" if ex.state_reason else ""
    print(f"execution {ex.id} ({ex.type}) is {ex.state}{why}")
    if ex.upstreams:
        print_upstreams(ex)
    elif str(ex.state) == "waiting":
        print("it waits for upstreams that are no longer recorded")
    return 0


def _explain(args: argparse.Namespace) -> int:
    until = args.until or SystemClock().now()
    since = args.since or until - timedelta(hours=1)
    with client_for(args) as cw:
        if (ex := _execution(cw, args.schedule)) is not None:
            return _explain_execution(args, ex)
        sid = resolve(cw, args)
        if args.since is None:
            since = max(since, _created(cw, sid) or since)
        ex = cw.explain(sid, since, until)
    if args.json:
        print(json.dumps({"schedule_id": sid, "since": plain(since), "until": plain(until), "notes": list(ex.notes),
                          "ticks": plain(ex.ticks)}, indent=2))
        return 0
    table(["TICK (UTC)", "OUTCOME", "EXECUTION", "WHY"],
          [[plain(t.scheduled_for), str(t.outcome), t.execution_id or "-", t.reason] for t in ex.ticks])
    for n in ex.notes:
        print(f"note: {n}")
    print(f"({len(ex.ticks)} ticks from {plain(since)} to {plain(until)})")
    return 0


def add_parser(subparsers: Any) -> None:
    help_ = "why did or didn't a schedule fire: one line per tick in a window"
    p = subparsers.add_parser("explain", help=help_, description=help_)
    schedule_ref(p)
    p.add_argument("--since", type=instant_arg, default=None,
                   help="window start, ISO 8601 (default: an hour ago, or the schedule's creation if later)")
    p.add_argument("--until", type=instant_arg, default=None, help="window end, ISO 8601 (default: now)")
    connection_flags(p)
    p.set_defaults(handler=_explain)
