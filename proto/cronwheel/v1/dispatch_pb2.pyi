import datetime

from cronwheel.v1 import common_pb2 as _common_pb2
from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseExecutionsRequest(_message.Message):
    __slots__ = ("worker_id", "job_types", "max_count", "lease_duration", "wait_timeout", "queues", "queue_slots", "capabilities")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPES_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    job_types: _containers.RepeatedScalarFieldContainer[str]
    max_count: int
    lease_duration: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    queues: _containers.RepeatedScalarFieldContainer[str]
    queue_slots: _containers.RepeatedCompositeFieldContainer[QueueSlots]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., job_types: _Optional[_Iterable[str]] = ..., max_count: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., queues: _Optional[_Iterable[str]] = ..., queue_slots: _Optional[_Iterable[_Union[QueueSlots, _Mapping]]] = ..., capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueSlots(_message.Message):
    __slots__ = ("queue", "slots")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    slots: int
    def __init__(self, queue: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class LeasedExecution(_message.Message):
    __slots__ = ("execution_id", "schedule_id", "tenant", "type", "payload_json", "scheduled_for", "run_at", "attempt", "max_attempts", "fencing_token", "checkpoint_json", "lease_expires_at", "deadline", "timeout", "priority", "trigger", "trace_context", "started_at", "target_json")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    TARGET_JSON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    schedule_id: str
    tenant: str
    type: str
    payload_json: str
    scheduled_for: _timestamp_pb2.Timestamp
    run_at: _timestamp_pb2.Timestamp
    attempt: int
    max_attempts: int
    fencing_token: int
    checkpoint_json: str
    lease_expires_at: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    timeout: _duration_pb2.Duration
    priority: _common_pb2.Priority
    trigger: _common_pb2.Trigger
    trace_context: str
    started_at: _timestamp_pb2.Timestamp
    target_json: str
    def __init__(self, execution_id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., tenant: _Optional[str] = ..., type: _Optional[str] = ..., payload_json: _Optional[str] = ..., scheduled_for: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., fencing_token: _Optional[int] = ..., checkpoint_json: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., trigger: _Optional[_Union[_common_pb2.Trigger, str]] = ..., trace_context: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., target_json: _Optional[str] = ...) -> None: ...

class LeaseExecutionsResponse(_message.Message):
    __slots__ = ("executions", "held")
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[LeasedExecution]
    held: _duration_pb2.Duration
    def __init__(self, executions: _Optional[_Iterable[_Union[LeasedExecution, _Mapping]]] = ..., held: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "worker_id", "lease_extension")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXTENSION_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    worker_id: str
    lease_extension: _duration_pb2.Duration
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., lease_extension: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("lease_expires_at", "cancel_requested")
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    lease_expires_at: _timestamp_pb2.Timestamp
    cancel_requested: bool
    def __init__(self, lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "worker_id", "checkpoint_json")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    worker_id: str
    checkpoint_json: str
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., checkpoint_json: _Optional[str] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("cancel_requested",)
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    cancel_requested: bool
    def __init__(self, cancel_requested: _Optional[bool] = ...) -> None: ...

class CompleteExecutionRequest(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "worker_id", "result_json", "trace_context")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    worker_id: str
    result_json: str
    trace_context: str
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., result_json: _Optional[str] = ..., trace_context: _Optional[str] = ...) -> None: ...

class CompleteExecutionResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.ExecutionState
    def __init__(self, state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ...) -> None: ...

class CompleteExecutionsRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[CompleteExecutionRequest]
    def __init__(self, items: _Optional[_Iterable[_Union[CompleteExecutionRequest, _Mapping]]] = ...) -> None: ...

class CompleteExecutionOutcome(_message.Message):
    __slots__ = ("execution_id", "code", "message", "state")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    code: int
    message: str
    state: _common_pb2.ExecutionState
    def __init__(self, execution_id: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ...) -> None: ...

class CompleteExecutionsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[CompleteExecutionOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[CompleteExecutionOutcome, _Mapping]]] = ...) -> None: ...

class ReportTargetRunRequest(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "result_json", "error", "heartbeat", "retryable")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    result_json: str
    error: str
    heartbeat: bool
    retryable: bool
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ..., heartbeat: _Optional[bool] = ..., retryable: _Optional[bool] = ...) -> None: ...

class ReportTargetRunResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.ExecutionState
    def __init__(self, state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ...) -> None: ...

class FailExecutionRequest(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "worker_id", "error", "retryable", "error_type", "trace_context", "retry_after")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    worker_id: str
    error: str
    retryable: bool
    error_type: str
    trace_context: str
    retry_after: _duration_pb2.Duration
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., error_type: _Optional[str] = ..., trace_context: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class FailExecutionResponse(_message.Message):
    __slots__ = ("state", "next_run_at", "attempt", "max_attempts")
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.ExecutionState
    next_run_at: _timestamp_pb2.Timestamp
    attempt: int
    max_attempts: int
    def __init__(self, state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., next_run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ...) -> None: ...

class AppendLogsRequest(_message.Message):
    __slots__ = ("worker_id", "items")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    items: _containers.RepeatedCompositeFieldContainer[LogLines]
    def __init__(self, worker_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[LogLines, _Mapping]]] = ...) -> None: ...

class LogLines(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "lines")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    lines: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogLine]
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lines: _Optional[_Iterable[_Union[_common_pb2.LogLine, _Mapping]]] = ...) -> None: ...

class AppendLogsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[CompleteExecutionOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[CompleteExecutionOutcome, _Mapping]]] = ...) -> None: ...
