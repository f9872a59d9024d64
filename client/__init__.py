"""cronwheel.client: what users import.

- `Client` (blocking) and `AsyncClient` (asyncio), same methods: schedules, one-off jobs (one by
  one or many per call: submit_many), waiting
  for an execution, cluster status and events, with plain values in and out (cronwheel.client.types)
  and typed errors (cronwheel.client.errors); fail-over between node addresses, token, TLS,
  deadlines and retries of calls safe to repeat.
- `Client.apply(specs, tenant=..., prune=..., dry_run=...)`: declarative schedules reconciled
  by name (cronwheel.client.apply: ApplyPlan, PlannedSchedule, FieldChange, SpecError).
- `Worker` (and `JobContext`, `NonRetryable`, `WorkerStopped`): run handlers for job types;
  at-least-once, with heartbeats, checkpoints and fencing tokens; reports sent in the background
  and never dropped while the lease holds (see cronwheel.client.worker).
- `load_worker(module)`: find the Worker a module defines (used by `cronwheel worker MODULE`).
- `cronwheel.client.testing.MockTransport(handler)`: test application code without a cluster; the
  Clients' `transport=` answers each call from the handler (docs/testing.md).
"""

from cronwheel.client.apply import Action as ApplyAction
from cronwheel.client.apply import ApplyPlan, FieldChange, PlannedSchedule, SpecError
from cronwheel.client.apply_tenants import PlannedTenant, TenantPlan, TenantSpecError
from cronwheel.client.async_client import AsyncClient
from cronwheel.client.client import Client
from cronwheel.client.errors import (
    AlreadyExists,
    ApiError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from cronwheel.client.types import (
    Backfill,
    ClusterStatus,
    CreatedToken,
    CreatedWebhook,
    Deduplication,
    Delivery,
    DeliveryState,
    DependencyPolicy,
    DstGapPolicy,
    DstPolicy,
    DstRepeatedPolicy,
    Event,
    Execution,
    ExecutionState,
    ExplainedTick,
    Explanation,
    JobSpec,
    LogLine,
    LogPage,
    MisfirePolicy,
    OverlapPolicy,
    PreviewedTick,
    Priority,
    RetryPolicy,
    Schedule,
    SubmittedJob,
    Tenant,
    TickOutcome,
    Token,
    Trigger,
    Unique,
    Upstream,
    Webhook,
)
from cronwheel.client.worker import JobContext, JobFailed, NonRetryable, Worker
from cronwheel.client.worker_connection import WorkerStopped
from cronwheel.v1.webhook_signature import verify as verify_webhook_signature

__all__ = [
    "AlreadyExists", "ApiError", "AsyncClient", "Backfill", "Client", "ClusterStatus", "CreatedWebhook",
    "DeadlineExceeded", "Deduplication", "Delivery", "DeliveryState",
    "DstGapPolicy", "DstPolicy", "DstRepeatedPolicy", "Event", "Execution", "ExecutionState", "ExplainedTick",
    "Explanation", "FailedPrecondition", "InvalidArgument", "JobContext", "JobFailed", "JobSpec", "MisfirePolicy",
    "NonRetryable",
    "NotFound", "OverlapPolicy", "PermissionDenied", "PreviewedTick", "Priority", "ResourceExhausted",
    "RetryPolicy", "Schedule", "SubmittedJob", "TickOutcome", "Trigger", "Unauthenticated", "Unavailable", "Unique",
    "Worker",
    "Webhook", "WorkerStopped", "load_worker", "verify_webhook_signature",
]
__all__ += ["DependencyPolicy", "Upstream"]  # job B after job A
__all__ += ["LogLine", "LogPage"]  # execution logs
__all__ += ["CreatedToken", "PlannedTenant", "Tenant", "TenantPlan", "TenantSpecError", "Token"]  # tenants
__all__ += ["ApplyAction", "ApplyPlan", "FieldChange", "PlannedSchedule", "SpecError"]  # apply


def load_worker(module_name: str) -> Worker:
    """The Worker instance a module defines (named `worker`, or the only one)."""
    import importlib

    mod = importlib.import_module(module_name)
    found = [v for v in vars(mod).values() if isinstance(v, Worker)]
    named = getattr(mod, "worker", None)
    if isinstance(named, Worker):
        return named
    if len(found) == 1:
        return found[0]
    raise LookupError(f"module {module_name} defines {len(found)} Worker instances; name one `worker`")
