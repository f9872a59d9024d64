"""How the API subcommands print the Client's values: `--json` (`plain`: the dataclass fields,
numbers as numbers, times ISO 8601 UTC with Z, durations in seconds, enums as the flags' words,
payloads and results as JSON values) or readable tables and `key  value` details."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any


def plain(v: Any) -> Any:
    """A Client value as JSON-ready data."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(v, timedelta):
        s = v.total_seconds()
        return int(s) if s == int(s) else s
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    return v


def show(args: argparse.Namespace, value: Any, table: Callable[[], None]) -> int:
    if args.json:
        print(json.dumps(plain(value), indent=2))
    else:
        table()
    return 0


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v) if isinstance(v, dict | list) else str(v)


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in d.items():
        if k in ("payload", "result", "checkpoint", "data") and v not in (None, {}, ""):
            out.append((f"{prefix}{k}", json.dumps(v)))
        elif isinstance(v, dict):
            out.extend(_flat(v, f"{prefix}{k}."))
        elif k == "upstreams":
            continue  # a table of its own (print_upstreams)
        elif v not in ("", [], {}, None, False, 0) or k in ("paused", "version", "attempt"):
            out.append((f"{prefix}{k}", _text(v)))
    return out


def details(value: Any, **extra: Any) -> None:
    """One `key  value` line per set field."""
    rows = _flat(plain(value)) + [(k, _text(plain(v))) for k, v in extra.items()]
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for r in [headers, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def ts(v: datetime | None) -> str:
    return "-" if v is None else plain(v)  # type: ignore[no-any-return]


def footer(n: int, more: bool) -> None:
    print(f"({n} shown; more with --limit N or --all)" if more else f"({n} total)")


def print_schedules(items: Sequence[Any], more: bool) -> None:
    table(["ID", "TENANT", "NAME", "CRON", "TIMEZONE", "JOB TYPE", "STATE", "NEXT RUN", "VERSION"],
          [[s.id, s.tenant, s.name, s.cron, s.timezone, s.job_type, "paused" if s.paused else "active",
            ts(s.next_run_at), str(s.version)] for s in items])
    footer(len(items), more)


def print_executions(items: Sequence[Any], more: bool) -> None:
    table(["ID", "SCHEDULE", "TYPE", "STATE", "TRIGGER", "SCHEDULED FOR", "ATTEMPT"],
          [[e.id, e.schedule_id or "-", e.type, str(e.state), str(e.trigger), ts(e.scheduled_for),
            f"{e.attempt}/{e.max_attempts}"] for e in items])
    footer(len(items), more)


def print_upstreams(ex: Any) -> None:
    """What an execution waits (or waited) for: one row per upstream, with its state now and the
    outcome it resolved the wait with ("-": not finished yet)."""
    ups = getattr(ex, "upstreams", ())
    if not ups:
        return
    left = f", {ex.waiting_for} not finished" if str(ex.state) == "waiting" else ""
    print(f"\nwaits for {len(ups)} upstream(s) ({ex.dependency_policy}{left}):")
    table(["UPSTREAM", "KEY", "TYPE", "STATE", "OUTCOME"],
          [[u.execution_id, u.idempotency_key or "-", u.type or "-", str(u.state) if u.state else "pruned",
            str(u.outcome) if u.outcome else "-"] for u in ups])


def print_status(st: Any) -> None:
    owned = sum(1 for p in st.partitions if p.owner)
    handing = sum(1 for p in st.partitions if p.owner and p.fenced_epoch != p.epoch)
    print(f"cluster {st.cluster_name}: {len(st.members)} member(s), {owned}/{st.partition_count} partitions "
          f"owned, {handing} handing over (answered by {st.answered_by})")
    table(["NODE", "ADDRESS", "PARTITIONS", "WHEEL", "VERSION", "AUTH", "LEASE DEADLINE"],
          [[m.node_id, m.address, str(len(m.partitions)), str(m.wheel_size) if m.stats_at else "?",
            m.version or "?", m.auth_mode or "?", ts(m.lease_deadline)] for m in st.members])
    egress_line(st.members)
    print()
    table(["PRIORITY", "QUEUED", "OLDEST RUN AT"],
          [[str(q.priority), str(q.queued), ts(q.oldest_run_at)] for q in st.queue_depths])


def egress_line(members: Sequence[Any]) -> None:
    """Each node's egress allow list (--egress-allow): one line when they agree, a flag naming
    every member's list when they differ (members that did not answer are not compared)."""
    lists = {m.node_id: tuple(m.egress_allow) for m in members if m.stats_at}
    distinct = set(lists.values())
    if len(distinct) > 1:
        print("WARNING egress allow lists differ between members (--egress-allow): " + "; ".join(
            f"{node}: {', '.join(allowed) or '(none)'}" for node, allowed in sorted(lists.items())))
    elif distinct and (allowed := distinct.pop()):
        print(f"egress allowed on every member: {', '.join(allowed)}")


def log_line(line: Any) -> str:
    """`#attempt  time  LEVEL  [logger]  message`; a message's later lines indented under it."""
    who = f"{line.logger}: " if line.logger else ""
    text = line.message.replace("\n", "\n    ")
    return f"#{line.attempt}  {ts(line.at)}  {line.level:<7} {who}{text}"


def event_line(ev: Any) -> str:
    what = " ".join(f"{k}={v}" for k, v in (("schedule", ev.schedule_id), ("execution", ev.execution_id),
                                            ("tenant", ev.tenant), ("actor", ev.actor)) if v)
    data = f" {json.dumps(ev.data, separators=(',', ':'))}" if ev.data else ""
    return f"{ev.id}  {ts(ev.at)}  {'ALERT ' if ev.alert else ''}{ev.kind}  {what}{data}"
