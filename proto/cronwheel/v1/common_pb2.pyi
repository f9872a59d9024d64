import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_CRITICAL: _ClassVar[Priority]
    PRIORITY_DEFAULT: _ClassVar[Priority]
    PRIORITY_BULK: _ClassVar[Priority]

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISFIRE_POLICY_UNSPECIFIED: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_SKIP: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_ONCE: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_CATCH_UP: _ClassVar[MisfirePolicy]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_FORBID: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_ALLOW: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_REPLACE: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ONE: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ALL: _ClassVar[OverlapPolicy]

class DstGapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_GAP_POLICY_UNSPECIFIED: _ClassVar[DstGapPolicy]
    DST_GAP_POLICY_SHIFT: _ClassVar[DstGapPolicy]
    DST_GAP_POLICY_SKIP: _ClassVar[DstGapPolicy]

class DstRepeatedPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_REPEATED_POLICY_UNSPECIFIED: _ClassVar[DstRepeatedPolicy]
    DST_REPEATED_POLICY_FIRST: _ClassVar[DstRepeatedPolicy]
    DST_REPEATED_POLICY_LAST: _ClassVar[DstRepeatedPolicy]
    DST_REPEATED_POLICY_BOTH: _ClassVar[DstRepeatedPolicy]

class ExecutionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATE_UNSPECIFIED: _ClassVar[ExecutionState]
    EXECUTION_STATE_SCHEDULED: _ClassVar[ExecutionState]
    EXECUTION_STATE_QUEUED: _ClassVar[ExecutionState]
    EXECUTION_STATE_RUNNING: _ClassVar[ExecutionState]
    EXECUTION_STATE_SUCCEEDED: _ClassVar[ExecutionState]
    EXECUTION_STATE_FAILED: _ClassVar[ExecutionState]
    EXECUTION_STATE_RETRY_SCHEDULED: _ClassVar[ExecutionState]
    EXECUTION_STATE_DEAD: _ClassVar[ExecutionState]
    EXECUTION_STATE_CANCELLED: _ClassVar[ExecutionState]
    EXECUTION_STATE_SKIPPED: _ClassVar[ExecutionState]
    EXECUTION_STATE_WAITING: _ClassVar[ExecutionState]

class DependencyPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPENDENCY_POLICY_UNSPECIFIED: _ClassVar[DependencyPolicy]
    DEPENDENCY_POLICY_ON_SUCCESS: _ClassVar[DependencyPolicy]
    DEPENDENCY_POLICY_ALWAYS: _ClassVar[DependencyPolicy]

class Trigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_UNSPECIFIED: _ClassVar[Trigger]
    TRIGGER_CRON: _ClassVar[Trigger]
    TRIGGER_MANUAL: _ClassVar[Trigger]
    TRIGGER_BACKFILL: _ClassVar[Trigger]
    TRIGGER_SUBMIT: _ClassVar[Trigger]
    TRIGGER_CATCH_UP: _ClassVar[Trigger]
    TRIGGER_PARENT: _ClassVar[Trigger]
PRIORITY_UNSPECIFIED: Priority
PRIORITY_CRITICAL: Priority
PRIORITY_DEFAULT: Priority
PRIORITY_BULK: Priority
MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy
MISFIRE_POLICY_SKIP: MisfirePolicy
MISFIRE_POLICY_RUN_ONCE: MisfirePolicy
MISFIRE_POLICY_CATCH_UP: MisfirePolicy
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_FORBID: OverlapPolicy
OVERLAP_POLICY_ALLOW: OverlapPolicy
OVERLAP_POLICY_REPLACE: OverlapPolicy
OVERLAP_POLICY_BUFFER_ONE: OverlapPolicy
OVERLAP_POLICY_BUFFER_ALL: OverlapPolicy
DST_GAP_POLICY_UNSPECIFIED: DstGapPolicy
DST_GAP_POLICY_SHIFT: DstGapPolicy
DST_GAP_POLICY_SKIP: DstGapPolicy
DST_REPEATED_POLICY_UNSPECIFIED: DstRepeatedPolicy
DST_REPEATED_POLICY_FIRST: DstRepeatedPolicy
DST_REPEATED_POLICY_LAST: DstRepeatedPolicy
DST_REPEATED_POLICY_BOTH: DstRepeatedPolicy
EXECUTION_STATE_UNSPECIFIED: ExecutionState
EXECUTION_STATE_SCHEDULED: ExecutionState
EXECUTION_STATE_QUEUED: ExecutionState
EXECUTION_STATE_RUNNING: ExecutionState
EXECUTION_STATE_SUCCEEDED: ExecutionState
EXECUTION_STATE_FAILED: ExecutionState
EXECUTION_STATE_RETRY_SCHEDULED: ExecutionState
EXECUTION_STATE_DEAD: ExecutionState
EXECUTION_STATE_CANCELLED: ExecutionState
EXECUTION_STATE_SKIPPED: ExecutionState
EXECUTION_STATE_WAITING: ExecutionState
DEPENDENCY_POLICY_UNSPECIFIED: DependencyPolicy
DEPENDENCY_POLICY_ON_SUCCESS: DependencyPolicy
DEPENDENCY_POLICY_ALWAYS: DependencyPolicy
TRIGGER_UNSPECIFIED: Trigger
TRIGGER_CRON: Trigger
TRIGGER_MANUAL: Trigger
TRIGGER_BACKFILL: Trigger
TRIGGER_SUBMIT: Trigger
TRIGGER_CATCH_UP: Trigger
TRIGGER_PARENT: Trigger

class Upstream(_message.Message):
    __slots__ = ("execution_id", "state", "outcome", "idempotency_key", "type")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    state: ExecutionState
    outcome: ExecutionState
    idempotency_key: str
    type: str
    def __init__(self, execution_id: _Optional[str] = ..., state: _Optional[_Union[ExecutionState, str]] = ..., outcome: _Optional[_Union[ExecutionState, str]] = ..., idempotency_key: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("initial_backoff", "backoff_multiplier", "max_backoff", "max_attempts")
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    initial_backoff: _duration_pb2.Duration
    backoff_multiplier: float
    max_backoff: _duration_pb2.Duration
    max_attempts: int
    def __init__(self, initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backoff_multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_attempts: _Optional[int] = ...) -> None: ...

class DstPolicy(_message.Message):
    __slots__ = ("gap", "repeated_hour")
    GAP_FIELD_NUMBER: _ClassVar[int]
    REPEATED_HOUR_FIELD_NUMBER: _ClassVar[int]
    gap: DstGapPolicy
    repeated_hour: DstRepeatedPolicy
    def __init__(self, gap: _Optional[_Union[DstGapPolicy, str]] = ..., repeated_hour: _Optional[_Union[DstRepeatedPolicy, str]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("id", "tenant", "name", "cron", "timezone", "job_type", "payload_json", "priority", "retry_policy", "timeout", "misfire_policy", "max_catch_up", "overlap_policy", "dst_policy", "jitter", "paused", "version", "partition", "next_run_at", "last_scheduled_for", "alert_if_no_success_within", "last_success_at", "created_at", "updated_at", "keep_last", "keep_succeeded_for", "keep_failed_for", "parent_schedule_id", "target", "queue", "required_capabilities")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    DST_POLICY_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    ALERT_IF_NO_SUCCESS_WITHIN_FIELD_NUMBER: _ClassVar[int]
    LAST_SUCCESS_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    KEEP_SUCCEEDED_FOR_FIELD_NUMBER: _ClassVar[int]
    KEEP_FAILED_FOR_FIELD_NUMBER: _ClassVar[int]
    PARENT_SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    name: str
    cron: str
    timezone: str
    job_type: str
    payload_json: str
    priority: Priority
    retry_policy: RetryPolicy
    timeout: _duration_pb2.Duration
    misfire_policy: MisfirePolicy
    max_catch_up: int
    overlap_policy: OverlapPolicy
    dst_policy: DstPolicy
    jitter: _duration_pb2.Duration
    paused: bool
    version: int
    partition: int
    next_run_at: _timestamp_pb2.Timestamp
    last_scheduled_for: _timestamp_pb2.Timestamp
    alert_if_no_success_within: _duration_pb2.Duration
    last_success_at: _timestamp_pb2.Timestamp
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    keep_last: int
    keep_succeeded_for: _duration_pb2.Duration
    keep_failed_for: _duration_pb2.Duration
    parent_schedule_id: str
    target: HttpTarget
    queue: str
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., cron: _Optional[str] = ..., timezone: _Optional[str] = ..., job_type: _Optional[str] = ..., payload_json: _Optional[str] = ..., priority: _Optional[_Union[Priority, str]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., misfire_policy: _Optional[_Union[MisfirePolicy, str]] = ..., max_catch_up: _Optional[int] = ..., overlap_policy: _Optional[_Union[OverlapPolicy, str]] = ..., dst_policy: _Optional[_Union[DstPolicy, _Mapping]] = ..., jitter: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., paused: _Optional[bool] = ..., version: _Optional[int] = ..., partition: _Optional[int] = ..., next_run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_scheduled_for: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., alert_if_no_success_within: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., last_success_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., keep_last: _Optional[int] = ..., keep_succeeded_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., keep_failed_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., parent_schedule_id: _Optional[str] = ..., target: _Optional[_Union[HttpTarget, _Mapping]] = ..., queue: _Optional[str] = ..., required_capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class HttpTarget(_message.Message):
    __slots__ = ("url", "method", "headers", "body", "timeout_s", "signing_secret", "concurrency_limit", "rate_per_s", "burst")
    URL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    SIGNING_SECRET_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    url: str
    method: str
    headers: _containers.RepeatedCompositeFieldContainer[HttpHeader]
    body: str
    timeout_s: int
    signing_secret: str
    concurrency_limit: int
    rate_per_s: float
    burst: float
    def __init__(self, url: _Optional[str] = ..., method: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[HttpHeader, _Mapping]]] = ..., body: _Optional[str] = ..., timeout_s: _Optional[int] = ..., signing_secret: _Optional[str] = ..., concurrency_limit: _Optional[int] = ..., rate_per_s: _Optional[float] = ..., burst: _Optional[float] = ...) -> None: ...

class HttpHeader(_message.Message):
    __slots__ = ("name", "value", "secret")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    secret: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., secret: _Optional[str] = ...) -> None: ...

class Execution(_message.Message):
    __slots__ = ("id", "schedule_id", "tenant", "type", "payload_json", "partition", "scheduled_for", "run_at", "priority", "state", "state_reason", "trigger", "attempt", "max_attempts", "retry_policy", "timeout", "lease_owner", "lease_expires_at", "fencing_token", "checkpoint_json", "idempotency_key", "error", "error_type", "result_json", "cancel_requested", "created_at", "fired_at", "queued_at", "started_at", "heartbeat_at", "finished_at", "upstreams", "dependency_policy", "waiting_for", "target", "queue", "required_capabilities")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FIRED_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    UPSTREAMS_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_POLICY_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    id: str
    schedule_id: str
    tenant: str
    type: str
    payload_json: str
    partition: int
    scheduled_for: _timestamp_pb2.Timestamp
    run_at: _timestamp_pb2.Timestamp
    priority: Priority
    state: ExecutionState
    state_reason: str
    trigger: Trigger
    attempt: int
    max_attempts: int
    retry_policy: RetryPolicy
    timeout: _duration_pb2.Duration
    lease_owner: str
    lease_expires_at: _timestamp_pb2.Timestamp
    fencing_token: int
    checkpoint_json: str
    idempotency_key: str
    error: str
    error_type: str
    result_json: str
    cancel_requested: bool
    created_at: _timestamp_pb2.Timestamp
    fired_at: _timestamp_pb2.Timestamp
    queued_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    heartbeat_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    upstreams: _containers.RepeatedCompositeFieldContainer[Upstream]
    dependency_policy: DependencyPolicy
    waiting_for: int
    target: HttpTarget
    queue: str
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., tenant: _Optional[str] = ..., type: _Optional[str] = ..., payload_json: _Optional[str] = ..., partition: _Optional[int] = ..., scheduled_for: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[_Union[Priority, str]] = ..., state: _Optional[_Union[ExecutionState, str]] = ..., state_reason: _Optional[str] = ..., trigger: _Optional[_Union[Trigger, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_owner: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fencing_token: _Optional[int] = ..., checkpoint_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., error: _Optional[str] = ..., error_type: _Optional[str] = ..., result_json: _Optional[str] = ..., cancel_requested: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., queued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heartbeat_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., upstreams: _Optional[_Iterable[_Union[Upstream, _Mapping]]] = ..., dependency_policy: _Optional[_Union[DependencyPolicy, str]] = ..., waiting_for: _Optional[int] = ..., target: _Optional[_Union[HttpTarget, _Mapping]] = ..., queue: _Optional[str] = ..., required_capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class TimeRange(_message.Message):
    __slots__ = ("start_time", "end_time")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("attempt", "seq", "time", "level", "logger", "message")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LOGGER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    seq: int
    time: _timestamp_pb2.Timestamp
    level: str
    logger: str
    message: str
    def __init__(self, attempt: _Optional[int] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., level: _Optional[str] = ..., logger: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
