"""`cronwheel schedule create|update|list|get|pause|resume|trigger|backfill|delete|preview`
(listed in `cronwheel.cli.commands()`; see cli_api for the common flags)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cronwheel.cli import Command
from cronwheel.cli_api_base import (
    DST_GAP,
    DST_REPEATED,
    MISFIRE,
    OVERLAP,
    PRIORITIES,
    Api,
    all_pages,
    api_command,
    dispatch,
    duration_arg,
    enum_arg,
    instant_arg,
    json_arg,
    leaf,
    subcommands,
)
from cronwheel.cli_api_format import details, print_schedules, show
from cronwheel.errors import InvalidArgument


def _schedule_fields(p: argparse.ArgumentParser, create: bool) -> None:
    p.add_argument("--name", required=create, help="unique per tenant, 1..200 characters")
    p.add_argument("--cron", required=create, help="5 or 6 fields, @hourly aliases, H fields")
    p.add_argument("--timezone", "--tz", dest="timezone", required=create, help="IANA zone, e.g. Europe/Berlin")
    p.add_argument("--job-type", required=create, help="the job type workers lease")
    p.add_argument("--misfire-policy", type=enum_arg(MISFIRE), required=create, help="skip | run_once | catch_up")
    p.add_argument("--payload", type=json_arg, help="JSON payload, or @file.json")
    p.add_argument("--priority", type=enum_arg(PRIORITIES), help="critical | default | bulk")
    p.add_argument("--overlap-policy", type=enum_arg(OVERLAP),
                   help="forbid | allow | replace | buffer_one | buffer_all")
    p.add_argument("--max-catch-up", type=int, help="catch_up: most missed ticks replayed (1..1000)")
    p.add_argument("--max-attempts", type=int, help="attempts per execution, the first included (1..1000)")
    p.add_argument("--jitter", type=duration_arg, help="spread each run within this window (<= 1h)")
    p.add_argument("--attempt-timeout", dest="job_timeout", type=duration_arg, help="per-attempt time limit (1s..7d)")
    p.add_argument("--dst-gap", type=enum_arg(DST_GAP), help="shift | skip")
    p.add_argument("--dst-repeated", type=enum_arg(DST_REPEATED), help="first | last | both")


def _fill_schedule(s: Any, args: argparse.Namespace) -> list[str]:
    """Set the fields given on the command line; returns their update_mask paths."""
    from google.protobuf.duration_pb2 import Duration

    paths = []
    for flag, path in (("name", "name"), ("cron", "cron"), ("timezone", "timezone"), ("job_type", "job_type"),
                       ("misfire_policy", "misfire_policy"), ("payload", "payload_json"), ("priority", "priority"),
                       ("overlap_policy", "overlap_policy"), ("max_catch_up", "max_catch_up")):
        v = getattr(args, flag)
        if v is not None:
            setattr(s, path, v)
            paths.append(path)
    for flag, path in (("jitter", "jitter"), ("job_timeout", "timeout")):
        if getattr(args, flag) is not None:
            d = Duration()
            d.FromMicroseconds(round(getattr(args, flag) * 1e6))
            getattr(s, path).CopyFrom(d)
            paths.append(path)
    if args.max_attempts is not None:
        s.retry_policy.max_attempts = args.max_attempts
        paths.append("retry_policy.max_attempts")
    if args.dst_gap is not None:
        s.dst_policy.gap = args.dst_gap
        paths.append("dst_policy.gap")
    if args.dst_repeated is not None:
        s.dst_policy.repeated_hour = args.dst_repeated
        paths.append("dst_policy.repeated_hour")
    return paths


@api_command
def _schedule_create(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import common_pb2, scheduler_pb2

    s = common_pb2.Schedule(id=args.id, tenant=args.tenant, paused=args.paused)
    _fill_schedule(s, args)
    resp = api(api.scheduler.CreateSchedule, scheduler_pb2.CreateScheduleRequest(schedule=s))
    return show(args, resp, lambda: details(resp.schedule))


@api_command
def _schedule_update(api: Api, args: argparse.Namespace) -> int:
    from google.protobuf.field_mask_pb2 import FieldMask

    from cronwheel.v1 import common_pb2, scheduler_pb2

    s = common_pb2.Schedule(id=args.schedule_id)
    paths = _fill_schedule(s, args)
    if not paths:
        raise InvalidArgument("update", "name at least one field to change, e.g. --cron")
    resp = api(api.scheduler.UpdateSchedule, scheduler_pb2.UpdateScheduleRequest(
        schedule=s, update_mask=FieldMask(paths=paths), expected_version=args.expected_version))
    return show(args, resp, lambda: details(resp.schedule))


@api_command
def _schedule_list(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    req = scheduler_pb2.ListSchedulesRequest(tenant=args.tenant, job_type=args.job_type, page_size=args.page_size,
                                             page_token=args.page_token)
    if args.paused is not None:
        req.paused = args.paused
    resp = all_pages(api, api.scheduler.ListSchedules, req, "schedules", args.all)
    return show(args, resp, lambda: print_schedules(resp))


@api_command
def _schedule_get(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    resp = api(api.scheduler.GetSchedule, scheduler_pb2.GetScheduleRequest(schedule_id=args.schedule_id))
    return show(args, resp, lambda: details(resp.schedule))


def _pause_resume(paused: bool) -> Callable[[argparse.Namespace], int]:
    @api_command
    def run(api: Api, args: argparse.Namespace) -> int:
        from cronwheel.v1 import scheduler_pb2

        if paused:
            resp = api(api.scheduler.PauseSchedule, scheduler_pb2.PauseScheduleRequest(
                schedule_id=args.schedule_id, reason=args.reason, expected_version=args.expected_version))
        else:
            resp = api(api.scheduler.ResumeSchedule, scheduler_pb2.ResumeScheduleRequest(
                schedule_id=args.schedule_id, reason=args.reason, expected_version=args.expected_version))
        return show(args, resp, lambda: details(resp.schedule))

    return run


@api_command
def _schedule_trigger(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    resp = api(api.scheduler.TriggerSchedule, scheduler_pb2.TriggerScheduleRequest(
        schedule_id=args.schedule_id, payload_json=args.payload or "", idempotency_key=args.idempotency_key,
        reason=args.reason, overlap_policy=args.overlap_policy or 0))
    return show(args, resp, lambda: details(resp.execution, deduplicated=resp.deduplicated))


@api_command
def _schedule_backfill(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import common_pb2, scheduler_pb2

    rng = common_pb2.TimeRange()
    rng.start_time.FromDatetime(args.start)
    rng.end_time.FromDatetime(args.end)
    resp = api(api.scheduler.BackfillSchedule, scheduler_pb2.BackfillScheduleRequest(
        schedule_id=args.schedule_id, range=rng, reason=args.reason))
    return show(args, resp, lambda: print(f"created {resp.created_count} execution(s); "
                                          f"{resp.existing_count} tick(s) already had one"))


@api_command
def _schedule_delete(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    resp = api(api.scheduler.DeleteSchedule, scheduler_pb2.DeleteScheduleRequest(
        schedule_id=args.schedule_id, expected_version=args.expected_version, cancel_pending=args.cancel_pending,
        reason=args.reason))
    return show(args, resp, lambda: print(f"deleted {args.schedule_id}; {resp.cancelled_count} execution(s) "
                                          f"cancelled"))


@api_command
def _schedule_preview(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import common_pb2, scheduler_pb2

    req = scheduler_pb2.PreviewScheduleRequest(count=args.count)
    if args.schedule_id:
        req.schedule_id = args.schedule_id
    else:
        if not args.cron or not args.timezone:
            raise InvalidArgument("preview", "give a schedule id, or --cron and --timezone")
        req.spec.CopyFrom(scheduler_pb2.ScheduleSpec(
            cron=args.cron, timezone=args.timezone, schedule_id=args.id,
            dst_policy=common_pb2.DstPolicy(gap=args.dst_gap or 0, repeated_hour=args.dst_repeated or 0)))
    if args.after is not None:
        req.start_time.FromDatetime(args.after)
    resp = api(api.scheduler.PreviewSchedule, req)

    def table() -> None:
        for t in resp.ticks:
            print(t.scheduled_for.ToJsonString(), t.local_time, t.note)

    return show(args, resp, table)


def _configure_schedule(p: argparse.ArgumentParser) -> None:
    sub = subcommands(p, "action")
    c = leaf(sub, "create", "create a schedule", _schedule_create)
    _schedule_fields(c, create=True)
    c.add_argument("--tenant", default="", help="owning tenant (admin tokens; tenant tokens: their own)")
    c.add_argument("--id", default="", help="client-chosen UUID (default: server-assigned)")
    c.add_argument("--paused", action="store_true", help="create it paused")
    u = leaf(sub, "update", "change the fields given (others unchanged)", _schedule_update)
    u.add_argument("schedule_id")
    _schedule_fields(u, create=False)
    u.add_argument("--expected-version", type=int, default=0, help="refuse unless at this version")
    ls = leaf(sub, "list", "list schedules", _schedule_list)
    ls.add_argument("--tenant", default="")
    ls.add_argument("--job-type", default="")
    state = ls.add_mutually_exclusive_group()
    state.add_argument("--paused", dest="paused", action="store_const", const=True, default=None)
    state.add_argument("--active", dest="paused", action="store_const", const=False)
    ls.add_argument("--page-size", type=int, default=100)
    ls.add_argument("--page-token", default="")
    ls.add_argument("--all", action="store_true", help="follow every page")
    leaf(sub, "get", "show one schedule", _schedule_get).add_argument("schedule_id")
    for name, paused in (("pause", True), ("resume", False)):
        pr = leaf(sub, name, f"{name} a schedule", _pause_resume(paused))
        pr.add_argument("schedule_id")
        pr.add_argument("--reason", default="")
        pr.add_argument("--expected-version", type=int, default=0)
    t = leaf(sub, "trigger", "run a schedule now (a manual execution)", _schedule_trigger)
    t.add_argument("schedule_id")
    t.add_argument("--payload", type=json_arg, help="payload of this run only (JSON or @file)")
    t.add_argument("--overlap-policy", type=enum_arg(OVERLAP), help="override the overlap policy for this run")
    t.add_argument("--idempotency-key", default="")
    t.add_argument("--reason", default="")
    b = leaf(sub, "backfill", "run the ticks of a past range that have no execution", _schedule_backfill)
    b.add_argument("schedule_id")
    b.add_argument("--start", type=instant_arg, required=True, help="first tick (inclusive), ISO 8601")
    b.add_argument("--end", type=instant_arg, required=True, help="end (exclusive), ISO 8601, not in the future")
    b.add_argument("--reason", default="")
    d = leaf(sub, "delete", "delete a schedule", _schedule_delete)
    d.add_argument("schedule_id")
    d.add_argument("--cancel-pending", action="store_true", help="also cancel its unfinished executions")
    d.add_argument("--expected-version", type=int, default=0)
    d.add_argument("--reason", default="")
    pv = leaf(sub, "preview", "next fire times of a schedule, or of --cron/--timezone", _schedule_preview)
    pv.add_argument("schedule_id", nargs="?", default="")
    pv.add_argument("--cron")
    pv.add_argument("--timezone", "--tz", dest="timezone")
    pv.add_argument("--id", default="", help="the UUID seeding H fields (unsaved spec)")
    pv.add_argument("--dst-gap", type=enum_arg(DST_GAP))
    pv.add_argument("--dst-repeated", type=enum_arg(DST_REPEATED))
    pv.add_argument("--count", type=int, default=10)
    pv.add_argument("--after", type=instant_arg, help="ticks strictly after this time (default now)")


SCHEDULE = Command("schedule", "manage schedules: create, update, list, get, pause, resume, trigger, backfill, "
                   "delete, preview", _configure_schedule, dispatch)
