import datetime

from cronwheel.v1 import common_pb2 as _common_pb2
from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TickOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TICK_OUTCOME_UNSPECIFIED: _ClassVar[TickOutcome]
    TICK_OUTCOME_FIRED: _ClassVar[TickOutcome]
    TICK_OUTCOME_SKIPPED_OVERLAP: _ClassVar[TickOutcome]
    TICK_OUTCOME_SKIPPED_MISFIRE: _ClassVar[TickOutcome]
    TICK_OUTCOME_COALESCED_MISFIRE: _ClassVar[TickOutcome]
    TICK_OUTCOME_REFUSED_CATCH_UP: _ClassVar[TickOutcome]
    TICK_OUTCOME_PAUSED: _ClassVar[TickOutcome]
    TICK_OUTCOME_NOT_YET_CREATED: _ClassVar[TickOutcome]
    TICK_OUTCOME_DELETED: _ClassVar[TickOutcome]
    TICK_OUTCOME_DST_SHIFTED: _ClassVar[TickOutcome]
    TICK_OUTCOME_DST_SKIPPED: _ClassVar[TickOutcome]
    TICK_OUTCOME_DST_REPEATED: _ClassVar[TickOutcome]
    TICK_OUTCOME_MISSED: _ClassVar[TickOutcome]
    TICK_OUTCOME_PENDING: _ClassVar[TickOutcome]
    TICK_OUTCOME_PRUNED_BY_RETENTION: _ClassVar[TickOutcome]
    TICK_OUTCOME_SKIPPED_QUOTA: _ClassVar[TickOutcome]

class Deduplication(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEDUPLICATION_UNSPECIFIED: _ClassVar[Deduplication]
    DEDUPLICATION_IDEMPOTENCY_KEY: _ClassVar[Deduplication]
    DEDUPLICATION_UNIQUE: _ClassVar[Deduplication]
TICK_OUTCOME_UNSPECIFIED: TickOutcome
TICK_OUTCOME_FIRED: TickOutcome
TICK_OUTCOME_SKIPPED_OVERLAP: TickOutcome
TICK_OUTCOME_SKIPPED_MISFIRE: TickOutcome
TICK_OUTCOME_COALESCED_MISFIRE: TickOutcome
TICK_OUTCOME_REFUSED_CATCH_UP: TickOutcome
TICK_OUTCOME_PAUSED: TickOutcome
TICK_OUTCOME_NOT_YET_CREATED: TickOutcome
TICK_OUTCOME_DELETED: TickOutcome
TICK_OUTCOME_DST_SHIFTED: TickOutcome
TICK_OUTCOME_DST_SKIPPED: TickOutcome
TICK_OUTCOME_DST_REPEATED: TickOutcome
TICK_OUTCOME_MISSED: TickOutcome
TICK_OUTCOME_PENDING: TickOutcome
TICK_OUTCOME_PRUNED_BY_RETENTION: TickOutcome
TICK_OUTCOME_SKIPPED_QUOTA: TickOutcome
DEDUPLICATION_UNSPECIFIED: Deduplication
DEDUPLICATION_IDEMPOTENCY_KEY: Deduplication
DEDUPLICATION_UNIQUE: Deduplication

class CreateScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("schedule", "expected_version", "update_mask")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    expected_version: int
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ..., expected_version: _Optional[int] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("tenant", "job_type", "paused", "page_size", "page_token", "name_contains", "order_by")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    job_type: str
    paused: bool
    page_size: int
    page_token: str
    name_contains: str
    order_by: str
    def __init__(self, tenant: _Optional[str] = ..., job_type: _Optional[str] = ..., paused: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., name_contains: _Optional[str] = ..., order_by: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[_common_pb2.Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[_common_pb2.Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "expected_version", "cancel_pending", "reason")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_PENDING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    expected_version: int
    cancel_pending: bool
    reason: str
    def __init__(self, schedule_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., cancel_pending: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("cancelled_count",)
    CANCELLED_COUNT_FIELD_NUMBER: _ClassVar[int]
    cancelled_count: int
    def __init__(self, cancelled_count: _Optional[int] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "reason", "expected_version")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    reason: str
    expected_version: int
    def __init__(self, schedule_id: _Optional[str] = ..., reason: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "reason", "expected_version")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    reason: str
    expected_version: int
    def __init__(self, schedule_id: _Optional[str] = ..., reason: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _common_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_common_pb2.Schedule, _Mapping]] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "payload_json", "overlap_policy", "idempotency_key", "reason")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    payload_json: str
    overlap_policy: _common_pb2.OverlapPolicy
    idempotency_key: str
    reason: str
    def __init__(self, schedule_id: _Optional[str] = ..., payload_json: _Optional[str] = ..., overlap_policy: _Optional[_Union[_common_pb2.OverlapPolicy, str]] = ..., idempotency_key: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("execution", "deduplicated")
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    execution: _common_pb2.Execution
    deduplicated: bool
    def __init__(self, execution: _Optional[_Union[_common_pb2.Execution, _Mapping]] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class BackfillScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "range", "reason")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    range: _common_pb2.TimeRange
    reason: str
    def __init__(self, schedule_id: _Optional[str] = ..., range: _Optional[_Union[_common_pb2.TimeRange, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class BackfillScheduleResponse(_message.Message):
    __slots__ = ("created_count", "existing_count", "execution_ids")
    CREATED_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXISTING_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_IDS_FIELD_NUMBER: _ClassVar[int]
    created_count: int
    existing_count: int
    execution_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, created_count: _Optional[int] = ..., existing_count: _Optional[int] = ..., execution_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("cron", "timezone", "dst_policy", "jitter", "schedule_id")
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    DST_POLICY_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    cron: str
    timezone: str
    dst_policy: _common_pb2.DstPolicy
    jitter: _duration_pb2.Duration
    schedule_id: str
    def __init__(self, cron: _Optional[str] = ..., timezone: _Optional[str] = ..., dst_policy: _Optional[_Union[_common_pb2.DstPolicy, _Mapping]] = ..., jitter: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class PreviewScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "spec", "count", "start_time")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    spec: ScheduleSpec
    count: int
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, schedule_id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., count: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PreviewedTick(_message.Message):
    __slots__ = ("scheduled_for", "run_at", "local_time", "note")
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIME_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    scheduled_for: _timestamp_pb2.Timestamp
    run_at: _timestamp_pb2.Timestamp
    local_time: str
    note: str
    def __init__(self, scheduled_for: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_time: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class PreviewScheduleResponse(_message.Message):
    __slots__ = ("ticks",)
    TICKS_FIELD_NUMBER: _ClassVar[int]
    ticks: _containers.RepeatedCompositeFieldContainer[PreviewedTick]
    def __init__(self, ticks: _Optional[_Iterable[_Union[PreviewedTick, _Mapping]]] = ...) -> None: ...

class ExplainScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "range", "page_size", "page_token")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    range: _common_pb2.TimeRange
    page_size: int
    page_token: str
    def __init__(self, schedule_id: _Optional[str] = ..., range: _Optional[_Union[_common_pb2.TimeRange, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ExplainedTick(_message.Message):
    __slots__ = ("scheduled_for", "outcome", "execution_id", "execution_state", "reason", "fire_lag")
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FIRE_LAG_FIELD_NUMBER: _ClassVar[int]
    scheduled_for: _timestamp_pb2.Timestamp
    outcome: TickOutcome
    execution_id: str
    execution_state: _common_pb2.ExecutionState
    reason: str
    fire_lag: _duration_pb2.Duration
    def __init__(self, scheduled_for: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[TickOutcome, str]] = ..., execution_id: _Optional[str] = ..., execution_state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., reason: _Optional[str] = ..., fire_lag: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ExplainScheduleResponse(_message.Message):
    __slots__ = ("ticks", "next_page_token", "notes")
    TICKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    ticks: _containers.RepeatedCompositeFieldContainer[ExplainedTick]
    next_page_token: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ticks: _Optional[_Iterable[_Union[ExplainedTick, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("tenant", "type", "payload_json", "run_at", "priority", "retry_policy", "timeout", "idempotency_key", "unique", "concurrency_key", "concurrency_limit", "depends_on", "dependency_policy", "target", "queue", "required_capabilities")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    type: str
    payload_json: str
    run_at: _timestamp_pb2.Timestamp
    priority: _common_pb2.Priority
    retry_policy: _common_pb2.RetryPolicy
    timeout: _duration_pb2.Duration
    idempotency_key: str
    unique: UniqueOptions
    concurrency_key: str
    concurrency_limit: int
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    dependency_policy: _common_pb2.DependencyPolicy
    target: _common_pb2.HttpTarget
    queue: str
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[str] = ..., type: _Optional[str] = ..., payload_json: _Optional[str] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., unique: _Optional[_Union[UniqueOptions, _Mapping]] = ..., concurrency_key: _Optional[str] = ..., concurrency_limit: _Optional[int] = ..., depends_on: _Optional[_Iterable[str]] = ..., dependency_policy: _Optional[_Union[_common_pb2.DependencyPolicy, str]] = ..., target: _Optional[_Union[_common_pb2.HttpTarget, _Mapping]] = ..., queue: _Optional[str] = ..., required_capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("execution", "deduplicated", "deduplicated_by")
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_BY_FIELD_NUMBER: _ClassVar[int]
    execution: _common_pb2.Execution
    deduplicated: bool
    deduplicated_by: Deduplication
    def __init__(self, execution: _Optional[_Union[_common_pb2.Execution, _Mapping]] = ..., deduplicated: _Optional[bool] = ..., deduplicated_by: _Optional[_Union[Deduplication, str]] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SubmitJobRequest]
    def __init__(self, jobs: _Optional[_Iterable[_Union[SubmitJobRequest, _Mapping]]] = ...) -> None: ...

class SubmittedJob(_message.Message):
    __slots__ = ("execution_id", "deduplicated", "state", "partition", "run_at", "deduplicated_by")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_BY_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    deduplicated: bool
    state: _common_pb2.ExecutionState
    partition: int
    run_at: _timestamp_pb2.Timestamp
    deduplicated_by: Deduplication
    def __init__(self, execution_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., partition: _Optional[int] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deduplicated_by: _Optional[_Union[Deduplication, str]] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmittedJob]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmittedJob, _Mapping]]] = ...) -> None: ...

class GetExecutionRequest(_message.Message):
    __slots__ = ("execution_id",)
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    def __init__(self, execution_id: _Optional[str] = ...) -> None: ...

class GetExecutionResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: _common_pb2.Execution
    def __init__(self, execution: _Optional[_Union[_common_pb2.Execution, _Mapping]] = ...) -> None: ...

class GetExecutionLogsRequest(_message.Message):
    __slots__ = ("execution_id", "attempt", "after_attempt", "after_seq", "page_size")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    AFTER_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    attempt: int
    after_attempt: int
    after_seq: int
    page_size: int
    def __init__(self, execution_id: _Optional[str] = ..., attempt: _Optional[int] = ..., after_attempt: _Optional[int] = ..., after_seq: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class GetExecutionLogsResponse(_message.Message):
    __slots__ = ("lines", "state", "final", "more")
    LINES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogLine]
    state: _common_pb2.ExecutionState
    final: bool
    more: bool
    def __init__(self, lines: _Optional[_Iterable[_Union[_common_pb2.LogLine, _Mapping]]] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., final: _Optional[bool] = ..., more: _Optional[bool] = ...) -> None: ...

class ListExecutionsRequest(_message.Message):
    __slots__ = ("tenant", "schedule_id", "states", "scheduled_for", "type", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    schedule_id: str
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.ExecutionState]
    scheduled_for: _common_pb2.TimeRange
    type: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., schedule_id: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_common_pb2.ExecutionState, str]]] = ..., scheduled_for: _Optional[_Union[_common_pb2.TimeRange, _Mapping]] = ..., type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListExecutionsResponse(_message.Message):
    __slots__ = ("executions", "next_page_token")
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[_common_pb2.Execution]
    next_page_token: str
    def __init__(self, executions: _Optional[_Iterable[_Union[_common_pb2.Execution, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelExecutionRequest(_message.Message):
    __slots__ = ("execution_id", "reason")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    reason: str
    def __init__(self, execution_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelExecutionResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: _common_pb2.Execution
    def __init__(self, execution: _Optional[_Union[_common_pb2.Execution, _Mapping]] = ...) -> None: ...

class RetryExecutionRequest(_message.Message):
    __slots__ = ("execution_id", "additional_attempts", "run_at", "reason")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    additional_attempts: int
    run_at: _timestamp_pb2.Timestamp
    reason: str
    def __init__(self, execution_id: _Optional[str] = ..., additional_attempts: _Optional[int] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class RetryExecutionResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: _common_pb2.Execution
    def __init__(self, execution: _Optional[_Union[_common_pb2.Execution, _Mapping]] = ...) -> None: ...

class UniqueOptions(_message.Message):
    __slots__ = ("by_args", "args_keys", "period", "states")
    BY_ARGS_FIELD_NUMBER: _ClassVar[int]
    ARGS_KEYS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    by_args: bool
    args_keys: _containers.RepeatedScalarFieldContainer[str]
    period: _duration_pb2.Duration
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.ExecutionState]
    def __init__(self, by_args: _Optional[bool] = ..., args_keys: _Optional[_Iterable[str]] = ..., period: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., states: _Optional[_Iterable[_Union[_common_pb2.ExecutionState, str]]] = ...) -> None: ...
