"""A LeaseExecutions answer (cluster/api/dispatch_service.py `add_leased`): each run's fields, its own
instants even where runs share some (the conversion is kept per instant), and the optional parts."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.cluster.api.dispatch_service import add_leased
from cronwheel.storage.dispatch import Leased
from cronwheel.v1 import common_pb2, dispatch_pb2

T = 1_800_000_000.123456


def run(i: int, **kw: object) -> Leased:
    base = dict(id=f"00000000-0000-7000-8000-00000000000{i}", schedule_id=None, tenant="acme", type="email",
                payload=f'{{"i": {i}}}', scheduled_for=T, run_at=T, attempt=1, max_attempts=5, fencing_token=7 + i,
                checkpoint=None, lease_expires=T + 60.5, timeout_s=None, priority="default", trigger="submit",
                started_at=T + 0.25, trace_context=None)
    base.update(kw)
    return Leased(**base)  # type: ignore[arg-type]


def stamp(seconds: float) -> Timestamp:
    micros = round(seconds * 1e6)
    return Timestamp(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


def test_each_run_keeps_its_own_fields_and_instants() -> None:
    rows = [run(1), run(2, run_at=T + 1.5, scheduled_for=T - 3, schedule_id="00000000-0000-4000-8000-0000000000aa",
                        checkpoint='{"step": 2}', priority="critical", trigger="cron"),
            run(3, timeout_s=8.5)]
    resp = dispatch_pb2.LeaseExecutionsResponse()
    add_leased(resp, rows)
    a, b, c = resp.executions
    assert (a.execution_id, a.tenant, a.type, a.payload_json, a.attempt, a.max_attempts, a.fencing_token) == (
        rows[0].id, "acme", "email", '{"i": 1}', 1, 5, 8)
    assert a.run_at == a.scheduled_for == stamp(T) and a.started_at == stamp(T + 0.25)
    assert a.lease_expires_at == stamp(T + 60.5) and not a.HasField("timeout") and not a.HasField("deadline")
    assert b.run_at == stamp(T + 1.5) and b.scheduled_for == stamp(T - 3)  # not the first run's
    assert (b.schedule_id, b.checkpoint_json) == ("00000000-0000-4000-8000-0000000000aa", '{"step": 2}')
    assert b.priority == common_pb2.PRIORITY_CRITICAL and b.trigger == common_pb2.TRIGGER_CRON
    assert c.timeout.ToNanoseconds() == 8_500_000_000 and c.deadline == stamp(T + 0.25 + 8.5)
    assert a.started_at == c.started_at and a.lease_expires_at == c.lease_expires_at
