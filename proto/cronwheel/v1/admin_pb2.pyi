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

class DeliveryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_STATE_UNSPECIFIED: _ClassVar[DeliveryState]
    DELIVERY_STATE_PENDING: _ClassVar[DeliveryState]
    DELIVERY_STATE_DELIVERED: _ClassVar[DeliveryState]
    DELIVERY_STATE_FAILED: _ClassVar[DeliveryState]
DELIVERY_STATE_UNSPECIFIED: DeliveryState
DELIVERY_STATE_PENDING: DeliveryState
DELIVERY_STATE_DELIVERED: DeliveryState
DELIVERY_STATE_FAILED: DeliveryState

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Member(_message.Message):
    __slots__ = ("node_id", "address", "lease_deadline", "partitions", "wheel_size", "fire_lag_p50", "fire_lag_p99", "stats_at", "version", "started_at", "auth_mode", "egress_allow")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    WHEEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    FIRE_LAG_P50_FIELD_NUMBER: _ClassVar[int]
    FIRE_LAG_P99_FIELD_NUMBER: _ClassVar[int]
    STATS_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    AUTH_MODE_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ALLOW_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    lease_deadline: _timestamp_pb2.Timestamp
    partitions: _containers.RepeatedScalarFieldContainer[int]
    wheel_size: int
    fire_lag_p50: _duration_pb2.Duration
    fire_lag_p99: _duration_pb2.Duration
    stats_at: _timestamp_pb2.Timestamp
    version: str
    started_at: _timestamp_pb2.Timestamp
    auth_mode: str
    egress_allow: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., lease_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., partitions: _Optional[_Iterable[int]] = ..., wheel_size: _Optional[int] = ..., fire_lag_p50: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fire_lag_p99: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stats_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., auth_mode: _Optional[str] = ..., egress_allow: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionStatus(_message.Message):
    __slots__ = ("id", "owner", "epoch", "fenced_owner", "fenced_epoch", "acquired_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FENCED_OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    owner: str
    epoch: int
    fenced_owner: str
    fenced_epoch: int
    acquired_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., owner: _Optional[str] = ..., epoch: _Optional[int] = ..., fenced_owner: _Optional[str] = ..., fenced_epoch: _Optional[int] = ..., acquired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class QueueDepth(_message.Message):
    __slots__ = ("priority", "queued", "oldest_run_at")
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_RUN_AT_FIELD_NUMBER: _ClassVar[int]
    priority: _common_pb2.Priority
    queued: int
    oldest_run_at: _timestamp_pb2.Timestamp
    def __init__(self, priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., queued: _Optional[int] = ..., oldest_run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("cluster_name", "partition_count", "answered_by", "observed_at", "members", "partitions", "queue_depths")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTHS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    partition_count: int
    answered_by: str
    observed_at: _timestamp_pb2.Timestamp
    members: _containers.RepeatedCompositeFieldContainer[Member]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionStatus]
    queue_depths: _containers.RepeatedCompositeFieldContainer[QueueDepth]
    def __init__(self, cluster_name: _Optional[str] = ..., partition_count: _Optional[int] = ..., answered_by: _Optional[str] = ..., observed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionStatus, _Mapping]]] = ..., queue_depths: _Optional[_Iterable[_Union[QueueDepth, _Mapping]]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("id", "at", "tenant", "kind", "schedule_id", "execution_id", "partition", "actor", "alert", "data_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ALERT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    id: int
    at: _timestamp_pb2.Timestamp
    tenant: str
    kind: str
    schedule_id: str
    execution_id: str
    partition: int
    actor: str
    alert: bool
    data_json: str
    def __init__(self, id: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., kind: _Optional[str] = ..., schedule_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., partition: _Optional[int] = ..., actor: _Optional[str] = ..., alert: _Optional[bool] = ..., data_json: _Optional[str] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("tenant", "schedule_id", "execution_id", "kind", "alerts_only", "after_id", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ALERTS_ONLY_FIELD_NUMBER: _ClassVar[int]
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    schedule_id: str
    execution_id: str
    kind: str
    alerts_only: bool
    after_id: int
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., schedule_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., kind: _Optional[str] = ..., alerts_only: _Optional[bool] = ..., after_id: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Webhook(_message.Message):
    __slots__ = ("id", "tenant", "url", "kinds", "schedule_id", "description", "created_at", "created_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    url: str
    kinds: _containers.RepeatedScalarFieldContainer[str]
    schedule_id: str
    description: str
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., url: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., schedule_id: _Optional[str] = ..., description: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ...) -> None: ...

class CreateWebhookRequest(_message.Message):
    __slots__ = ("url", "kinds", "tenant", "schedule_id", "secret", "description")
    URL_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    url: str
    kinds: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    schedule_id: str
    secret: str
    description: str
    def __init__(self, url: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., tenant: _Optional[str] = ..., schedule_id: _Optional[str] = ..., secret: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ("webhook", "secret")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    secret: str
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = ("tenant", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ("webhooks", "next_page_token")
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[Webhook]
    next_page_token: str
    def __init__(self, webhooks: _Optional[_Iterable[_Union[Webhook, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ("webhook_id",)
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    def __init__(self, webhook_id: _Optional[str] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = ("dropped_pending",)
    DROPPED_PENDING_FIELD_NUMBER: _ClassVar[int]
    dropped_pending: int
    def __init__(self, dropped_pending: _Optional[int] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("id", "webhook_id", "event_id", "kind", "state", "attempts", "next_attempt_at", "node", "last_status", "last_error", "created_at", "finished_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    webhook_id: str
    event_id: int
    kind: str
    state: DeliveryState
    attempts: int
    next_attempt_at: _timestamp_pb2.Timestamp
    node: str
    last_status: int
    last_error: str
    created_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., webhook_id: _Optional[str] = ..., event_id: _Optional[int] = ..., kind: _Optional[str] = ..., state: _Optional[_Union[DeliveryState, str]] = ..., attempts: _Optional[int] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node: _Optional[str] = ..., last_status: _Optional[int] = ..., last_error: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDeliveriesRequest(_message.Message):
    __slots__ = ("webhook_id", "event_id", "state", "tenant", "page_size", "page_token")
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    event_id: int
    state: DeliveryState
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, webhook_id: _Optional[str] = ..., event_id: _Optional[int] = ..., state: _Optional[_Union[DeliveryState, str]] = ..., tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries", "next_page_token")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    next_page_token: str
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TenantQueue(_message.Message):
    __slots__ = ("name", "max_concurrency", "weight")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_concurrency: int
    weight: int
    def __init__(self, name: _Optional[str] = ..., max_concurrency: _Optional[int] = ..., weight: _Optional[int] = ...) -> None: ...

class SetTenantQueueRequest(_message.Message):
    __slots__ = ("tenant_id", "queue")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    queue: TenantQueue
    def __init__(self, tenant_id: _Optional[str] = ..., queue: _Optional[_Union[TenantQueue, _Mapping]] = ...) -> None: ...

class SetTenantQueueResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[TenantQueue]
    def __init__(self, queues: _Optional[_Iterable[_Union[TenantQueue, _Mapping]]] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("id", "max_concurrency", "rate_per_s", "burst", "weight", "max_schedules", "max_executions_per_day", "created_at", "egress_rules", "queues")
    ID_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    MAX_EXECUTIONS_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EGRESS_RULES_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    id: str
    max_concurrency: int
    rate_per_s: float
    burst: float
    weight: int
    max_schedules: int
    max_executions_per_day: int
    created_at: _timestamp_pb2.Timestamp
    egress_rules: _containers.RepeatedScalarFieldContainer[str]
    queues: _containers.RepeatedCompositeFieldContainer[TenantQueue]
    def __init__(self, id: _Optional[str] = ..., max_concurrency: _Optional[int] = ..., rate_per_s: _Optional[float] = ..., burst: _Optional[float] = ..., weight: _Optional[int] = ..., max_schedules: _Optional[int] = ..., max_executions_per_day: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., egress_rules: _Optional[_Iterable[str]] = ..., queues: _Optional[_Iterable[_Union[TenantQueue, _Mapping]]] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class CreateTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class UpdateTenantRequest(_message.Message):
    __slots__ = ("tenant", "update_mask")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class GetTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "next_page_token")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    next_page_token: str
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("id", "name", "tenant", "admin", "created_at", "created_by", "expires_at", "revoked_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    tenant: str
    admin: bool
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    expires_at: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., admin: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("name", "tenant", "admin", "expires_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    admin: bool
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., admin: _Optional[bool] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: Token
    secret: str
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("tenant", "include_revoked", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REVOKED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    include_revoked: bool
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., include_revoked: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens", "next_page_token")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    next_page_token: str
    def __init__(self, tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    def __init__(self, token_id: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: Token
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ...) -> None: ...
