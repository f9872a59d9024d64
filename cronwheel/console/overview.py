"""The Overview page (admins): nodes, partitions with owner and epoch, queue depth by priority,
fire lag and start lag over the last hour, and the alerts feed.

The cluster keeps no history of its lags, so the console samples it: `Sampler` calls
ClusterStatus every `SAMPLE_S` seconds (with the console's own token when it is an admin's, else
with the most recently active admin session's client; with no admin around, nothing is sampled)
and keeps one hour of samples in memory:
- fire lag: each node's p50 and p99 (ClusterStatus members[].fire_lag_p50/p99, the node's own
  recent window), one line per node;
- start lag: per priority, how long the oldest queued execution has waited past its run_at
  (observed_at - queue_depths[].oldest_run_at; 0 when none is queued): the lag a run about to
  start has.
The alerts feed follows ListEvents(alerts_only) from the last id seen and keeps the latest 100.
A console restart starts the charts empty.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from cronwheel.client import ApiError, AsyncClient, PermissionDenied, Unauthenticated

from .sessions import Session
from .web import Console

log = logging.getLogger("cronwheel.console")
SAMPLE_S = 5.0
HISTORY = timedelta(hours=1)
ALERTS_KEPT = 100
COLORS = ["#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989"]


@dataclass(frozen=True)
class Sample:
    at: datetime
    fire_p50: dict[str, float]  # node -> seconds
    fire_p99: dict[str, float]
    start_lag: dict[str, float]  # priority -> seconds


class Sampler:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.samples: deque[Sample] = deque()
        self.alerts: deque[Any] = deque(maxlen=ALERTS_KEPT)
        self.last_event = 0
        self._own: AsyncClient | None = None
        self._own_admin: bool | None = None

    async def _client(self) -> AsyncClient | None:
        """The console's own client while the cluster takes it as an admin's, else the most
        recently active admin session's client, else None."""
        if self._own_admin is not False:
            if self._own is None:
                self._own = self.console.settings.client(self.console.settings.token)
            try:
                await self._own.status()
                self._own_admin = True
                return self._own
            except (PermissionDenied, Unauthenticated):
                self._own_admin = False  # not an admin's: never asked again
        admins = sorted((s for s in self.console.sessions.all() if s.admin), key=lambda s: -s.last_seen)
        return admins[0].client if admins else None

    async def sample_once(self) -> None:
        client = await self._client()
        if client is None:
            return
        st = await client.status()
        at = st.observed_at or self.console.clock.now()
        p50 = {m.node_id: m.fire_lag_p50.total_seconds() for m in st.members if m.fire_lag_p50 is not None}
        p99 = {m.node_id: m.fire_lag_p99.total_seconds() for m in st.members if m.fire_lag_p99 is not None}
        lag = {str(q.priority): max(0.0, (at - q.oldest_run_at).total_seconds()) if q.oldest_run_at else 0.0
               for q in st.queue_depths}
        self.samples.append(Sample(at, p50, p99, lag))
        while self.samples and at - self.samples[0].at > HISTORY:
            self.samples.popleft()
        async for ev in client.events(self.last_event, alerts_only=True):
            self.last_event = ev.id
            self.alerts.appendleft(ev)

    async def run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except ApiError as exc:
                log.warning("console: overview sample failed: %s", exc)
            await self.console.clock.sleep(SAMPLE_S)

    async def close(self) -> None:
        if self._own is not None:
            await self._own.close()


def chart(title: str, series: dict[str, list[tuple[datetime, float]]], now: datetime, *,
          width: int = 560, height: int = 160) -> Markup:
    """A line chart of the last hour as inline SVG (server-rendered: no script, no library):
    one line per series, the y axis in seconds from 0 to the largest value, a legend in text."""
    left, bottom, top = 44, 22, 10
    w, h = width - left - 8, height - bottom - top
    peak = max([v for pts in series.values() for _, v in pts] + [0.001])
    start = now - HISTORY

    def x(t: datetime) -> float:
        return left + w * max(0.0, (t - start).total_seconds()) / HISTORY.total_seconds()

    def y(v: float) -> float:
        return top + h - h * v / peak

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#d0d7de"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#d0d7de"/>',
             f'<text x="2" y="{top + 8}">{_secs(peak)}</text><text x="2" y="{top + h}">0</text>',
             f'<text x="{left}" y="{height - 6}">−60 min</text>',
             f'<text x="{left + w - 24}" y="{height - 6}">now</text>']
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = COLORS[i % len(COLORS)]
        if len(pts) == 1:
            (t, v), = pts
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{color}"/>')
        elif pts:
            line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{line}"/>')
        last = pts[-1][1] if pts else 0.0
        parts.append(f'<text x="{left + 8 + 150 * (i % 3)}" y="{top + 12 + 12 * (i // 3)}" fill="{color}" '
                     f'style="fill:{color}">■ {escape(name)}: {_secs(last)}</text>')
    if not series:
        parts.append(f'<text x="{left + 8}" y="{top + 14}">no data yet</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _secs(v: float) -> str:
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"


def _charts(console: Console) -> dict[str, Any]:
    samples = list(console.sampler.samples) if console.sampler else []
    now = console.clock.now()

    def series(pick: Any, suffix: str = "") -> dict[str, list[tuple[datetime, float]]]:
        out: dict[str, list[tuple[datetime, float]]] = {}
        for s in samples:
            for k, v in pick(s).items():
                out.setdefault(k + suffix, []).append((s.at, v))
        return out

    fire = {**series(lambda s: s.fire_p50, " p50"), **series(lambda s: s.fire_p99, " p99")}
    start = series(lambda s: s.start_lag)
    return {"fire_chart": chart("fire lag", fire, now), "start_chart": chart("start lag", start, now),
            "sample_count": len(samples)}


async def _status_ctx(console: Console, session: Session) -> dict[str, Any]:
    st = await session.client.status()
    by_owner: dict[str, list[Any]] = {}
    for p in st.partitions:
        by_owner.setdefault(p.owner or "(unowned)", []).append(p)
    return {"st": st, "by_owner": dict(sorted(by_owner.items())), "alerts": list(console.sampler.alerts),
            **_charts(console)}


async def overview_page(console: Console, request: Request, session: Session) -> Response:
    return console.render(request, "overview.html", session, **await _status_ctx(console, session))


async def live_part(console: Console, request: Request, session: Session) -> Response:
    """The overview's live part alone (htmx polls it every few seconds)."""
    return console.render(request, "_overview_live.html", session, **await _status_ctx(console, session))
