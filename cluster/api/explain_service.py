"""ExplainSchedule at the gRPC edge: validation of the window, paging, conversion."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta

from cronwheel.cluster.api import convert as cv
from cronwheel.cluster.commands.explain import Explained, alerts, explain, load_executions, load_facts, page_end
from cronwheel.errors import InvalidArgument
from cronwheel.storage import PgStore
from cronwheel.v1 import enums, scheduler_pb2
from cronwheel.v1.enums import by_name

OUTCOME = {name.removeprefix("TICK_OUTCOME_"): v for name, v in scheduler_pb2.TickOutcome.items()}
STATE = by_name(enums.STATE)
DEFAULT_RETENTION = timedelta(days=30)


def _page(token: str, start: datetime, end: datetime) -> datetime:
    """A page token carries the instant the next page starts at (and the window, checked)."""
    if not token:
        return start
    try:
        raw = base64.urlsafe_b64decode(token.encode()).decode()
        at, s, e = raw.split("|")
        if s != start.isoformat() or e != end.isoformat():
            raise ValueError("window changed")
        return datetime.fromisoformat(at)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("page_token", "not a token of this request (window and schedule must not change)") \
            from None


def _token(at: datetime, start: datetime, end: datetime) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{start.isoformat()}|{end.isoformat()}".encode()).decode()


def _tick(e: Explained) -> scheduler_pb2.ExplainedTick:
    m = scheduler_pb2.ExplainedTick(outcome=OUTCOME[e.outcome], reason=e.reason,
                                    execution_id=str(e.execution_id or ""),
                                    execution_state=STATE.get(e.execution_state or "", 0))
    m.scheduled_for.FromDatetime(e.tick)
    if e.fire_lag_s is not None and e.outcome in ("FIRED", "DST_SHIFTED"):
        m.fire_lag.FromNanoseconds(int(e.fire_lag_s * 1e9))
    return m


async def explain_schedule(store: PgStore, now: datetime, request: scheduler_pb2.ExplainScheduleRequest,
                           scope: str | None,
                           retention: timedelta = DEFAULT_RETENTION) -> scheduler_pb2.ExplainScheduleResponse:
    sid = cv.req_uuid(request.schedule_id, "schedule_id")  # canonical form, like every other id
    start = cv.opt_dt(request.range, "start_time", "range.start_time")  # in range (0001..9999)
    if start is None:
        raise InvalidArgument("range.start_time", "is required")
    end = cv.opt_dt(request.range, "end_time", "range.end_time") or now
    if end <= start:
        raise InvalidArgument("range", f"end_time ({end.isoformat()}) must be after start_time ({start.isoformat()})")
    if end - start > retention:
        raise InvalidArgument("range", f"the window is longer than the retention of records "
                                       f"({retention.days} days): narrow it")
    if start < now - retention:
        raise InvalidArgument("range.start_time", f"is before the retention of records ({retention.days} days): "
                                                  f"nothing older than {(now - retention).isoformat()} is kept")
    size = cv.page_size(request.page_size)
    at = _page(request.page_token, start, end)
    facts = await load_facts(store, sid, scope, at, end, with_executions=False)
    if (parent := facts.schedule.get("parent_schedule_id")) is not None:  # a child schedule has no ticks
        return scheduler_pb2.ExplainScheduleResponse(notes=[
            f"child schedule of {parent}: it has no ticks of its own and runs once per successful run of its "
            f"parent, with that run's scheduled time (trigger parent): explain {parent} for the ticks, and list "
            f"this schedule's executions for its runs"])
    hi = page_end(facts, at, end, size)  # compute and read only this page's ticks
    await load_executions(store, facts, at, hi)
    lines = explain(facts, at, hi, now)
    resp = scheduler_pb2.ExplainScheduleResponse(ticks=[_tick(e) for e in lines])
    if hi < end:
        resp.next_page_token = _token(hi, start, end)
    if at == start:
        resp.notes.extend(alerts(facts, start, end))
    return resp
