"""`cronwheel explain SCHEDULE [--since T] [--until T] [--json]`: why did (or didn't) it fire?

One line per tick the schedule's expression, zone and DST policy define in the window, with
what happened and why (ExplainSchedule), every page fetched. Default window: the last hour.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

from cronwheel.cli import Command
from cronwheel.cli_api_base import Api, api_command, connection_flags, dispatch, instant_arg
from cronwheel.cli_api_format import as_dict, table
from cronwheel.clock import SystemClock


@api_command
def _explain(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import common_pb2, scheduler_pb2

    until = args.until or SystemClock().now()
    since = args.since or until - timedelta(hours=1)
    ticks, notes, token = [], [], ""
    while True:
        req = scheduler_pb2.ExplainScheduleRequest(schedule_id=args.schedule, page_size=1000, page_token=token,
                                                   range=common_pb2.TimeRange())
        req.range.start_time.FromDatetime(since)
        req.range.end_time.FromDatetime(until)
        resp = api(api.scheduler.ExplainSchedule, req)
        ticks.extend(resp.ticks)
        notes.extend(resp.notes)
        token = resp.next_page_token
        if not token:
            break
    if args.json:
        print(json.dumps({"schedule_id": args.schedule, "since": since.isoformat(), "until": until.isoformat(),
                          "notes": notes, "ticks": [as_dict(t) for t in ticks]}, indent=2))
        return 0
    outcome = scheduler_pb2.TickOutcome.Name
    table(["TICK (UTC)", "OUTCOME", "EXECUTION", "WHY"],
          [[t.scheduled_for.ToJsonString(), outcome(t.outcome).removeprefix("TICK_OUTCOME_").lower(),
            t.execution_id or "-", t.reason] for t in ticks])
    for n in notes:
        print(f"note: {n}")
    print(f"({len(ticks)} ticks from {since.isoformat()} to {until.isoformat()})")
    return 0


def _configure_explain(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule id")
    p.add_argument("--since", type=instant_arg, default=None, help="window start, ISO 8601 (default: an hour ago)")
    p.add_argument("--until", type=instant_arg, default=None, help="window end, ISO 8601 (default: now)")
    connection_flags(p)
    p.set_defaults(func=_explain)


EXPLAIN = Command("explain", "why did or didn't a schedule fire: one line per tick in a window", _configure_explain,
                  dispatch)
