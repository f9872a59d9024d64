"""How the API subcommands print responses: `--json` (proto3 JSON, field names as in the
.proto, every field) or readable tables and `key: value` details."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

_ENUM_PREFIXES = ("EXECUTION_STATE_", "PRIORITY_", "MISFIRE_POLICY_", "OVERLAP_POLICY_", "DST_GAP_POLICY_",
                  "DST_REPEATED_POLICY_", "TRIGGER_")


def as_dict(msg: Message) -> dict[str, Any]:
    return MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def show(args: argparse.Namespace, resp: Message, table: Callable[[], None]) -> int:
    if args.json:
        print(json.dumps(as_dict(resp), indent=2))
    else:
        table()
    return 0


def _short(v: Any) -> str:
    if isinstance(v, str):
        for p in _ENUM_PREFIXES:
            if v.startswith(p):
                return v[len(p):].lower()
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.extend(_flat(v, f"{prefix}{k}."))
        elif v not in ("", [], {}, None):
            out.append((f"{prefix}{k}", _short(v)))
    return out


def details(msg: Message, **extra: Any) -> None:
    """One `key: value` line per set field."""
    rows = _flat(MessageToDict(msg, preserving_proto_field_name=True)) + [(k, _short(v)) for k, v in extra.items()]
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for r in [headers, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _ts(msg: Any, name: str) -> str:
    return getattr(msg, name).ToJsonString() if msg.HasField(name) else "-"


def _enum(msg: Any, name: str) -> str:
    field = msg.DESCRIPTOR.fields_by_name[name]
    return _short(field.enum_type.values_by_number[getattr(msg, name)].name)


def _footer(token: str, n: int) -> None:
    print(f"({n} shown; more with --page-token {token} or --all)" if token else f"({n} total)")


def print_schedules(resp: Any) -> None:
    table(["ID", "TENANT", "NAME", "CRON", "TIMEZONE", "JOB TYPE", "STATE", "NEXT RUN", "VERSION"],
          [[s.id, s.tenant, s.name, s.cron, s.timezone, s.job_type, "paused" if s.paused else "active",
            _ts(s, "next_run_at"), str(s.version)] for s in resp.schedules])
    _footer(resp.next_page_token, len(resp.schedules))


def print_executions(resp: Any) -> None:
    table(["ID", "SCHEDULE", "TYPE", "STATE", "TRIGGER", "SCHEDULED FOR", "ATTEMPT"],
          [[e.id, e.schedule_id or "-", e.type, _enum(e, "state"), _enum(e, "trigger"), _ts(e, "scheduled_for"),
            f"{e.attempt}/{e.max_attempts}"] for e in resp.executions])
    _footer(resp.next_page_token, len(resp.executions))


def print_status(resp: Any) -> None:
    owned = sum(1 for p in resp.partitions if p.owner)
    fenced_behind = sum(1 for p in resp.partitions if p.owner and p.fenced_epoch != p.epoch)
    print(f"cluster {resp.cluster_name}: {len(resp.members)} member(s), {owned}/{resp.partition_count} partitions "
          f"owned, {fenced_behind} handing over (answered by {resp.answered_by})")
    table(["NODE", "ADDRESS", "PARTITIONS", "WHEEL", "VERSION", "LEASE DEADLINE"],
          [[m.node_id, m.address, str(len(m.partitions)), str(m.wheel_size) if m.HasField("stats_at") else "?",
            m.version or "?", _ts(m, "lease_deadline")] for m in resp.members])
    print()
    table(["PRIORITY", "QUEUED", "OLDEST RUN AT"],
          [[_enum(q, "priority"), str(q.queued), _ts(q, "oldest_run_at")] for q in resp.queue_depths])
