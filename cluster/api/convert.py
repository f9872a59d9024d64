"""Proto <-> domain conversions of the SchedulerService: ids, timestamps, durations, enums,
schedules, executions and events.

Every input conversion validates (InvalidArgument naming the field in the API's terms) so that
no malformed value reaches PostgreSQL: out-of-range timestamps and durations, open-enum
integers the contract does not define, ids that are not canonical UUIDs. Outputs set optional
fields only when the row has a value. Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel import http_target
from cronwheel.cluster.commands.lanes import capability_items
from cronwheel.cluster.commands.schedules import ScheduleSpec
from cronwheel.cluster.commands.unique import UniqueSpec
from cronwheel.cluster.commands.values import JsonText, RetryPolicy, parse_json
from cronwheel.egress import EgressPolicy
from cronwheel.errors import InvalidArgument
from cronwheel.times import from_micros, to_micros
from cronwheel.v1 import admin_pb2, common_pb2, enums, scheduler_pb2

MIN_TS = -62135596800  # 0001-01-01T00:00:00Z
MAX_TS = 253402300799  # 9999-12-31T23:59:59Z
MAX_DURATION_S = 315_576_000_000
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

# The contract's enums, from the generated stubs (cronwheel.v1.enums): number -> domain word.
PRIORITY, MISFIRE, OVERLAP = enums.PRIORITY, enums.MISFIRE, enums.OVERLAP
DST_GAP, DST_REPEATED, STATE, TRIGGER = enums.DST_GAP, enums.DST_REPEATED, enums.STATE, enums.TRIGGER


_rev = enums.by_name


def under(prefix: str, exc: InvalidArgument) -> InvalidArgument:
    """`exc` with its field path prefixed ("cron" -> "schedule.cron")."""
    detail = exc.message[len(exc.field) + 2:] if exc.message.startswith(f"{exc.field}: ") else exc.message
    return InvalidArgument(f"{prefix}.{exc.field}", detail)


@contextmanager
def fields_under(prefix: str) -> Iterator[None]:
    """Re-raise InvalidArgument with the field path prefixed (`under`)."""
    try:
        yield
    except InvalidArgument as exc:
        raise under(prefix, exc) from None


def enum(table: Mapping[int, str], value: int, field: str, default: str | None = None) -> str | None:
    """An enum's domain value; 0 (unspecified) -> default; an undefined number is refused."""
    if value == 0:
        return default
    if value not in table:
        raise InvalidArgument(field, f"unknown enum value {value}")
    return table[value]


def uuid_of(text: str, field: str, required: bool = True) -> uuid.UUID | None:
    if not text:
        if required:
            raise InvalidArgument(field, "required: a UUID")
        return None
    if not _UUID.match(text):
        raise InvalidArgument(field, f"not a UUID in canonical form: {text[:60]!r}")
    return uuid.UUID(text)


def req_uuid(text: str, field: str) -> uuid.UUID:
    u = uuid_of(text, field)
    assert u is not None
    return u


def to_dt(ts: Timestamp, field: str) -> datetime:
    seconds, nanos = ts.seconds, ts.nanos
    if not MIN_TS <= seconds <= MAX_TS:
        raise InvalidArgument(field, "out of range (0001-01-01 .. 9999-12-31)")
    if not 0 <= nanos <= 999_999_999:
        raise InvalidArgument(field, f"nanos must be 0..999999999, got {nanos}")
    return _instant(seconds, nanos // 1000)


@functools.lru_cache(maxsize=4096)
def _instant(seconds: int, micros: int) -> datetime:
    """Cached: the jobs of one SubmitJobs call often share a run_at, and datetimes are immutable."""
    return from_micros(seconds * 1_000_000 + micros)


def opt_dt(msg: Message, name: str, field: str) -> datetime | None:
    return to_dt(getattr(msg, name), field) if msg.HasField(name) else None


def to_s(d: Duration, field: str) -> float:
    if not -MAX_DURATION_S <= d.seconds <= MAX_DURATION_S or not -999_999_999 <= d.nanos <= 999_999_999 or (
            d.seconds * d.nanos < 0):
        raise InvalidArgument(field, "not a valid duration")
    return d.seconds + int(d.nanos / 1000) / 1e6


def opt_s(msg: Message, name: str, field: str) -> float | None:
    return to_s(getattr(msg, name), field) if msg.HasField(name) else None


def _stamp(micros: int) -> Timestamp:
    """Exact integer microseconds since the Unix epoch as a Timestamp."""
    return Timestamp(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


def ts(dt: datetime) -> Timestamp:
    """An aware datetime as a Timestamp, exactly."""
    return _stamp(to_micros(dt))


def epoch_ts(seconds: float) -> Timestamp:
    """Unix seconds (a float) as a Timestamp, to the microsecond."""
    return _stamp(round(seconds * 1e6))


class Converted(dict[Any, Any]):
    """`convert` of each distinct value once, for one answer whose rows share a few values (a
    claim's `now`, a herd's run_at). Its Timestamps are shared: only pass them to a message's
    constructor or CopyFrom, which copy."""

    def __init__(self, convert: Callable[[Any], Any]) -> None:
        super().__init__()
        self._convert = convert

    def __missing__(self, value: Any) -> Any:
        got = self[value] = self._convert(value)
        return got


def dur(seconds: float) -> Duration:
    micros = round(seconds * 1e6)
    return Duration(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


def expected_version(v: int) -> int | None:
    if v < 0:
        raise InvalidArgument("expected_version", f"must be >= 0, got {v}")
    return v or None


def page_size(v: int) -> int:
    if v == 0:
        return 100
    if not 1 <= v <= 1000:
        raise InvalidArgument("page_size", f"must be 0 (default 100) or 1..1000, got {v}")
    return v


# ---------------------------------------------------------------------------------- inputs


_DEFAULT_RETRY = RetryPolicy()  # frozen: one instance serves every job that gives no policy


def retry_from(msg: common_pb2.RetryPolicy, present: bool = True) -> RetryPolicy:
    """Field names are relative to the retry policy's own path (the caller prefixes)."""
    if not present:
        return _DEFAULT_RETRY
    d = _DEFAULT_RETRY
    mult = msg.backoff_multiplier
    if not math.isfinite(mult):
        raise InvalidArgument("retry_policy.backoff_multiplier", f"must be 1..100, got {mult}")
    initial = opt_s(msg, "initial_backoff", "retry_policy.initial_backoff")
    maximum = opt_s(msg, "max_backoff", "retry_policy.max_backoff")
    return RetryPolicy(initial_s=d.initial_s if initial is None else initial, multiplier=mult or d.multiplier,
                       max_s=d.max_s if maximum is None else maximum,
                       max_attempts=msg.max_attempts or d.max_attempts).validate()


def unique_from(msg: scheduler_pb2.UniqueOptions) -> UniqueSpec:
    """A job's unique options; field names relative to "unique" (the caller prefixes jobs[i])."""
    states = []
    for j, number in enumerate(msg.states):
        if number not in STATE:
            raise InvalidArgument(f"unique.states[{j}]", f"must be an execution state, got {number}")
        states.append(STATE[number])
    return UniqueSpec(by_args=msg.by_args, args_keys=tuple(msg.args_keys),
                      period_s=opt_s(msg, "period", "unique.period") or 0.0, states=tuple(states))


def _dst(msg: common_pb2.DstPolicy) -> tuple[str | None, str | None]:
    return (enum(DST_GAP, msg.gap, "dst_policy.gap"),
            enum(DST_REPEATED, msg.repeated_hour, "dst_policy.repeated_hour"))


def target_from(msg: Any, has: bool, egress: EgressPolicy | None, prefix: str = "target") -> str | None:
    """An HttpTarget message as the target's canonical JSON (None: unset), every field checked,
    the URL against the node's egress policy; field names relative to `prefix`."""
    if not has:
        return None
    heads: dict[str, Any] = {}
    for i, h in enumerate(msg.headers):
        kind = h.WhichOneof("kind")
        if kind is None:
            raise InvalidArgument(f"{prefix}.headers[{i}]", "set value or secret")
        if h.name.lower() in {k.lower() for k in heads}:
            raise InvalidArgument(f"{prefix}.headers[{i}].name", f"{h.name[:100]!r} is given twice")
        heads[h.name] = {"secret": h.secret} if kind == "secret" else h.value
    doc = {"url": msg.url, "method": msg.method, "headers": heads,
           "body": msg.body if msg.HasField("body") else None, "timeout_s": msg.timeout_s,
           "signing_secret": msg.signing_secret, "concurrency_limit": msg.concurrency_limit,
           "rate_per_s": msg.rate_per_s, "burst": msg.burst}
    return http_target.parse(doc, egress, prefix).to_json()


def target_out(value: Any) -> common_pb2.HttpTarget:
    """A stored target (JSON) as an HttpTarget message (secrets by name only: the store holds no value)."""
    t = http_target.parse(value)
    m = common_pb2.HttpTarget(url=t.url, method=t.method, timeout_s=t.timeout_s, signing_secret=t.signing_secret,
                              concurrency_limit=t.concurrency_limit or 0, rate_per_s=t.rate_per_s or 0,
                              burst=t.burst or 0)
    if t.body is not None:
        m.body = t.body
    for name, v in t.headers.items():
        if isinstance(v, http_target.SecretRef):
            m.headers.add(name=name, secret=v.name)
        else:
            m.headers.add(name=name, value=v)
    return m


def spec_from(s: Any, tenant: str, egress: EgressPolicy | None = None) -> ScheduleSpec:
    """A Schedule message (CreateSchedule) as a ScheduleSpec; fields relative to `schedule`."""
    gap, repeated = _dst(s.dst_policy)
    return ScheduleSpec(
        id=uuid_of(s.id, "id", required=False), tenant=tenant, name=s.name, cron=s.cron, timezone=s.timezone,
        job_type=s.job_type, payload=parse_json("payload_json", s.payload_json),
        priority=enum(PRIORITY, s.priority, "priority", "default") or "default",
        retry=retry_from(s.retry_policy, s.HasField("retry_policy")), timeout_s=opt_s(s, "timeout", "timeout"),
        misfire_policy=enum(MISFIRE, s.misfire_policy, "misfire_policy"),
        max_catch_up=_max_catch_up(s.max_catch_up),
        overlap_policy=enum(OVERLAP, s.overlap_policy, "overlap_policy", "allow") or "allow",
        dst_gap=gap, dst_repeated=repeated, jitter_s=opt_s(s, "jitter", "jitter") or 0.0, paused=s.paused,
        alert_if_no_success_within_s=opt_s(s, "alert_if_no_success_within", "alert_if_no_success_within"),
        keep_last=s.keep_last if s.HasField("keep_last") else None,
        keep_succeeded_for_s=opt_s(s, "keep_succeeded_for", "keep_succeeded_for"),
        keep_failed_for_s=opt_s(s, "keep_failed_for", "keep_failed_for"),
        parent_schedule_id=uuid_of(s.parent_schedule_id, "parent_schedule_id", required=False),
        target=target_from(s.target, s.HasField("target"), egress),
        queue=s.queue or None, required_capabilities=tuple(s.required_capabilities),
    )


def _max_catch_up(v: int) -> int:
    if v == 0:
        return 10
    if not 1 <= v <= 1000:
        raise InvalidArgument("max_catch_up", f"must be 0 (default 10) or 1..1000, got {v}")
    return v


RETRY_PATHS = {"retry_policy.initial_backoff": "initial_s", "retry_policy.backoff_multiplier": "multiplier",
               "retry_policy.max_backoff": "max_s", "retry_policy.max_attempts": "max_attempts"}
TOP_PATHS = ("name", "cron", "timezone", "job_type", "payload_json", "priority", "retry_policy", "timeout",
             "misfire_policy", "max_catch_up", "overlap_policy", "dst_policy", "jitter", "alert_if_no_success_within",
             "keep_last", "keep_succeeded_for", "keep_failed_for", "target", "queue", "required_capabilities")
UPDATABLE = {*TOP_PATHS, *RETRY_PATHS, "dst_policy.gap", "dst_policy.repeated_hour"}
NOT_UPDATABLE = {"id", "tenant", "paused", "version", "partition", "next_run_at", "last_scheduled_for",
                 "last_success_at", "created_at", "updated_at"}


def mask_paths(paths: list[str]) -> list[str]:
    """The update_mask checked and expanded ("*" -> every updatable top-level field)."""
    if not paths:
        raise InvalidArgument("update_mask", "required")
    if "*" in paths:
        if set(paths) != {"*"}:
            raise InvalidArgument("update_mask", "'*' must be the only path")
        return list(TOP_PATHS)
    for p in paths:
        if p in NOT_UPDATABLE:
            raise InvalidArgument("update_mask", f"{p!r} is output only or immutable")
        if p not in UPDATABLE:
            raise InvalidArgument("update_mask", f"unknown path {p[:100]!r}")
    return list(dict.fromkeys(paths))


def changes_from(s: Any, paths: list[str], egress: EgressPolicy | None = None) -> dict[str, Any]:
    """The new values named by (checked) mask paths, as update_schedule changes; fields relative
    to `schedule`. A named field unset in the message takes its default."""
    c: dict[str, Any] = {}
    d = RetryPolicy()
    for p in paths:
        if p in ("name", "cron", "timezone", "job_type"):
            c[p] = getattr(s, p)
        elif p == "payload_json":
            c["payload"] = parse_json("payload_json", s.payload_json)
        elif p == "priority":
            c["priority"] = enum(PRIORITY, s.priority, "priority", "default")
        elif p == "retry_policy":
            c["retry"] = retry_from(s.retry_policy, s.HasField("retry_policy"))
        elif p in RETRY_PATHS:
            sub = p.split(".", 1)[1]
            attr = RETRY_PATHS[p]
            if sub in ("initial_backoff", "max_backoff"):
                v: Any = opt_s(s.retry_policy, sub, p)
                c[f"retry.{attr}"] = getattr(d, attr) if v is None else v
            else:
                v = getattr(s.retry_policy, sub)
                if isinstance(v, float) and not math.isfinite(v):
                    raise InvalidArgument(p, f"must be 1..100, got {v}")
                c[f"retry.{attr}"] = v or getattr(d, attr)
        elif p == "timeout":
            c["timeout_s"] = opt_s(s, "timeout", "timeout")
        elif p == "misfire_policy":
            c["misfire_policy"] = enum(MISFIRE, s.misfire_policy, "misfire_policy")
        elif p == "max_catch_up":
            c["max_catch_up"] = _max_catch_up(s.max_catch_up)
        elif p == "overlap_policy":
            c["overlap_policy"] = enum(OVERLAP, s.overlap_policy, "overlap_policy", "allow")
        elif p.startswith("dst_policy"):
            gap, repeated = _dst(s.dst_policy)
            if p in ("dst_policy", "dst_policy.gap"):
                c["dst_gap"] = gap
            if p in ("dst_policy", "dst_policy.repeated_hour"):
                c["dst_repeated"] = repeated
        elif p == "jitter":
            c["jitter_s"] = opt_s(s, "jitter", "jitter") or 0.0
        elif p == "alert_if_no_success_within":
            c["alert_if_no_success_within_s"] = opt_s(s, p, p)
        elif p == "keep_last":
            c["keep_last"] = s.keep_last if s.HasField("keep_last") else None
        elif p in ("keep_succeeded_for", "keep_failed_for"):
            c[f"{p}_s"] = opt_s(s, p, p)
        elif p == "target":
            c["target"] = target_from(s.target, s.HasField("target"), egress)
            if c["target"] is not None and "job_type" not in paths:
                c["job_type"] = ""  # a target without a job type: the schedule's becomes "http"
        elif p == "queue":
            c["queue"] = s.queue or None
        elif p == "required_capabilities":
            c["required_capabilities"] = tuple(s.required_capabilities)
    return c


# ---------------------------------------------------------------------------------- outputs


def _set_ts(msg: Any, name: str, value: datetime | None) -> None:
    if value is not None:
        getattr(msg, name).CopyFrom(ts(value))


def _set_dur(msg: Any, name: str, value: float | None) -> None:
    if value is not None:
        getattr(msg, name).CopyFrom(dur(value))


def _retry_out(initial: float, mult: float, maximum: float, attempts: int) -> common_pb2.RetryPolicy:
    return common_pb2.RetryPolicy(initial_backoff=dur(initial), backoff_multiplier=mult, max_backoff=dur(maximum),
                                  max_attempts=attempts)


def schedule_out(r: Mapping[str, Any]) -> common_pb2.Schedule:
    s = common_pb2.Schedule(
        id=str(r["id"]), tenant=r["tenant"], name=r["name"], cron=r["cron"], timezone=r["timezone"],
        job_type=r["job_type"], payload_json=str(r["payload"]), priority=_rev(PRIORITY)[r["priority"]],
        retry_policy=_retry_out(r["retry_initial_s"], r["retry_multiplier"], r["retry_max_s"], r["max_attempts"]),
        misfire_policy=_rev(MISFIRE)[r["misfire_policy"]], max_catch_up=r["max_catch_up"],
        overlap_policy=_rev(OVERLAP)[r["overlap_policy"]],
        dst_policy=common_pb2.DstPolicy(gap=_rev(DST_GAP).get(r["dst_gap"] or "", 0),
                                        repeated_hour=_rev(DST_REPEATED).get(r["dst_repeated"] or "", 0)),
        paused=r["paused"], version=r["version"], partition=r["partition"],
        queue=r.get("queue") or "default", required_capabilities=capability_items(r.get("required_capabilities") or ""),
    )
    _set_dur(s, "timeout", r["timeout_s"])
    _set_dur(s, "jitter", r["jitter_s"] or None)
    _set_dur(s, "alert_if_no_success_within", r["alert_if_no_success_within_s"])
    if r.get("keep_last") is not None:
        s.keep_last = r["keep_last"]
    _set_dur(s, "keep_succeeded_for", r.get("keep_succeeded_for_s"))
    _set_dur(s, "keep_failed_for", r.get("keep_failed_for_s"))
    if r.get("target") is not None:
        s.target.CopyFrom(target_out(r["target"]))
    for name in ("next_run_at", "last_scheduled_for", "last_success_at", "created_at", "updated_at"):
        _set_ts(s, name, r[name])
    if r.get("parent_schedule_id") is not None:
        s.parent_schedule_id = str(r["parent_schedule_id"])
    return s


def execution_out(r: Mapping[str, Any]) -> common_pb2.Execution:
    e = common_pb2.Execution(
        id=str(r["id"]), schedule_id=str(r["schedule_id"] or ""), tenant=r["tenant"], type=r["type"],
        payload_json=str(r["payload"]), partition=r["partition"], priority=_rev(PRIORITY)[r["priority"]],
        state=_rev(STATE)[r["state"]], state_reason=r["state_reason"] or "", trigger=_rev(TRIGGER)[r["trigger"]],
        attempt=r["attempt"], max_attempts=r["max_attempts"],
        retry_policy=_retry_out(r["retry_initial_s"], r["retry_multiplier"], r["retry_max_s"], r["max_attempts"]),
        lease_owner=r["lease_owner"] or "", fencing_token=r["fencing_token"],
        checkpoint_json=str(r["checkpoint"] or ""), idempotency_key=r["idempotency_key"] or "",
        error=r["error"] or "", error_type=r["error_type"] or "", result_json=str(r["result"] or ""),
        cancel_requested=r["cancel_requested"], queue=r.get("queue") or "default",
        required_capabilities=capability_items(r.get("required_capabilities") or ""),
    )
    _set_dur(e, "timeout", r["timeout_s"])
    _set_ts(e, "lease_expires_at", r["lease_expires"])
    if r.get("target") is not None:
        e.target.CopyFrom(target_out(r["target"]))
    for name in ("scheduled_for", "run_at", "created_at", "fired_at", "queued_at", "started_at", "heartbeat_at",
                 "finished_at"):
        _set_ts(e, name, r[name])
    if r.get("dependency_policy"):
        e.dependency_policy = _rev(enums.DEPENDENCY_POLICY)[r["dependency_policy"]]
        e.waiting_for = r.get("waiting_for") or 0
    return e


def upstreams_out(e: common_pb2.Execution, ups: Sequence[Mapping[str, Any]]) -> common_pb2.Execution:
    """`e` with what it waits (or waited) for (storage dependencies.upstreams_of)."""
    st = _rev(STATE)
    for u in ups:
        e.upstreams.add(execution_id=str(u["upstream_id"]), state=st.get(u["state"] or "", 0),
                        outcome=st.get(u["outcome"] or "", 0), idempotency_key=u["idempotency_key"] or "",
                        type=u["type"] or "")
    return e


def event_out(r: Mapping[str, Any]) -> admin_pb2.Event:
    ev = admin_pb2.Event(id=r["id"], tenant=r["tenant"] or "", kind=r["kind"],
                         schedule_id=str(r["schedule_id"] or ""), execution_id=str(r["execution_id"] or ""),
                         actor=r["actor"] or "", alert=r["alert"], data_json=str(r["data"] or "{}"))
    if r["partition"] is not None:
        ev.partition = r["partition"]
    _set_ts(ev, "at", r["at"])
    return ev


__all__ = ["JsonText", "changes_from", "enum", "event_out", "execution_out", "expected_version", "fields_under",
           "mask_paths", "opt_dt", "opt_s", "page_size", "req_uuid", "retry_from", "schedule_out", "spec_from",
           "to_dt", "ts", "upstreams_out", "uuid_of"]
