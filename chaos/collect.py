"""The thin collector: reads a finished run's history out of PostgreSQL, the node and worker logs
and the workers' JSONL into a `History` (all judging is in `chaos.checker`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from chaos.checker import LEASE_LAPSE_EVENTS
from chaos.history import (
    EventRec,
    ExecutionRec,
    HealthSample,
    History,
    InjectionRecord,
    LogEventRec,
    OwnershipRec,
    RunMeta,
    RunRec,
    ScheduleRec,
    SubmittedJob,
    TenantLimitRec,
    run_from_json,
)

# Log events worth keeping: refusals the checker counts, and context for a failing run's report.
KEPT_EVENTS = frozenset({"stale_epoch", "report_refused", "partition_lost", "epoch_refused", "node_crashed",
                         "reap_row_failed", "reap_failed", "listen_reconnect"}) | LEASE_LAPSE_EVENTS


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def read_db(dsn: str, partitions_table: str = "partitions") -> dict[str, Any]:
    """Schedules, executions, ownership history (with commit times when tracked), the fence now,
    and the alert events, as plain records."""
    with psycopg.connect(dsn, autocommit=True) as c:
        track = c.execute("SHOW track_commit_timestamp").fetchone()
        commit_ts = bool(track and track[0] == "on")
        committed = "extract(epoch FROM pg_xact_commit_timestamp(xmin))" if commit_ts else "NULL"
        schedules = tuple(ScheduleRec(
            id=r[0], name=r[1], cron=r[2], timezone=r[3], misfire_policy=r[4], max_catch_up=r[5],
            overlap_policy=r[6], created_at=float(r[7]), partition=r[8], dst_gap=r[9], dst_repeated=r[10],
            jitter_s=float(r[11]), next_run_at=_f(r[12]), last_scheduled_for=_f(r[13]), tenant=r[14],
            deleted_at=_f(r[15]), keep_last=r[16], keep_succeeded_for_s=_f(r[17]), paused=bool(r[18]),
        ) for r in c.execute(
            "SELECT s.id::text, s.name, s.cron, s.timezone, s.misfire_policy, s.max_catch_up, s.overlap_policy,"
            " extract(epoch FROM s.created_at), s.partition, s.dst_gap, s.dst_repeated, s.jitter_s,"
            " extract(epoch FROM d.next_run_at), extract(epoch FROM d.last_scheduled_for), s.tenant,"
            " extract(epoch FROM s.deleted_at), s.keep_last, s.keep_succeeded_for_s, s.paused"
            " FROM schedules s LEFT JOIN schedule_due d ON d.schedule_id = s.id"
            " ORDER BY s.created_at"))
        executions = tuple(ExecutionRec(
            id=r[0], schedule_id=r[1], partition=r[2], type=r[3], scheduled_for=float(r[4]), run_at=float(r[5]),
            state=r[6], trigger=r[7], state_reason=r[8], attempt=r[9], fencing_token=int(r[10]),
            fired_epoch=None if r[11] is None else int(r[11]), fired_at=_f(r[12]), started_at=_f(r[13]),
            finished_at=_f(r[14]), lease_expires=_f(r[15]), result_token=None if r[16] is None else int(r[16]),
            error=r[17], tenant=r[18], concurrency_key=r[19], concurrency_limit=r[20], created_at=_f(r[21]),
            payload_v=None if r[22] is None else int(r[22]), committed_at=_f(r[23]),
        ) for r in c.execute(sql.SQL(
            "SELECT id::text, schedule_id::text, partition, type, extract(epoch FROM scheduled_for),"
            " extract(epoch FROM run_at), state, trigger, state_reason, attempt, fencing_token, fired_epoch,"
            " extract(epoch FROM fired_at), extract(epoch FROM started_at), extract(epoch FROM finished_at),"
            " extract(epoch FROM lease_expires),"
            " CASE WHEN jsonb_typeof(result -> 'token') = 'number' THEN (result ->> 'token')::bigint END,"
            " left(error, 400), tenant, concurrency_key, concurrency_limit, extract(epoch FROM created_at),"
            " CASE WHEN jsonb_typeof(payload -> 'v') = 'number' THEN (payload ->> 'v')::bigint END, {}"
            " FROM executions ORDER BY scheduled_for, id").format(sql.SQL(committed))))
        limits = tuple(TenantLimitRec(tenant=r[0], rate_per_s=_f(r[1]), burst=_f(r[2]))
                       for r in c.execute("SELECT id, rate_per_s, burst FROM tenants ORDER BY id"))
        ownership = tuple(OwnershipRec(
            id=r[0], partition=r[1], epoch=int(r[2]), owner=r[3], kind=r[4], at=float(r[5]), committed_at=_f(r[6]),
        ) for r in c.execute(sql.SQL(
            "SELECT id, partition, epoch, owner, kind, extract(epoch FROM at), {} FROM partition_history ORDER BY id"
        ).format(sql.SQL(committed))))
        now = {int(r[0]): int(r[1]) for r in c.execute(
            sql.SQL("SELECT id, max(epoch) FROM {} GROUP BY id").format(sql.Identifier(partitions_table)))}
        events = tuple(EventRec(kind=r[0], at=float(r[1]), schedule_id=r[2], alert=r[3], data=r[4] or {})
                       for r in c.execute(
            "SELECT kind, extract(epoch FROM at), schedule_id::text, alert, data FROM events"
            " WHERE kind IN ('misfire_refused', 'misfire_skipped', 'dead_letter') ORDER BY id"))
    return {"schedules": schedules, "executions": executions, "ownership": ownership, "partitions_now": now,
            "events": events, "commit_ts": commit_ts, "tenant_limits": limits}


def log_files(workdir: Path, name: str) -> list[Path]:
    """`name.log` and the rotated `name.N.log` of earlier starts."""
    pat = re.compile(rf"{re.escape(name)}(\.\d+)?\.log")
    return sorted(p for p in workdir.iterdir() if pat.fullmatch(p.name))


def process_names(workdir: Path) -> list[str]:
    """The processes that left logs in a kept run's workdir (n1, n1.1 and n1.2 are all n1)."""
    pat = re.compile(r"([nw]\d+)(\.\d+)?\.log")
    return sorted({m.group(1) for p in workdir.iterdir() if (m := pat.fullmatch(p.name))})


def read_log_events(workdir: Path, names: Iterable[str]) -> tuple[LogEventRec, ...]:
    out: list[LogEventRec] = []
    for name in names:
        for path in log_files(workdir, name):
            for line in path.read_text(errors="replace").splitlines():
                if not line.startswith("{"):
                    continue
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if d.get("event") in KEPT_EVENTS:
                    out.append(LogEventRec(
                        source=name, event=d["event"], ts=float(d.get("ts", 0.0)),
                        partition=d.get("partition") if isinstance(d.get("partition"), int) else None,
                        epoch=d.get("epoch") if isinstance(d.get("epoch"), int) else None,
                        execution_id=d.get("execution_id"), detail=str(d.get("detail") or d.get("reason") or "")[:200],
                    ))
    return tuple(sorted(out, key=lambda e: e.ts))


NODE_SETTINGS = ("queue_ahead_s", "max_clock_skew_s")  # RunMeta fields a node states when it starts


def read_node_settings(workdir: Path, names: Iterable[str]) -> dict[str, float]:
    """The largest value of each of NODE_SETTINGS over the nodes' `node_started` log lines (each
    start of each node); a setting no node stated is left out."""
    out: dict[str, float] = {}
    for name in names:
        for path in log_files(workdir, name):
            for line in path.read_text(errors="replace").splitlines():
                if not line.startswith("{") or '"node_started"' not in line:
                    continue
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                for key in NODE_SETTINGS:
                    if isinstance(d.get(key), int | float):
                        out[key] = max(out.get(key, float("-inf")), float(d[key]))
    return out


def read_runs(jsonl_dir: Path) -> tuple[RunRec, ...]:
    out: list[RunRec] = []
    for path in sorted(jsonl_dir.glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = run_from_json(json.loads(line))
            except ValueError:
                continue  # a line torn by SIGKILL mid-write
            if rec is not None:
                out.append(rec)
    return tuple(sorted(out, key=lambda r: r.t))


def collect(dsn: str, workdir: Path, jsonl_dir: Path, meta: RunMeta, processes: Sequence[str],
            submitted: Sequence[SubmittedJob], injections: Sequence[InjectionRecord],
            health: Sequence[HealthSample], partitions_table: str = "partitions") -> History:
    db = read_db(dsn, partitions_table)
    stated = read_node_settings(workdir, processes)
    meta = replace(meta, commit_timestamps=db["commit_ts"], queue_ahead_s=stated.get("queue_ahead_s"),
                   max_clock_skew_s=stated.get("max_clock_skew_s"))
    return History(
        meta=meta, schedules=db["schedules"], executions=db["executions"], ownership=db["ownership"],
        partitions_now=db["partitions_now"], events=db["events"], runs=read_runs(jsonl_dir),
        log_events=read_log_events(workdir, processes), submitted=tuple(submitted), injections=tuple(injections),
        health=tuple(health), tenant_limits=db["tenant_limits"],
    )
