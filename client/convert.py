"""Proto messages <-> the Client's values (client/types.py). Private to the client package: no
public signature of the Client takes or returns a proto message."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.v1 import admin_pb2, common_pb2, enums, scheduler_pb2
from cronwheel.v1.enums import by_name

from . import types as t
from .errors import InvalidArgument

# StrEnum class -> (word -> proto number), from the same generated tables as the enums.
_NUMBERS: dict[type, dict[str, int]] = {
    t.Priority: by_name(enums.PRIORITY), t.MisfirePolicy: by_name(enums.MISFIRE),
    t.OverlapPolicy: by_name(enums.OVERLAP), t.DstGapPolicy: by_name(enums.DST_GAP),
    t.DstRepeatedPolicy: by_name(enums.DST_REPEATED), t.ExecutionState: by_name(enums.STATE),
    t.Trigger: by_name(enums.TRIGGER), t.DeliveryState: by_name(t.DELIVERY_STATES),
    t.DependencyPolicy: by_name(enums.DEPENDENCY_POLICY),
}


def BadValue(field: str, message: str) -> InvalidArgument:  # noqa: N802 (raised like a class)
    """A caller's value the Client cannot send, refused before any call; `field` names the keyword
    argument."""
    return InvalidArgument("INVALID_ARGUMENT", f"{field}: {message}")


# ------------------------------------------------------------------------------- to the wire


def enum_number(kind: type, value: Any, field: str) -> int:
    """A StrEnum member or its word -> proto number; None -> 0 (the server's default)."""
    if value is None:
        return 0
    word = str(value.value if isinstance(value, kind) else value)
    table = _NUMBERS[kind]
    if word not in table:
        raise BadValue(field, f"expected one of {', '.join(table)}, got {value!r}")
    return table[word]


def timestamp(value: datetime | None, field: str) -> Timestamp | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise BadValue(field, f"expected an aware datetime (with tzinfo), got {value!r}")
    seconds, nanos = _instant(value)
    return Timestamp(seconds=seconds, nanos=nanos)


@functools.lru_cache(maxsize=256)
def _instant(value: datetime) -> tuple[int, int]:
    """An aware datetime as Timestamp fields. Cached: the jobs of one submit_many often share a
    run_at, and converting it cost a sixth of building the request."""
    ts = Timestamp()
    ts.FromDatetime(value.astimezone(UTC))
    return ts.seconds, ts.nanos


def duration(value: timedelta | float | None, field: str) -> Duration | None:
    """A timedelta (or seconds as a number) -> Duration; None -> unset."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise BadValue(field, f"expected a timedelta or seconds, got {value!r}")
    d = Duration()
    d.FromTimedelta(value)
    return d


# What json.dumps(value, separators=(",", ":"), allow_nan=False) builds on every call, built once.
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def json_text(value: Any, field: str) -> str:
    try:
        return _JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise BadValue(field, f"not JSON-serialisable: {exc}") from None


def retry_policy(value: t.RetryPolicy | None, field: str = "retry_policy") -> common_pb2.RetryPolicy | None:
    if value is None:
        return None
    if not isinstance(value, t.RetryPolicy):
        raise BadValue(field, f"expected a RetryPolicy, got {value!r}")
    return common_pb2.RetryPolicy(
        initial_backoff=duration(value.initial_backoff, f"{field}.initial_backoff"),
        backoff_multiplier=not_zero(value.backoff_multiplier, f"{field}.backoff_multiplier", "1..100"),
        max_backoff=duration(value.max_backoff, f"{field}.max_backoff"),
        max_attempts=not_zero(value.max_attempts, f"{field}.max_attempts", "1..1000"))


def not_zero(value: Any, field: str, valid: str) -> Any:
    """A count or factor whose 0 on the wire means "the server's default" (proto3 has no presence
    for it): None is how a caller asks for the default, so a 0 given is refused as out of range,
    like 1001, rather than silently replaced by the default."""
    if value is None:
        return 0
    if value == 0 and not isinstance(value, bool):
        raise BadValue(field, f"must be {valid} (None: the server's default), got {value}")
    return value


def dst_policy(value: t.DstPolicy | None, field: str = "dst_policy") -> common_pb2.DstPolicy | None:
    if value is None:
        return None
    if not isinstance(value, t.DstPolicy):
        raise BadValue(field, f"expected a DstPolicy, got {value!r}")
    return common_pb2.DstPolicy(gap=enum_number(t.DstGapPolicy, value.gap, f"{field}.gap"),
                                repeated_hour=enum_number(t.DstRepeatedPolicy, value.repeated_hour,
                                                          f"{field}.repeated_hour"))


# Settable schedule fields: keyword argument -> (proto field, to-proto function). The Client's
# names are the proto's, except the per-attempt limit (attempt_timeout, proto `timeout`) and the
# payload (a Python value, proto `payload_json`).
SCHEDULE_FIELDS: dict[str, tuple[str, Any]] = {
    "name": ("name", lambda v, f: v),
    "cron": ("cron", lambda v, f: v),
    "timezone": ("timezone", lambda v, f: v),
    "job_type": ("job_type", lambda v, f: v),
    "payload": ("payload_json", lambda v, f: "" if v is None else json_text(v, f)),
    "priority": ("priority", lambda v, f: enum_number(t.Priority, v, f)),
    "retry_policy": ("retry_policy", lambda v, f: retry_policy(v, f)),
    "attempt_timeout": ("timeout", duration),
    "misfire_policy": ("misfire_policy", lambda v, f: enum_number(t.MisfirePolicy, v, f)),
    "max_catch_up": ("max_catch_up", lambda v, f: not_zero(v, f, "1..1000")),
    "overlap_policy": ("overlap_policy", lambda v, f: enum_number(t.OverlapPolicy, v, f)),
    "dst_policy": ("dst_policy", lambda v, f: dst_policy(v, f)),
    "jitter": ("jitter", duration),
    "alert_if_no_success_within": ("alert_if_no_success_within", duration),
    "keep_last": ("keep_last", lambda v, f: count(v, f)),
    "keep_succeeded_for": ("keep_succeeded_for", duration),
    "keep_failed_for": ("keep_failed_for", duration),
    "queue": ("queue", lambda v, f: v or ""),
    "required_capabilities": ("required_capabilities", lambda v, f: _strings(v, f)),
    "target": ("target", lambda v, f: http_target(v, f)),
}


def http_target(value: Mapping[str, Any] | None, field: str = "target") -> common_pb2.HttpTarget | None:
    """An HttpTarget from a dict: url, method, headers ({name: value} or {name: {"secret": NAME}}),
    body, timeout_s, signing_secret (None: unset; the node checks every field)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadValue(field, f"expected a dict (url, method, headers, body, timeout_s), got {type(value).__name__}")
    unknown = set(value) - {"url", "method", "headers", "body", "timeout_s", "signing_secret", "concurrency_limit",
                            "rate_per_s", "burst"}
    if unknown:
        raise BadValue(field, f"unknown key(s) {', '.join(sorted(unknown))}")
    msg = common_pb2.HttpTarget(url=value.get("url", ""), method=value.get("method", ""),
                                timeout_s=value.get("timeout_s") or 0, signing_secret=value.get("signing_secret", ""),
                                concurrency_limit=value.get("concurrency_limit") or 0,
                                rate_per_s=value.get("rate_per_s") or 0, burst=value.get("burst") or 0)
    if value.get("body") is not None:
        msg.body = value["body"]
    for name, v in (value.get("headers") or {}).items():
        if isinstance(v, Mapping):
            msg.headers.add(name=name, secret=v.get("secret", ""))
        else:
            msg.headers.add(name=name, value=v)
    return msg


def target_dict(msg: common_pb2.HttpTarget) -> dict[str, Any]:
    """An HttpTarget message as the dict `http_target` takes."""
    heads: dict[str, Any] = {h.name: ({"secret": h.secret} if h.WhichOneof("kind") == "secret" else h.value)
                             for h in msg.headers}
    return {"url": msg.url, "method": msg.method, "headers": heads,
            "body": msg.body if msg.HasField("body") else None, "timeout_s": msg.timeout_s,
            "signing_secret": msg.signing_secret, "concurrency_limit": msg.concurrency_limit or None,
            "rate_per_s": msg.rate_per_s or None, "burst": msg.burst or None}


def _strings(value: Any, field: str) -> list[str]:
    """A list of strings (None: empty)."""
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(x, str) for x in value):
        raise BadValue(field, f"expected a list of strings, got {value!r}")
    return list(value)


def count(value: int | None, field: str) -> int | None:
    """An optional whole number (None: unset)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue(field, f"must be an int, got {type(value).__name__}")
    return value
CREATE_ONLY = {"id", "tenant", "paused", "parent_schedule_id"}
# update_schedule only: one field of a policy, its other fields unchanged (the mask names the
# sub-field): keyword -> (policy keyword, the policy's field).
POLICY_FIELDS: dict[str, tuple[str, str]] = {
    "max_attempts": ("retry_policy", "max_attempts"), "initial_backoff": ("retry_policy", "initial_backoff"),
    "backoff_multiplier": ("retry_policy", "backoff_multiplier"), "max_backoff": ("retry_policy", "max_backoff"),
    "dst_gap": ("dst_policy", "gap"), "dst_repeated_hour": ("dst_policy", "repeated_hour"),
}


def policy_fields(msg: common_pb2.Schedule, parts: dict[str, Any]) -> list[str]:
    """Sets the POLICY_FIELDS keywords `parts` on `msg`; returns their mask paths."""
    by_policy: dict[str, dict[str, Any]] = {}
    for key, value in parts.items():
        policy, sub = POLICY_FIELDS[key]
        by_policy.setdefault(policy, {})[sub] = value
    if "retry_policy" in by_policy:
        msg.retry_policy.CopyFrom(retry_policy(t.RetryPolicy(**by_policy["retry_policy"])))
    if "dst_policy" in by_policy:
        msg.dst_policy.CopyFrom(dst_policy(t.DstPolicy(**by_policy["dst_policy"])))
    return [f"{policy}.{sub}" for policy, subs in by_policy.items() for sub in subs]


def schedule_message(values: dict[str, Any]) -> common_pb2.Schedule:
    """A Schedule message from keyword arguments (None: unset)."""
    msg = common_pb2.Schedule()
    for key, value in values.items():
        if key in CREATE_ONLY:
            if value is not None:
                setattr(msg, key, value)
            continue
        if key not in SCHEDULE_FIELDS:
            raise BadValue(key, f"not a schedule field (expected one of {', '.join(SCHEDULE_FIELDS)})")
        name, conv = SCHEDULE_FIELDS[key]
        wire = conv(value, key)
        if wire is None:
            continue
        if isinstance(wire, Duration | Timestamp | common_pb2.RetryPolicy | common_pb2.DstPolicy
                      | common_pb2.HttpTarget):
            getattr(msg, name).CopyFrom(wire)
        elif isinstance(wire, list):
            getattr(msg, name).extend(wire)
        else:
            setattr(msg, name, wire)
    return msg


def time_range(start: datetime | None, end: datetime | None, field: str) -> common_pb2.TimeRange:
    return common_pb2.TimeRange(start_time=timestamp(start, f"{field}.start"), end_time=timestamp(end, f"{field}.end"))


# ------------------------------------------------------------------------------- from the wire


def _enum(kind: Any, number: int, table: dict[int, str]) -> Any:
    """The member of StrEnum `kind` whose word `table` gives for a proto number (None: unknown)."""
    members = _MEMBERS.get((kind, id(table)))
    if members is None:  # once per (kind, table): constructing a member by value cost ~1 us a call
        members = _MEMBERS[(kind, id(table))] = {n: kind(word) for n, word in table.items()}
    return members.get(number)


_MEMBERS: dict[tuple[Any, int], dict[int, Any]] = {}


def _ts(msg: Any, name: str) -> datetime | None:
    if not msg.HasField(name):
        return None
    return instant(getattr(msg, name))


def instant(ts: Timestamp) -> datetime:
    """A Timestamp as an aware UTC datetime (microseconds), each distinct value converted once
    (protobuf's ToDatetime is Python code: ~3 us a call, twice per leased run in the Worker)."""
    return _when(ts.seconds, ts.nanos)


@functools.lru_cache(maxsize=1024)
def _when(seconds: int, nanos: int) -> datetime:
    """A Timestamp's fields as an aware datetime (UTC). Cached: the answers of a submit_many
    repeat a few run_at values, and datetimes are immutable."""
    return Timestamp(seconds=seconds, nanos=nanos).ToDatetime(tzinfo=UTC)  # type: ignore[no-any-return]


def _dur(msg: Any, name: str) -> timedelta | None:
    return getattr(msg, name).ToTimedelta() if msg.HasField(name) else None  # type: ignore[no-any-return]


def _json(text: str) -> Any:
    return json.loads(text) if text else None


def _retry(msg: common_pb2.RetryPolicy) -> t.RetryPolicy:
    return t.RetryPolicy(initial_backoff=_dur(msg, "initial_backoff"),
                         backoff_multiplier=msg.backoff_multiplier or None,
                         max_backoff=_dur(msg, "max_backoff"), max_attempts=msg.max_attempts or None)


def schedule(msg: common_pb2.Schedule) -> t.Schedule:
    return t.Schedule(
        id=msg.id, tenant=msg.tenant, name=msg.name, cron=msg.cron, timezone=msg.timezone, job_type=msg.job_type,
        payload=_json(msg.payload_json) if msg.payload_json else {},
        priority=_enum(t.Priority, msg.priority, enums.PRIORITY), retry_policy=_retry(msg.retry_policy),
        attempt_timeout=_dur(msg, "timeout"),
        misfire_policy=_enum(t.MisfirePolicy, msg.misfire_policy, enums.MISFIRE), max_catch_up=msg.max_catch_up,
        overlap_policy=_enum(t.OverlapPolicy, msg.overlap_policy, enums.OVERLAP),
        dst_policy=t.DstPolicy(gap=_enum(t.DstGapPolicy, msg.dst_policy.gap, enums.DST_GAP),
                               repeated_hour=_enum(t.DstRepeatedPolicy, msg.dst_policy.repeated_hour,
                                                   enums.DST_REPEATED)),
        jitter=_dur(msg, "jitter"), paused=msg.paused, version=msg.version, partition=msg.partition,
        next_run_at=_ts(msg, "next_run_at"), last_scheduled_for=_ts(msg, "last_scheduled_for"),
        alert_if_no_success_within=_dur(msg, "alert_if_no_success_within"),
        last_success_at=_ts(msg, "last_success_at"), created_at=_ts(msg, "created_at"),
        updated_at=_ts(msg, "updated_at"),
        keep_last=msg.keep_last if msg.HasField("keep_last") else None,
        keep_succeeded_for=_dur(msg, "keep_succeeded_for"), keep_failed_for=_dur(msg, "keep_failed_for"),
        parent_schedule_id=msg.parent_schedule_id or None,
        target=target_dict(msg.target) if msg.HasField("target") else None,
        queue=msg.queue or "default", required_capabilities=tuple(msg.required_capabilities))


def execution(msg: common_pb2.Execution, deduplicated: bool = False, deduplicated_by: int = 0) -> t.Execution:
    return t.Execution(
        id=msg.id, schedule_id=msg.schedule_id or None, tenant=msg.tenant, type=msg.type,
        payload=_json(msg.payload_json) if msg.payload_json else {}, partition=msg.partition,
        scheduled_for=_ts(msg, "scheduled_for"), run_at=_ts(msg, "run_at"),
        priority=_enum(t.Priority, msg.priority, enums.PRIORITY),
        state=_enum(t.ExecutionState, msg.state, enums.STATE), state_reason=msg.state_reason,
        trigger=_enum(t.Trigger, msg.trigger, enums.TRIGGER), attempt=msg.attempt, max_attempts=msg.max_attempts,
        retry_policy=_retry(msg.retry_policy), attempt_timeout=_dur(msg, "timeout"), lease_owner=msg.lease_owner,
        lease_expires_at=_ts(msg, "lease_expires_at"), fencing_token=msg.fencing_token,
        checkpoint=_json(msg.checkpoint_json), idempotency_key=msg.idempotency_key, error=msg.error,
        error_type=msg.error_type, result=_json(msg.result_json), cancel_requested=msg.cancel_requested,
        created_at=_ts(msg, "created_at"), fired_at=_ts(msg, "fired_at"), queued_at=_ts(msg, "queued_at"),
        started_at=_ts(msg, "started_at"), heartbeat_at=_ts(msg, "heartbeat_at"),
        finished_at=_ts(msg, "finished_at"), deduplicated=deduplicated,
        deduplicated_by=_enum(t.Deduplication, deduplicated_by, t.DEDUPLICATIONS),
        upstreams=tuple(t.Upstream(u.execution_id, _enum(t.ExecutionState, u.state, enums.STATE),
                                   _enum(t.ExecutionState, u.outcome, enums.STATE), u.idempotency_key, u.type)
                        for u in msg.upstreams),
        dependency_policy=enums.DEPENDENCY_POLICY.get(msg.dependency_policy), waiting_for=msg.waiting_for,
        target=target_dict(msg.target) if msg.HasField("target") else None,
        queue=msg.queue or "default", required_capabilities=tuple(msg.required_capabilities))


_OUTCOMES = enums.words(scheduler_pb2.TickOutcome, "TICK_OUTCOME_")


def submitted(msg: scheduler_pb2.SubmittedJob, idempotency_key: str) -> t.SubmittedJob:
    return t.SubmittedJob(execution_id=msg.execution_id, deduplicated=msg.deduplicated,
                          state=_enum(t.ExecutionState, msg.state, enums.STATE), partition=msg.partition,
                          run_at=_ts(msg, "run_at"), idempotency_key=idempotency_key,
                          deduplicated_by=_enum(t.Deduplication, msg.deduplicated_by, t.DEDUPLICATIONS))


def unique(value: t.Unique | None, field: str) -> scheduler_pb2.UniqueOptions | None:
    """submit's `unique=` as UniqueOptions, checked as far as the client can (names `field`.x)."""
    if value is None:
        return None
    if not isinstance(value, t.Unique):
        raise BadValue(field, f"expected a Unique, got {value!r}")
    keys = value.args_keys
    if isinstance(keys, str) or not isinstance(keys, tuple | list):
        raise BadValue(f"{field}.args_keys", f"expected a list of strings, got {keys!r}")
    for i, k in enumerate(keys):
        if not isinstance(k, str):
            raise BadValue(f"{field}.args_keys[{i}]", f"expected a string (a top-level payload key), got {k!r}")
    states = value.states
    if isinstance(states, str) or not isinstance(states, tuple | list):
        raise BadValue(f"{field}.states", f"expected a list of states, got {states!r}")
    return scheduler_pb2.UniqueOptions(
        by_args=bool(value.by_args), args_keys=list(keys), period=duration(value.period, f"{field}.period"),
        states=[enum_number(t.ExecutionState, s, f"{field}.states[{j}]") for j, s in enumerate(states)])


def previewed(msg: scheduler_pb2.PreviewedTick) -> t.PreviewedTick:
    return t.PreviewedTick(scheduled_for=msg.scheduled_for.ToDatetime(tzinfo=UTC),
                           run_at=msg.run_at.ToDatetime(tzinfo=UTC), local_time=msg.local_time, note=msg.note)


def explained(msg: scheduler_pb2.ExplainedTick) -> t.ExplainedTick:
    return t.ExplainedTick(scheduled_for=msg.scheduled_for.ToDatetime(tzinfo=UTC),
                           outcome=_enum(t.TickOutcome, msg.outcome, _OUTCOMES),
                           execution_id=msg.execution_id or None,
                           execution_state=_enum(t.ExecutionState, msg.execution_state, enums.STATE),
                           reason=msg.reason, fire_lag=_dur(msg, "fire_lag"))


def cluster_status(msg: admin_pb2.ClusterStatusResponse) -> t.ClusterStatus:
    return t.ClusterStatus(
        cluster_name=msg.cluster_name, partition_count=msg.partition_count, answered_by=msg.answered_by,
        observed_at=_ts(msg, "observed_at"),
        members=tuple(t.Member(node_id=m.node_id, address=m.address, lease_deadline=_ts(m, "lease_deadline"),
                               partitions=tuple(m.partitions), wheel_size=m.wheel_size,
                               fire_lag_p50=_dur(m, "fire_lag_p50"), fire_lag_p99=_dur(m, "fire_lag_p99"),
                               stats_at=_ts(m, "stats_at"), version=m.version, started_at=_ts(m, "started_at"),
                               auth_mode=m.auth_mode, egress_allow=tuple(m.egress_allow))
                      for m in msg.members),
        partitions=tuple(t.PartitionStatus(id=p.id, owner=p.owner or None, epoch=p.epoch,
                                           fenced_owner=p.fenced_owner or None, fenced_epoch=p.fenced_epoch,
                                           acquired_at=_ts(p, "acquired_at")) for p in msg.partitions),
        queue_depths=tuple(t.QueueDepth(priority=_enum(t.Priority, q.priority, enums.PRIORITY), queued=q.queued,
                                        oldest_run_at=_ts(q, "oldest_run_at")) for q in msg.queue_depths))


def log_page(msg: scheduler_pb2.GetExecutionLogsResponse) -> t.LogPage:
    lines = tuple(t.LogLine(attempt=ln.attempt, seq=ln.seq, at=_ts(ln, "time"), level=ln.level, logger=ln.logger,
                            message=ln.message) for ln in msg.lines)
    return t.LogPage(lines, _enum(t.ExecutionState, msg.state, enums.STATE), msg.final, msg.more)


def event(msg: admin_pb2.Event) -> t.Event:
    return t.Event(id=msg.id, at=_ts(msg, "at"), tenant=msg.tenant or None, kind=msg.kind,
                   schedule_id=msg.schedule_id or None, execution_id=msg.execution_id or None,
                   partition=msg.partition if msg.HasField("partition") else None, actor=msg.actor,
                   alert=msg.alert, data=_json(msg.data_json) or {})


def webhook(msg: admin_pb2.Webhook) -> t.Webhook:
    return t.Webhook(id=msg.id, tenant=msg.tenant or None, url=msg.url, kinds=tuple(msg.kinds),
                     schedule_id=msg.schedule_id or None, description=msg.description,
                     created_at=_ts(msg, "created_at"), created_by=msg.created_by)


def created_webhook(msg: admin_pb2.CreateWebhookResponse) -> t.CreatedWebhook:
    return t.CreatedWebhook(webhook=webhook(msg.webhook), secret=msg.secret)


def delivery(msg: admin_pb2.Delivery) -> t.Delivery:
    return t.Delivery(id=msg.id, webhook_id=msg.webhook_id, event_id=msg.event_id, kind=msg.kind,
                      state=_enum(t.DeliveryState, msg.state, t.DELIVERY_STATES), attempts=msg.attempts,
                      next_attempt_at=_ts(msg, "next_attempt_at"), node=msg.node or None,
                      last_status=msg.last_status or None, last_error=msg.last_error or None,
                      created_at=_ts(msg, "created_at"), finished_at=_ts(msg, "finished_at"))


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def tenant(msg: admin_pb2.Tenant) -> t.Tenant:
    return t.Tenant(id=msg.id, max_concurrency=msg.max_concurrency, rate_per_s=_opt(msg, "rate_per_s"),
                    burst=_opt(msg, "burst"), weight=msg.weight, max_schedules=_opt(msg, "max_schedules"),
                    max_executions_per_day=_opt(msg, "max_executions_per_day"), created_at=_ts(msg, "created_at"),
                    egress_rules=tuple(msg.egress_rules),
                    queues=tuple(tenant_queue(x) for x in msg.queues))


def tenant_queue(msg: admin_pb2.TenantQueue) -> t.TenantQueue:
    return t.TenantQueue(name=msg.name, max_concurrency=msg.max_concurrency or None, weight=msg.weight)


def token(msg: admin_pb2.Token) -> t.Token:
    return t.Token(id=msg.id, name=msg.name, tenant=msg.tenant or None, admin=msg.admin,
                   created_at=_ts(msg, "created_at"), created_by=msg.created_by,
                   expires_at=_ts(msg, "expires_at"), revoked_at=_ts(msg, "revoked_at"))


def created_token(msg: admin_pb2.CreateTokenResponse) -> t.CreatedToken:
    return t.CreatedToken(token=token(msg.token), secret=msg.secret)
