"""The Client's values: frozen dataclasses with `datetime` (aware, UTC), `timedelta`, and JSON
documents as Python values (dicts for payloads and results); enums as `StrEnum` whose values are
the CLI's words (`"run_once"`, `"buffer_one"`, ...).

The enums are derived from the generated contract (cronwheel.v1.enums), never copied by hand:
a value added to the .proto appears here with the next `tools/generate.py`. A field the server
leaves unset is None (a duration, a time, an enum zero value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from cronwheel.v1 import admin_pb2, enums, scheduler_pb2

T = TypeVar("T")


def _words(name: str, table: dict[int, str]) -> Any:
    return StrEnum(name, {word.upper(): word for word in table.values()}, module=__name__)  # type: ignore[misc]


Priority = _words("Priority", enums.PRIORITY)  # critical, default, bulk
MisfirePolicy = _words("MisfirePolicy", enums.MISFIRE)  # skip, run_once, catch_up
OverlapPolicy = _words("OverlapPolicy", enums.OVERLAP)  # forbid, allow, replace, buffer_one, buffer_all
DstGapPolicy = _words("DstGapPolicy", enums.DST_GAP)  # shift, skip
DstRepeatedPolicy = _words("DstRepeatedPolicy", enums.DST_REPEATED)  # first, last, both
ExecutionState = _words("ExecutionState", enums.STATE)  # scheduled, queued, running, succeeded, ...
Trigger = _words("Trigger", enums.TRIGGER)  # cron, manual, backfill, submit, catch_up
DependencyPolicy = _words("DependencyPolicy", enums.DEPENDENCY_POLICY)  # on_success, always
TickOutcome = _words("TickOutcome", enums.words(scheduler_pb2.TickOutcome, "TICK_OUTCOME_"))
DELIVERY_STATES = enums.words(admin_pb2.DeliveryState, "DELIVERY_STATE_")
DeliveryState = _words("DeliveryState", DELIVERY_STATES)  # pending, delivered, failed
DEDUPLICATIONS = enums.words(scheduler_pb2.Deduplication, "DEDUPLICATION_")
Deduplication = _words("Deduplication", DEDUPLICATIONS)  # idempotency_key, unique

# States an execution does not leave by itself (RetryExecution may bring DEAD, FAILED, CANCELLED
# and SKIPPED back): what `wait` waits for.
FINAL_STATES = frozenset(ExecutionState(w) for w in ("succeeded", "failed", "dead", "cancelled", "skipped"))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed attempts are retried; None: the server's default (30 s, x4, 6 h, 5 attempts)."""

    initial_backoff: timedelta | None = None
    backoff_multiplier: float | None = None
    max_backoff: timedelta | None = None
    max_attempts: int | None = None


@dataclass(frozen=True, slots=True)
class DstPolicy:
    """Daylight-saving-time rules; None: the default rule (see common.proto DstPolicy)."""

    gap: DstGapPolicy | None = None  # type: ignore[valid-type]
    repeated_hour: DstRepeatedPolicy | None = None  # type: ignore[valid-type]


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    tenant: str
    name: str
    cron: str
    timezone: str
    job_type: str
    payload: Any
    priority: Priority  # type: ignore[valid-type]
    retry_policy: RetryPolicy
    attempt_timeout: timedelta | None  # the per-attempt limit (Schedule.timeout in the contract)
    misfire_policy: MisfirePolicy  # type: ignore[valid-type]
    max_catch_up: int
    overlap_policy: OverlapPolicy  # type: ignore[valid-type]
    dst_policy: DstPolicy
    jitter: timedelta | None
    paused: bool
    version: int
    partition: int
    next_run_at: datetime | None
    last_scheduled_for: datetime | None
    alert_if_no_success_within: timedelta | None
    last_success_at: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    # Retention (None: the node's job-type window, else the cluster default; see docs/semantics.md).
    keep_last: int | None = None
    keep_succeeded_for: timedelta | None = None
    keep_failed_for: timedelta | None = None
    # A child schedule: its parent's id (it has no cron; it runs once per successful parent run).
    parent_schedule_id: str | None = None
    # An HTTP target (docs/http-targets.md) as a dict: url, method, headers ({name: value} or
    # {name: {"secret": NAME}}), body, timeout_s, signing_secret; None: a job type's schedule.
    target: dict[str, Any] | None = None
    queue: str = "default"  # the queue its runs wait in
    required_capabilities: tuple[str, ...] = ()  # what the workers of its runs must advertise


@dataclass(frozen=True, slots=True)
class Execution:
    id: str
    schedule_id: str | None  # None for a one-off job
    tenant: str
    type: str
    payload: Any
    partition: int
    scheduled_for: datetime | None
    run_at: datetime | None
    priority: Priority  # type: ignore[valid-type]
    state: ExecutionState  # type: ignore[valid-type]
    state_reason: str
    trigger: Trigger  # type: ignore[valid-type]
    attempt: int
    max_attempts: int
    retry_policy: RetryPolicy
    attempt_timeout: timedelta | None
    lease_owner: str
    lease_expires_at: datetime | None
    fencing_token: int
    checkpoint: Any  # None when no checkpoint was saved
    idempotency_key: str
    error: str
    error_type: str
    result: Any  # None until a worker reported a result
    cancel_requested: bool
    created_at: datetime | None
    fired_at: datetime | None
    queued_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    # Set by submit and trigger only: an existing execution was returned instead of a new one
    # (same idempotency key, or, for submit, the holder of the job's unique key).
    deduplicated: bool = False
    # Set by submit only, with deduplicated: why (idempotency_key or unique); None: created.
    deduplicated_by: Deduplication | None = None  # type: ignore[valid-type]
    # What it waits (or waited) for (submit's depends_on), filled by get_execution; its policy
    # ("on_success" or "always"; None: it named no upstream) and, while WAITING, how many of its
    # upstreams have not finished.
    upstreams: tuple[Upstream, ...] = ()
    dependency_policy: str | None = None
    waiting_for: int = 0
    target: dict[str, Any] | None = None  # the HTTP target a run of type "http" calls (as Schedule.target)
    queue: str = "default"  # the queue it waits in
    required_capabilities: tuple[str, ...] = ()  # what its worker must advertise ("gpu=a100")

    @property
    def final(self) -> bool:
        """True in a state the execution does not leave by itself."""
        return self.state in FINAL_STATES


@dataclass(frozen=True, slots=True)
class Upstream:
    """One execution another waits for (Execution.upstreams): its state now (None: pruned) and
    the finished state it resolved the wait with (None: not finished yet)."""

    execution_id: str
    state: ExecutionState | None  # type: ignore[valid-type]
    outcome: ExecutionState | None  # type: ignore[valid-type]
    idempotency_key: str
    type: str


@dataclass(frozen=True, slots=True)
class Unique:
    """A unique job (submit's `unique=`): while an execution of the same job is in one of `states`,
    a second submit creates nothing and returns it (`deduplicated_by` "unique"). The same job: same
    tenant and type, the same payload (`by_args`) or the same values of the top-level payload keys
    `args_keys`, compared as JSON values, and the same `period` bucket of the execution's run_at
    (None or 0: for ever). `states`: empty means scheduled, queued, running and retry_scheduled; a
    list must include those four and may add succeeded, failed, dead, cancelled (with failed),
    skipped. See docs/semantics.md "Unique jobs"."""

    by_args: bool = False
    args_keys: tuple[str, ...] | list[str] = ()
    period: timedelta | float | None = None
    states: tuple[ExecutionState | str, ...] | list[ExecutionState | str] = ()  # type: ignore[valid-type]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of submit_many: the arguments of submit (run_at or delay, not both; None: the
    server's default). The Client adds an idempotency key when it is None."""

    type: str
    payload: Any = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    idempotency_key: str | None = None
    priority: Priority | str | None = None  # type: ignore[valid-type]
    retry_policy: RetryPolicy | None = None
    attempt_timeout: timedelta | None = None
    tenant: str | None = None
    unique: Unique | None = None
    concurrency_key: str | None = None  # with concurrency_limit: at most that many running at once
    concurrency_limit: int | None = None
    # The jobs it waits for: execution ids or idempotency keys (of this tenant; a job of the same
    # submit_many by its key); dependency_policy "on_success" (default) or "always".
    depends_on: tuple[str, ...] | list[str] = ()
    dependency_policy: str | None = None
    target: dict[str, Any] | None = None  # an HTTP target instead of a type (type ""; Schedule.target)
    queue: str | None = None  # None: "default"; only workers naming the queue lease it
    required_capabilities: tuple[str, ...] | list[str] = ()  # "gpu=a100": only workers advertising all


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """One job's result of submit_many: the execution created, or the existing one when its
    idempotency key was already taken (`deduplicated`); `idempotency_key` is the key sent (the
    caller's or the one the Client added). get_execution reads the whole execution."""

    execution_id: str
    deduplicated: bool
    state: ExecutionState  # type: ignore[valid-type]
    partition: int
    run_at: datetime | None
    idempotency_key: str
    deduplicated_by: Deduplication | None = None  # type: ignore[valid-type]  # idempotency_key | unique


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list: its items and the token of the next page ("" on the last)."""

    items: tuple[T, ...]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of an execution's log: what its handler logged in attempt `attempt` (Python
    logging inside the handler, or ctx.log), its number `seq` within the attempt."""

    attempt: int
    seq: int
    at: datetime | None
    level: str
    logger: str
    message: str


@dataclass(frozen=True, slots=True)
class LogPage:
    """A page of an execution's log after a cursor, and its state read before the lines:
    `final` means no line will come after these and the ones after them; `more` that some are
    stored already (the page was cut by its size or its bytes)."""

    lines: tuple[LogLine, ...]
    state: ExecutionState  # type: ignore[valid-type]
    final: bool
    more: bool = False  # more lines are stored already: ask again at once


@dataclass(frozen=True, slots=True)
class Backfill:
    created_count: int
    existing_count: int
    execution_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PreviewedTick:
    scheduled_for: datetime
    run_at: datetime
    local_time: str
    note: str


@dataclass(frozen=True, slots=True)
class ExplainedTick:
    scheduled_for: datetime
    outcome: TickOutcome  # type: ignore[valid-type]
    execution_id: str | None
    execution_state: ExecutionState | None  # type: ignore[valid-type]
    reason: str
    fire_lag: timedelta | None


@dataclass(frozen=True, slots=True)
class Explanation:
    ticks: tuple[ExplainedTick, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Member:
    node_id: str
    address: str
    lease_deadline: datetime | None
    partitions: tuple[int, ...]
    wheel_size: int
    fire_lag_p50: timedelta | None
    fire_lag_p99: timedelta | None
    stats_at: datetime | None
    version: str
    started_at: datetime | None
    auth_mode: str = ""  # "tokens", "loopback-only", "insecure"; "" when the node did not answer
    egress_allow: tuple[str, ...] = ()  # what its outbound requests may reach although not global


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    id: int
    owner: str | None
    epoch: int
    fenced_owner: str | None
    fenced_epoch: int
    acquired_at: datetime | None


@dataclass(frozen=True, slots=True)
class QueueDepth:
    priority: Priority  # type: ignore[valid-type]
    queued: int
    oldest_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_name: str
    partition_count: int
    answered_by: str
    observed_at: datetime | None
    members: tuple[Member, ...]
    partitions: tuple[PartitionStatus, ...]
    queue_depths: tuple[QueueDepth, ...]


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    at: datetime | None
    tenant: str | None
    kind: str
    schedule_id: str | None
    execution_id: str | None
    partition: int | None
    actor: str
    alert: bool
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Webhook:
    """A webhook subscription (its secret is shown only by create_webhook)."""

    id: str
    tenant: str | None  # None: every tenant's events and the cluster's (admin webhooks)
    url: str
    kinds: tuple[str, ...]
    schedule_id: str | None
    description: str
    created_at: datetime | None
    created_by: str


@dataclass(frozen=True, slots=True)
class CreatedWebhook:
    """What create_webhook returns: the webhook and the signing secret generated, shown this once
    ("" when the caller gave the secret: it is never echoed)."""

    webhook: Webhook
    secret: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event owed to one webhook: where it stands (attempts, last status and error)."""

    id: str  # the Cronwheel-Delivery header: the same on every attempt
    webhook_id: str
    event_id: int
    kind: str
    state: DeliveryState  # type: ignore[valid-type]
    attempts: int
    next_attempt_at: datetime | None
    node: str | None
    last_status: int | None
    last_error: str | None
    created_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant's limits and quotas (None: no rate limit, burst = one second's worth, no quota)."""

    id: str
    max_concurrency: int
    rate_per_s: float | None
    burst: float | None
    weight: int
    max_schedules: int | None
    max_executions_per_day: int | None
    created_at: datetime | None
    egress_rules: tuple[str, ...] = ()  # where its HTTP targets may point (empty: any public address)
    queues: tuple[TenantQueue, ...] = ()  # its queues with limits set (get_tenant fills it)


@dataclass(frozen=True, slots=True)
class TenantQueue:
    """A queue's limits for a tenant: at most max_concurrency running (None: only the tenant's
    limit), and its weight among the tenant's queues."""

    name: str
    max_concurrency: int | None
    weight: int


@dataclass(frozen=True, slots=True)
class Token:
    """A bearer token made through the API (its secret is shown only by create_token)."""

    id: str
    name: str
    tenant: str | None  # a tenant token's tenant, or an admin token's default tenant
    admin: bool
    created_at: datetime | None
    created_by: str
    expires_at: datetime | None  # None: never
    revoked_at: datetime | None  # None: not revoked


@dataclass(frozen=True, slots=True)
class CreatedToken:
    """What create_token returns: the token and its bearer secret, shown this once."""

    token: Token
    secret: str
