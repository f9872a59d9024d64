"""The Schedules and Schedule pages: list (search, filters, sort, pages by the API's page
tokens), bulk actions, create / edit / delete, the schedule's next fire times and its timeline
of ticks (ExplainSchedule), pause / resume / trigger / backfill.

Paging: one ListSchedules call per page (`schedules_page`), `page_size` rows; the page token of
the next page rides in the link (`?page=...`), and the tokens of the pages before it in `back`
(so "previous" works without re-reading from the start). Nothing loads all schedules.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from cronwheel.client import ApiError, InvalidArgument, TickOutcome
from cronwheel.errors import InvalidArgument as LocalInvalidArgument

from . import forms
from .sessions import Session
from .web import Console

PAGE_SIZES = (25, 50, 100)
WINDOWS = {"10m": timedelta(minutes=10), "1h": timedelta(hours=1), "24h": timedelta(hours=24),
           "7d": timedelta(days=7)}
MAX_TICKS_SHOWN = 500
MAX_BULK = 1000  # ids in one bulk action (one page holds at most 100)


@dataclass(frozen=True)
class Look:
    """How a tick outcome is shown: a CSS class (colour), an icon and a word, so it reads
    without colour too."""

    css: str
    icon: str
    word: str


Tk = TickOutcome
LOOKS: dict[Any, Look] = {
    Tk("fired"): Look("ok", "✔", "fired"),
    Tk("dst_shifted"): Look("ok", "⇥", "fired (DST shift)"),
    Tk("skipped_overlap"): Look("warn", "»", "skipped: overlap"),
    Tk("skipped_misfire"): Look("warn", "»", "skipped: misfire"),
    Tk("coalesced_misfire"): Look("warn", "↷", "coalesced misfire"),
    Tk("refused_catch_up"): Look("bad", "⊗", "refused catch-up"),
    Tk("paused"): Look("muted", "‖", "paused"),
    Tk("not_yet_created"): Look("muted", "·", "before creation"),
    Tk("deleted"): Look("muted", "✖", "deleted"),
    Tk("dst_skipped"): Look("warn", "»", "skipped: DST gap"),
    Tk("dst_repeated"): Look("warn", "»", "skipped: DST repeat"),
    Tk("missed"): Look("bad", "⚠", "missed"),
    Tk("pending"): Look("muted", "…", "pending"),
    Tk("pruned_by_retention"): Look("muted", "⌫", "pruned by retention"),
    Tk("skipped_quota"): Look("warn", "»", "skipped: daily quota"),
}


def look(outcome: Any) -> Look:
    return LOOKS.get(outcome, Look("muted", "?", str(outcome)))


def _filters(request: Request, session: Session) -> dict[str, Any]:
    q = request.query_params
    state = q.get("state", "")
    return {"name_contains": q.get("q", "").strip() or None, "job_type": q.get("job_type", "").strip() or None,
            "paused": {"paused": True, "active": False}.get(state),
            "tenant": (q.get("tenant", "").strip() or None) if session.admin else None,
            "order_by": "name" if q.get("sort") == "name" else None}


async def list_page(console: Console, request: Request, session: Session) -> Response:
    q = request.query_params
    size = int(q.get("size", "50")) if q.get("size", "50") in {str(n) for n in PAGE_SIZES} else 50
    token = q.get("page", "")
    back = [t for t in q.get("back", "").split(",") if t]
    errors = forms.Errors()
    items: tuple[Any, ...] = ()
    next_token = ""
    started = console.clock.monotonic()
    try:
        got = await session.client.schedules_page(**_filters(request, session), page_size=size, page_token=token)
        items, next_token = got.items, got.next_page_token
    except InvalidArgument as exc:
        errors.add(forms.field_of(exc.field, ("q", "job_type", "tenant", "page")) or "", str(exc))
    elapsed_ms = (console.clock.monotonic() - started) * 1000
    prev_token = back[-1] if back else None
    return console.render(request, "schedules.html", session, items=items, next_token=next_token,
                          page_token=token, back=back, prev_token=prev_token, size=size, sizes=PAGE_SIZES,
                          errors=errors, api_ms=elapsed_ms, first_page=not token)


async def bulk(console: Console, request: Request, session: Session) -> Response:
    form = await request.form()
    action = str(form.get("action", ""))
    ids = [str(i) for i in form.getlist("ids")][:MAX_BULK]
    back = str(form.get("back", "/schedules"))
    if not back.startswith("/schedules"):
        back = "/schedules"
    if action not in ("pause", "resume", "trigger"):
        session.flash(f"Unknown bulk action {action!r}.", "bad")
        return RedirectResponse(back, status_code=303)
    if not ids:
        session.flash("Select at least one schedule.", "bad")
        return RedirectResponse(back, status_code=303)
    call = {"pause": session.client.pause, "resume": session.client.resume, "trigger": session.client.trigger}[action]
    reason = "console bulk " + action
    results = await asyncio.gather(*(call(i, reason=reason) for i in ids), return_exceptions=True)
    failed = [(i, r) for i, r in zip(ids, results, strict=True) if isinstance(r, BaseException)]
    for _, r in failed:
        if not isinstance(r, ApiError):
            raise r
    done = {"pause": "paused", "resume": "resumed", "trigger": "triggered"}[action]
    session.flash(f"{done.capitalize()} {len(ids) - len(failed)} of {len(ids)} schedules.",
                  "ok" if not failed else "bad")
    for i, r in failed[:5]:
        session.flash(f"{i}: {r}", "bad")
    return RedirectResponse(back, status_code=303)


# ------------------------------------------------------------------------------ one schedule


async def detail(console: Console, request: Request, session: Session) -> Response:
    sid = request.path_params["id"]
    sched = await session.client.get_schedule(sid)
    n = request.query_params.get("n", "10")
    count = min(max(int(n), 1), 1000) if n.isdigit() else 10
    preview = await session.client.preview(sid, count=count)
    timeline = await _timeline(console, request, session, sid)
    return console.render(request, "schedule.html", session, sch=sched, preview=preview, **timeline)


async def timeline_part(console: Console, request: Request, session: Session) -> Response:
    """The timeline alone (htmx polls it, so a tick appears without a reload)."""
    sid = request.path_params["id"]
    return console.render(request, "_timeline.html", session, **await _timeline(console, request, session, sid))


def timeline_bounds(now: datetime, window: str, next_fires: list[datetime]) -> tuple[datetime, datetime, bool]:
    """The [start, end) the timeline explains, and whether it is cut short of the window.

    It ends at `now`: a tick not yet due is not on it, though the node may have queued it (it
    queues a tick just before it is due) and explain calls it fired; a pause or an edit still
    takes such a tick back. At most ~MAX_TICKS_SHOWN ticks are explained: the window is cut to that many of the
    schedule's shortest gap between fire times (a per-second cron's 7 days would be 604,800)."""
    gaps = [b - a for a, b in zip(next_fires, next_fires[1:], strict=False) if b > a]
    start = now - WINDOWS[window]
    if gaps:
        start = max(start, now - min(gaps) * MAX_TICKS_SHOWN)
    return start, now, start > now - WINDOWS[window]


async def _timeline(console: Console, request: Request, session: Session, sid: str) -> dict[str, Any]:
    window = request.query_params.get("window", "1h")
    if window not in WINDOWS:
        window = "1h"
    nxt = [p.scheduled_for for p in await session.client.preview(sid, count=10)]
    start, end, cut = timeline_bounds(console.clock.now(), window, nxt)
    exp = await session.client.explain(sid, start, end)
    before = Tk("not_yet_created")
    shown = [t for t in exp.ticks if t.outcome != before]  # ticks before the schedule existed say nothing
    ticks = shown[-MAX_TICKS_SHOWN:]
    counts: dict[str, int] = {}
    for t in ticks:
        counts[look(t.outcome).word] = counts.get(look(t.outcome).word, 0) + 1
    return {"ticks": list(reversed(ticks)), "notes": exp.notes, "window": window, "windows": list(WINDOWS),
            "look": look, "counts": counts, "sid": sid, "truncated": len(shown) > MAX_TICKS_SHOWN or cut}


async def act(console: Console, request: Request, session: Session) -> Response:
    sid, action = request.path_params["id"], request.path_params["action"]
    form = await request.form()
    reason = str(form.get("reason", "")) or f"console {action}"
    here = f"/schedules/{sid}"
    try:
        if action == "pause":
            await session.client.pause(sid, reason=reason)
            session.flash("Paused: no tick fires until it is resumed (the timeline marks them paused).")
        elif action == "resume":
            await session.client.resume(sid, reason=reason)
            session.flash("Resumed.")
        elif action == "trigger":
            ex = await session.client.trigger(sid, reason=reason)
            session.flash(f"Triggered: execution {ex.id} ({ex.state}).")
        else:
            session.flash(f"Unknown action {action!r}.", "bad")
    except ApiError as exc:
        if exc.code in ("UNAUTHENTICATED",):
            raise
        session.flash(f"{action} failed: {exc}", "bad")
    return RedirectResponse(here, status_code=303)


def _blank_form() -> dict[str, str]:
    return {"timezone": "UTC", "misfire_policy": "skip", "overlap_policy": "allow", "priority": "default"}


def _form_of(s: Any) -> dict[str, str]:
    def secs(d: timedelta | None) -> str:
        return "" if d is None else f"{d.total_seconds():g}"

    import json

    return {"name": s.name, "cron": s.cron, "timezone": s.timezone, "job_type": s.job_type,
            "misfire_policy": str(s.misfire_policy), "overlap_policy": str(s.overlap_policy),
            "priority": str(s.priority), "payload": "" if s.payload is None else json.dumps(s.payload),
            "max_catch_up": str(s.max_catch_up or ""), "jitter_s": secs(s.jitter),
            "attempt_timeout_s": secs(s.attempt_timeout), "alert_s": secs(s.alert_if_no_success_within),
            "version": str(s.version)}


async def edit(console: Console, request: Request, session: Session) -> Response:
    """GET /schedules/new or /schedules/{id}/edit: the form; POST: create or update, or the same
    form with each error next to its field (nothing stored)."""
    sid = request.path_params.get("id")
    creating = sid is None
    errors = forms.Errors()
    if request.method == "GET":
        values = _blank_form() if creating else _form_of(await session.client.get_schedule(sid))
        return console.render(request, "schedule_form.html", session, values=values, errors=errors,
                              creating=creating, sid=sid, m=forms)
    form = {k: str(v) for k, v in (await request.form()).items()}
    try:
        kwargs = forms.schedule_values(form, creating=creating)
        if creating:
            made = await session.client.create_schedule(**kwargs)
            session.flash(f"Created schedule {made.name}.")
            return RedirectResponse(f"/schedules/{made.id}", status_code=303)
        version = int(form.get("version") or 0)
        saved = await session.client.update_schedule(sid, expected_version=version, **kwargs)
        session.flash(f"Saved {saved.name} (version {saved.version}).")
        return RedirectResponse(f"/schedules/{sid}", status_code=303)
    except forms.FormError as exc:
        errors.add(exc.field, exc.message)
    except (InvalidArgument, LocalInvalidArgument) as exc:
        field = forms.field_of(getattr(exc, "field", ""), (*forms.SCHEDULE_FIELDS, "tenant"))
        errors.add(field, str(exc).removeprefix(f"{exc.field}: ") if field else str(exc))
    except ApiError as exc:
        if exc.code == "UNAUTHENTICATED":
            raise
        errors.add("name" if exc.code == "ALREADY_EXISTS" else "", str(exc))
    return console.render(request, "schedule_form.html", session, 400, values=form, errors=errors,
                          creating=creating, sid=sid, m=forms)


async def delete(console: Console, request: Request, session: Session) -> Response:
    sid = request.path_params["id"]
    sched = await session.client.get_schedule(sid)
    if request.method == "GET":
        return console.render(request, "confirm_delete.html", session, sch=sched)
    form = await request.form()
    if form.get("confirm_name", "") != sched.name:
        session.flash("Type the schedule's name to confirm the deletion.", "bad")
        return RedirectResponse(f"/schedules/{sid}/delete", status_code=303)
    cancelled = await session.client.delete(sid, expected_version=sched.version,
                                            cancel_pending=form.get("cancel_pending") == "on",
                                            reason="deleted in the console")
    session.flash(f"Deleted {sched.name}" + (f"; cancelled {cancelled} unfinished executions." if cancelled else "."))
    return RedirectResponse("/schedules", status_code=303)


async def backfill(console: Console, request: Request, session: Session) -> Response:
    """GET with start/end: the preview (the ticks in the range and whether each already ran);
    POST: run it."""
    sid = request.path_params["id"]
    sched = await session.client.get_schedule(sid)
    src = await request.form() if request.method == "POST" else request.query_params
    raw = {"start": str(src.get("start", "")), "end": str(src.get("end", ""))}
    errors = forms.Errors()
    ticks: list[Any] = []
    try:
        start, end = forms.local_time(raw["start"], "start"), forms.local_time(raw["end"], "end")
        if start and end:
            if request.method == "POST":
                done = await session.client.backfill(sid, start, end, reason="console backfill")
                session.flash(f"Backfill: created {done.created_count} executions, "
                              f"{done.existing_count} ticks had one already.")
                return RedirectResponse(f"/schedules/{sid}", status_code=303)
            exp = await session.client.explain(sid, start, end)
            ticks = list(exp.ticks)
        elif raw["start"] or raw["end"]:
            errors.add("end" if start else "start", "give both the start and the end")
    except forms.FormError as exc:
        errors.add(exc.field, exc.message)
    except (InvalidArgument, LocalInvalidArgument) as exc:
        f = forms.field_of(exc.field, ("start", "end"))
        errors.add(f or "start", str(exc).removeprefix(f"{exc.field}: "))
    creates = sum(1 for t in ticks if t.execution_id is None)
    return console.render(request, "backfill.html", session, 400 if errors else 200, sch=sched, raw=raw,
                          errors=errors, ticks=ticks, creates=creates, look=look)
