"""The API subcommands of `cronwheel` (listed in `cronwheel.cli.commands()`): talk gRPC to a node.

    cronwheel status
    cronwheel schedule create|update|list|get|pause|resume|trigger|backfill|delete|preview
    cronwheel job submit
    cronwheel exec list|get|retry|cancel
    cronwheel token new           (make a bearer token and its auth-file entry; no server)

Every command takes `--address` ($CRONWHEEL_ADDRESS, default 127.0.0.1:7070), `--token`
($CRONWHEEL_TOKEN), `--tls-ca FILE` (TLS, trusting that CA), `--timeout SECONDS` and `--json`
(the response as proto3 JSON with field names as in the .proto; otherwise a readable table).
Exit codes (see cronwheel.cli): INVALID_ARGUMENT -> 2; UNAVAILABLE and DEADLINE_EXCEEDED (the
node is unreachable or too slow) -> 3; any other refusal -> 1; the message is one line.

Layout: this module (status, job, exec, token), cli_api_schedule (schedule), cli_api_base
(flags, channel, error mapping), cli_api_format (tables and JSON).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cronwheel.cli import Command
from cronwheel.cli_api_base import (
    PRIORITIES,
    STATES,
    Api,
    all_pages,
    api_command,
    connection_flags,
    dispatch,
    duration_arg,
    enum_arg,
    instant_arg,
    json_arg,
    leaf,
    subcommands,
)
from cronwheel.cli_api_format import details, print_executions, print_status, show
from cronwheel.errors import InvalidArgument

# ---------------------------------------------------------------------------------- status


@api_command
def _status(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import admin_pb2

    resp = api(api.admin.ClusterStatus, admin_pb2.ClusterStatusRequest())
    return show(args, resp, lambda: print_status(resp))


def _configure_status(p: argparse.ArgumentParser) -> None:
    connection_flags(p)
    p.set_defaults(func=_status)


STATUS = Command("status", "show the cluster: members, partition owners and epochs, queue depths (admin)",
                 _configure_status, dispatch)


# ---------------------------------------------------------------------------------- jobs and executions


@api_command
def _job_submit(api: Api, args: argparse.Namespace) -> int:
    from google.protobuf.duration_pb2 import Duration

    from cronwheel.v1 import common_pb2, scheduler_pb2

    req = scheduler_pb2.SubmitJobRequest(tenant=args.tenant, type=args.type, payload_json=args.payload or "",
                                         priority=args.priority or 0, idempotency_key=args.idempotency_key)
    if args.run_at is not None:
        req.run_at.FromDatetime(args.run_at)
    if args.max_attempts is not None:
        req.retry_policy.CopyFrom(common_pb2.RetryPolicy(max_attempts=args.max_attempts))
    if args.job_timeout is not None:
        d = Duration()
        d.FromMicroseconds(round(args.job_timeout * 1e6))
        req.timeout.CopyFrom(d)
    resp = api(api.scheduler.SubmitJob, req)
    return show(args, resp, lambda: details(resp.execution, deduplicated=resp.deduplicated))


def _configure_job(p: argparse.ArgumentParser) -> None:
    sub = subcommands(p, "action")
    s = leaf(sub, "submit", "submit a one-off job, now or at --run-at", _job_submit)
    s.add_argument("--type", required=True, help="the job type workers lease")
    s.add_argument("--payload", type=json_arg, help="JSON payload, or @file.json")
    s.add_argument("--run-at", type=instant_arg, help="when to run (ISO 8601; default now)")
    s.add_argument("--priority", type=enum_arg(PRIORITIES), help="critical | default | bulk")
    s.add_argument("--idempotency-key", default="", help="submit once per key")
    s.add_argument("--tenant", default="")
    s.add_argument("--max-attempts", type=int)
    s.add_argument("--attempt-timeout", dest="job_timeout", type=duration_arg, help="per-attempt time limit (1s..7d)")


JOB = Command("job", "one-off jobs: submit", _configure_job, dispatch)


@api_command
def _exec_list(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    req = scheduler_pb2.ListExecutionsRequest(tenant=args.tenant, schedule_id=args.schedule, type=args.type,
                                              states=args.state or [], page_size=args.page_size,
                                              page_token=args.page_token)
    resp = all_pages(api, api.scheduler.ListExecutions, req, "executions", args.all)
    return show(args, resp, lambda: print_executions(resp))


@api_command
def _exec_get(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    resp = api(api.scheduler.GetExecution, scheduler_pb2.GetExecutionRequest(execution_id=args.execution_id))
    return show(args, resp, lambda: details(resp.execution))


@api_command
def _exec_retry(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    req = scheduler_pb2.RetryExecutionRequest(execution_id=args.execution_id, additional_attempts=args.attempts,
                                              reason=args.reason)
    if args.run_at is not None:
        req.run_at.FromDatetime(args.run_at)
    resp = api(api.scheduler.RetryExecution, req)
    return show(args, resp, lambda: details(resp.execution))


@api_command
def _exec_cancel(api: Api, args: argparse.Namespace) -> int:
    from cronwheel.v1 import scheduler_pb2

    resp = api(api.scheduler.CancelExecution, scheduler_pb2.CancelExecutionRequest(
        execution_id=args.execution_id, reason=args.reason))
    return show(args, resp, lambda: details(resp.execution))


def _configure_exec(p: argparse.ArgumentParser) -> None:
    sub = subcommands(p, "action")
    ls = leaf(sub, "list", "list executions, newest first", _exec_list)
    ls.add_argument("--schedule", default="", help="only this schedule's")
    ls.add_argument("--state", action="append", type=enum_arg(STATES), help="only these states (repeatable)")
    ls.add_argument("--type", default="")
    ls.add_argument("--tenant", default="")
    ls.add_argument("--page-size", type=int, default=100)
    ls.add_argument("--page-token", default="")
    ls.add_argument("--all", action="store_true", help="follow every page")
    leaf(sub, "get", "show one execution", _exec_get).add_argument("execution_id")
    r = leaf(sub, "retry", "bring a dead, cancelled or skipped execution back", _exec_retry)
    r.add_argument("execution_id")
    r.add_argument("--attempts", type=int, default=1, help="more attempts to allow (default 1)")
    r.add_argument("--run-at", type=instant_arg, help="when (default now)")
    r.add_argument("--reason", default="")
    c = leaf(sub, "cancel", "cancel an execution (a running one is asked to stop)", _exec_cancel)
    c.add_argument("execution_id")
    c.add_argument("--reason", default="")


EXEC = Command("exec", "executions: list, get, retry, cancel", _configure_exec, dispatch)


# ---------------------------------------------------------------------------------- tokens


def _token_new(args: argparse.Namespace) -> int:
    import hashlib
    import secrets

    if not args.admin and not args.tenant:
        raise InvalidArgument("--tenant", "give --tenant NAME or --admin")
    token = "cw_" + secrets.token_urlsafe(32)
    entry: dict[str, Any] = {"name": args.name or (args.tenant or "admin"),
                             "sha256": hashlib.sha256(token.encode()).hexdigest()}
    if args.tenant:
        entry["tenant"] = args.tenant
    if args.admin:
        entry["admin"] = True
    if args.json:
        print(json.dumps({"token": token, "entry": entry}))
    else:
        print(f"token (give it to the client; it is not stored): {token}")
        print(f"auth-file entry (add to \"tokens\"): {json.dumps(entry)}")
    return 0


def _configure_token(p: argparse.ArgumentParser) -> None:
    sub = subcommands(p, "action")
    n = sub.add_parser("new", help="make a random token and print its auth-file entry")
    n.add_argument("--tenant", default="", help="the tenant the token acts for")
    n.add_argument("--admin", action="store_true", help="an admin token")
    n.add_argument("--name", default="", help="actor name recorded in audit events")
    n.add_argument("--json", action="store_true")
    n.set_defaults(func=_token_new)


TOKEN = Command("token", "bearer tokens for --auth-file: new", _configure_token, dispatch)
