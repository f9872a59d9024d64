"""The Executions pages: the list (filters: state, job type, schedule, scheduled_for range;
pages by page token), one execution (attempts, error, checkpoint, result, fencing token, lease
owner), its Log tab (every attempt's lines, followed while it runs: the page asks for the lines
after its last one every LOG_POLL_S, HTMX replacing the poller with them and a new poller, until
the execution is final and every line is shown), cancel and retry, and the bulk retry of the
dead-lettered runs matching the filter.

Bulk retry walks ListExecutions page by page with the page's filters and state DEAD only, and
retries each run (RetryExecution, one more attempt), at most `MAX_BULK_RETRY` per click; it says
how many it retried and how many it could not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from cronwheel.client import ApiError, ExecutionState, InvalidArgument, calls
from cronwheel.errors import InvalidArgument as LocalInvalidArgument

from . import forms
from .sessions import Session
from .web import Console

STATES = [s.value for s in ExecutionState]
MAX_BULK_RETRY = 10_000
CONCURRENCY = 16
LOG_POLL_S = 0.5
FILTER_FIELDS = ("state", "type", "schedule", "from", "until", "tenant")
LOOKS = {"succeeded": ("ok", "✔"), "running": ("warn", "▶"), "queued": ("muted", "…"), "scheduled": ("muted", "○"),
         "retry_scheduled": ("warn", "↻"), "failed": ("bad", "✖"), "dead": ("bad", "☠"),
         "cancelled": ("muted", "⊘"), "skipped": ("muted", "»"), "waiting": ("muted", "⧗")}


def look(state: Any) -> tuple[str, str]:
    return LOOKS.get(str(state), ("muted", "?"))


def _filters(src: Any, session: Session) -> dict[str, Any]:
    state = str(src.get("state", "") or "")
    return {"states": [state] if state else [], "type": str(src.get("type", "") or "").strip() or None,
            "schedule_id": str(src.get("schedule", "") or "").strip() or None,
            "scheduled_from": forms.local_time(str(src.get("from", "") or ""), "from"),
            "scheduled_until": forms.local_time(str(src.get("until", "") or ""), "until"),
            "tenant": (str(src.get("tenant", "") or "").strip() or None) if session.admin else None}


def _field(exc: Any) -> str:
    f = getattr(exc, "field", "")
    return {"schedule_id": "schedule", "states": "state", "scheduled": "from", "scheduled.start": "from",
            "scheduled.end": "until", "type": "type", "tenant": "tenant", "page_token": "page"}.get(f, f or "")


async def list_page(console: Console, request: Request, session: Session) -> Response:
    q = request.query_params
    errors = forms.Errors()
    items: tuple[Any, ...] = ()
    next_token = ""
    try:
        got = await session.client.executions_page(**_filters(q, session), page_size=50, page_token=q.get("page", ""))
        items, next_token = got.items, got.next_page_token
    except forms.FormError as exc:
        errors.add(exc.field, exc.message)
    except (InvalidArgument, LocalInvalidArgument) as exc:
        errors.add(_field(exc), str(exc))
    back = [t for t in q.get("back", "").split(",") if t]
    return console.render(request, "executions.html", session, 400 if errors else 200, items=items,
                          next_token=next_token, page_token=q.get("page", ""), back=back, errors=errors,
                          states=STATES, look=look)


async def detail(console: Console, request: Request, session: Session) -> Response:
    ex = await session.client.get_execution(request.path_params["id"])
    events = [e async for e in session.client.events(execution_id=ex.id)][-50:]
    return console.render(request, "execution.html", session, ex=ex, look=look, events=events)


async def log_tab(console: Console, request: Request, session: Session) -> Response:
    ex = await session.client.get_execution(request.path_params["id"])
    return console.render(request, "execution_log.html", session, ex=ex, look=look,
                          **await _log_lines(session, ex.id, (0, 0)))


async def log_more(console: Console, request: Request, session: Session) -> Response:
    """The lines after the cursor, and the next poller (or the end): the Log tab's follow."""
    q = request.query_params
    try:
        after = (max(int(q.get("after_attempt", "0")), 0), max(int(q.get("after_seq", "0")), 0))
    except ValueError:
        after = (0, 0)
    return console.render(request, "_log_lines.html", session,
                          **await _log_lines(session, request.path_params["id"], after))


async def _log_lines(session: Session, execution_id: str, after: tuple[int, int]) -> dict[str, Any]:
    page = await session.client.logs_page(execution_id, after=after)
    last = (page.lines[-1].attempt, page.lines[-1].seq) if page.lines else after
    step = calls.logs_step(page, follow=True)
    return {"lines": page.lines, "after": last, "step": step, "state": page.state, "first": after == (0, 0),
            "poll_s": LOG_POLL_S, "ex_id": execution_id}


async def act(console: Console, request: Request, session: Session) -> Response:
    eid, action = request.path_params["id"], request.path_params["action"]
    try:
        if action == "cancel":
            ex = await session.client.cancel(eid, reason="cancelled in the console")
            session.flash("Cancel requested: the worker is told to stop." if ex.cancel_requested and
                          str(ex.state) == "running" else f"Cancelled (now {ex.state}).")
        elif action == "retry":
            ex = await session.client.retry(eid, reason="retried in the console")
            session.flash(f"Retried: now {ex.state}, attempt {ex.attempt + 1} of {ex.max_attempts}.")
        else:
            session.flash(f"Unknown action {action!r}.", "bad")
    except ApiError as exc:
        if exc.code == "UNAUTHENTICATED":
            raise
        session.flash(f"{action} failed: {exc}", "bad")
    return RedirectResponse(f"/executions/{eid}", status_code=303)


async def bulk_retry(console: Console, request: Request, session: Session) -> Response:
    form = await request.form()
    keep = {k: str(form.get(k, "")) for k in FILTER_FIELDS if k != "state" and form.get(k)}
    back = "/executions?" + "&".join(f"{k}={v}" for k, v in {**keep, "state": "dead"}.items())
    try:
        filters = {**_filters(form, session), "states": ["dead"]}
    except forms.FormError as exc:
        session.flash(f"{exc.field}: {exc.message}", "bad")
        return RedirectResponse(back, status_code=303)
    ids: list[str] = []
    token = ""
    while len(ids) < MAX_BULK_RETRY:  # one page at a time, never the whole table
        got = await session.client.executions_page(**filters, page_size=500, page_token=token)
        ids.extend(e.id for e in got.items)
        token = got.next_page_token
        if not token:
            break
    ids = ids[:MAX_BULK_RETRY]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(eid: str) -> BaseException | None:
        async with gate:
            try:
                await session.client.retry(eid, reason="bulk retry in the console")
            except ApiError as exc:
                if exc.code == "UNAUTHENTICATED":
                    raise
                return exc
            return None

    results = await asyncio.gather(*(one(i) for i in ids))
    failed = [r for r in results if r is not None]
    session.flash(f"Retried {len(ids) - len(failed)} dead-lettered executions"
                  + (f"; {len(failed)} could not be retried (e.g. {failed[0]})." if failed else ".")
                  + (" More remain: click again." if token else ""), "ok" if not failed else "bad")
    return RedirectResponse(back, status_code=303)
