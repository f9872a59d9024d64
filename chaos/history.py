"""The history of one chaos run: plain frozen records, saved as one JSON file and read back.

Everything the checker judges is here and nothing else: the schedules and every execution row as
PostgreSQL ended them, the ownership history (with the commit time of each acquisition when
PostgreSQL tracks commit timestamps), alert events, the workers' own append-only JSONL (what
really ran), the node and worker log events that count refusals, the one-off jobs the traffic
submitted, every fault injected with its window, and the health samples taken around them.

Times are Unix seconds (floats) throughout, all read from the same host clock (PostgreSQL's
`now()`, the runner's and the workers' `time.time()`), so they compare directly. Cron ticks are
whole seconds, so they compare exactly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

TERMINAL_STATES = frozenset({"succeeded", "failed", "dead", "cancelled"})


@dataclass(frozen=True, slots=True)
class ScheduleRec:
    id: str
    name: str
    cron: str
    timezone: str
    misfire_policy: str
    max_catch_up: int
    overlap_policy: str
    created_at: float
    partition: int
    dst_gap: str | None = None
    dst_repeated: str | None = None
    jitter_s: float = 0.0
    next_run_at: float | None = None  # diagnostics: where the schedule stood when collected
    last_scheduled_for: float | None = None
    tenant: str = ""
    deleted_at: float | None = None
    keep_last: int | None = None
    keep_succeeded_for_s: float | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class ExecutionRec:
    id: str
    schedule_id: str | None
    partition: int
    type: str
    scheduled_for: float
    run_at: float
    state: str
    trigger: str = "cron"
    state_reason: str | None = None
    attempt: int = 0
    fencing_token: int = 0
    fired_epoch: int | None = None
    fired_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    lease_expires: float | None = None
    result_token: int | None = None  # the token the completing run put in its result
    error: str | None = None
    tenant: str = ""
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    created_at: float | None = None
    payload_v: int | None = None  # the generative workload's payload version (payload["v"])
    committed_at: float | None = None  # commit time of the row's last write (tracked commit timestamps)


@dataclass(frozen=True, slots=True)
class OwnershipRec:
    """A partition_history row. `committed_at` is the commit time of its transaction (the instant
    the epoch took effect in the fence) when PostgreSQL tracks commit timestamps."""

    id: int
    partition: int
    epoch: int
    owner: str
    kind: str  # acquired | released | lost
    at: float
    committed_at: float | None = None


@dataclass(frozen=True, slots=True)
class EventRec:
    kind: str
    at: float
    schedule_id: str | None = None
    alert: bool = False
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunRec:
    """One line of a worker's JSONL: `start` when a handler begins, `end` when it returns or
    raises (outcome ok | error | stopped | stale | cancelled). A killed worker writes no `end`."""

    event: str
    worker: str
    execution_id: str
    token: int
    attempt: int
    t: float
    schedule_id: str | None = None
    scheduled_for: str | None = None
    outcome: str | None = None
    from_step: int | None = None
    pid: int | None = None
    leased_at: float | None = None  # the node's start of this attempt (the claim), on a `start` line


@dataclass(frozen=True, slots=True)
class LogEventRec:
    """A node or worker log line with an `event` key we count (stale_epoch, report_refused, ...)."""

    source: str  # node or worker name
    event: str
    ts: float
    partition: int | None = None
    epoch: int | None = None
    execution_id: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    execution_id: str
    type: str
    run_at: float
    key: str
    submitted_at: float
    depends_on: tuple[str, ...] = ()  # its upstreams' execution ids (a dependency family)
    dependency_policy: str = ""  # with depends_on: on_success | always


@dataclass(frozen=True, slots=True)
class InjectionRecord:
    """One fault: what, on whom, when (runner wall clock), and what was measured while it ran."""

    name: str
    target: str
    start: float
    end: float
    ok: bool = True
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthSample:
    """Taken before and after every injection: all partitions owned (etcd agrees with the fence,
    balanced over the roster), every process that should run is running."""

    at: float
    phase: str  # before:<fault> | after:<fault> | settle
    ok: bool
    waited_s: float
    detail: str = ""
    overdue_running: int = 0  # executions running past lease + grace at this instant


@dataclass(frozen=True, slots=True)
class TenantLimitRec:
    """A tenant's rate limit as the run configured it (tenants table at collection)."""

    tenant: str
    rate_per_s: float | None
    burst: float | None


@dataclass(frozen=True, slots=True)
class OpRec:
    """An API operation of the generative workload: sent and answered (runner wall clock); from
    outside it took effect somewhere in that interval. `ok` False: it was never answered."""

    kind: str
    schedule_id: str | None
    sent: float
    answered: float
    ok: bool = True
    version: int = 0  # update: the payload version written
    execution_id: str | None = None  # trigger, cancel, submit
    range_start: float | None = None  # backfill
    range_end: float | None = None
    created: int | None = None  # backfill: created_count
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PreviewRec:
    """A PreviewSchedule answer: the schedule's ticks and run times (scheduled_for, run_at)."""

    schedule_id: str
    ticks: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class ExplainRec:
    """An ExplainSchedule answer over the window, read after the run drained."""

    schedule_id: str
    ticks: tuple[tuple[float, str, str | None, str], ...]  # (scheduled_for, outcome, execution id, reason)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunMeta:
    scenario: str
    seed: int
    partitions: int
    lease_ttl_s: float
    misfire_grace_s: float
    worker_lease_s: float
    window_start: float
    window_end: float
    collected_at: float
    commit_timestamps: bool = True
    worker_nodes: dict[str, str] = field(default_factory=dict)  # worker -> node it leases from
    skews: dict[str, float] = field(default_factory=dict)  # node -> largest |clock skew| it ran with
    generated: bool = False  # the generative workload (chaos.generate) ran
    quotas: dict[str, int] = field(default_factory=dict)  # tenant -> max_executions_per_day
    # The nodes' own settings, from their `node_started` log lines (chaos.collect), so the checker
    # judges against what the nodes ran with and imports no server code. None: not recorded.
    queue_ahead_s: float | None = None  # FiringConfig.queue_ahead_s
    max_clock_skew_s: float | None = None  # --max-clock-skew


@dataclass(frozen=True, slots=True)
class History:
    meta: RunMeta
    schedules: tuple[ScheduleRec, ...] = ()
    executions: tuple[ExecutionRec, ...] = ()
    ownership: tuple[OwnershipRec, ...] = ()
    partitions_now: dict[int, int] = field(default_factory=dict)  # partition -> epoch in the fence
    events: tuple[EventRec, ...] = ()
    runs: tuple[RunRec, ...] = ()
    log_events: tuple[LogEventRec, ...] = ()
    submitted: tuple[SubmittedJob, ...] = ()
    injections: tuple[InjectionRecord, ...] = ()
    health: tuple[HealthSample, ...] = ()
    tenant_limits: tuple[TenantLimitRec, ...] = ()
    ops: tuple[OpRec, ...] = ()
    previews: tuple[PreviewRec, ...] = ()
    explains: tuple[ExplainRec, ...] = ()


# ---------------------------------------------------------------------------------- (de)serialise

T = TypeVar("T")

_LISTS: dict[str, type] = {
    "schedules": ScheduleRec, "executions": ExecutionRec, "ownership": OwnershipRec, "events": EventRec,
    "runs": RunRec, "log_events": LogEventRec, "submitted": SubmittedJob, "injections": InjectionRecord,
    "health": HealthSample, "tenant_limits": TenantLimitRec, "ops": OpRec, "previews": PreviewRec,
    "explains": ExplainRec,
}


def _build(cls: type[T], d: dict[str, Any]) -> T:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in d.items() if k in names})


def run_from_json(d: dict[str, Any]) -> RunRec | None:
    """A worker JSONL line as a RunRec (None for lines that are not start/end records)."""
    if d.get("event") not in ("start", "end") or "execution_id" not in d:
        return None
    return _build(RunRec, {**d, "token": int(d.get("token", 0)), "attempt": int(d.get("attempt", 0))})


def history_to_json(h: History) -> dict[str, Any]:
    d = asdict(h)
    d["partitions_now"] = {str(k): v for k, v in h.partitions_now.items()}
    return d


def history_from_json(d: dict[str, Any]) -> History:
    kw: dict[str, Any] = {"meta": _build(RunMeta, d["meta"])}
    for name, cls in _LISTS.items():
        kw[name] = tuple(_build(cls, x) for x in d.get(name, ()))
    kw["partitions_now"] = {int(k): int(v) for k, v in d.get("partitions_now", {}).items()}
    return History(**kw)


def save_history(h: History, path: Path) -> None:
    path.write_text(json.dumps(history_to_json(h), separators=(",", ":")))


def load_history(path: Path) -> History:
    return history_from_json(json.loads(path.read_text()))
