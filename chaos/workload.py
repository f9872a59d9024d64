"""The traffic of a chaos run: cron schedules created up front, one-off jobs submitted throughout.

Schedules (every second and every minute, several zones, each misfire policy, one with `H`, one
with jitter, handlers that fail once then succeed; `overlap=True` adds forbid, buffer_one and
replace schedules):

    name                    cron              zone                  misfire    job
    sec-utc-skip            * * * * * *       UTC                   skip       tick
    sec-london-run-once     * * * * * *       Europe/London         run_once   tick
    sec-new-york-catch-up   * * * * * *       America/New_York      catch_up   tick
    sec-kolkata-flaky       * * * * * *       Asia/Kolkata          skip       flaky
    sec-lord-howe-catch-up  * * * * * *       Australia/Lord_Howe   catch_up   tick
    2s-london-run-once      */2 * * * * *     Europe/London         run_once   tick
    3s-kolkata-jitter       */3 * * * * *     Asia/Kolkata          catch_up   tick (jitter 0.8 s)
    h5s-new-york            H/5 * * * * *     America/New_York      skip       tick
    min-*                   * * * * *         London, New York, Kolkata, Lord Howe
    min30s-utc              30 * * * * *      UTC                   run_once   flaky
    hourly-kolkata          @hourly           Asia/Kolkata          catch_up   tick (fires at :30 UTC)

One-off jobs, from a seeded rng (the same sequence for a seed): `tick` (60%), `flaky` (25%),
`long` checkpointing jobs of 3-6 s (15%); 30% due at once, the rest delayed 0.5-6 s. Each has an
idempotency key, so a submission retried across a PostgreSQL restart is stored once.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

from chaos.harness import create_schedules
from chaos.history import SubmittedJob
from cronwheel.clock import SystemClock
from cronwheel.cluster.commands.runs import JobSpec, submit_job
from cronwheel.cluster.commands.schedules import ScheduleSpec
from cronwheel.cluster.commands.values import RetryPolicy
from cronwheel.errors import CronwheelError
from cronwheel.storage import PgStore, StoreConfig

RETRY = RetryPolicy(initial_s=0.5, multiplier=2.0, max_s=2.0, max_attempts=6)
TENANTS = ("chaos-a", "chaos-b")

SCHEDULES: tuple[tuple[str, str, str, str, str, dict[str, Any]], ...] = (
    ("sec-utc-skip", "* * * * * *", "UTC", "skip", "tick", {}),
    ("sec-london-run-once", "* * * * * *", "Europe/London", "run_once", "tick", {}),
    ("sec-new-york-catch-up", "* * * * * *", "America/New_York", "catch_up", "tick", {"priority": "critical"}),
    ("sec-kolkata-flaky", "* * * * * *", "Asia/Kolkata", "skip", "flaky", {}),
    ("sec-lord-howe-catch-up", "* * * * * *", "Australia/Lord_Howe", "catch_up", "tick", {}),
    ("2s-london-run-once", "*/2 * * * * *", "Europe/London", "run_once", "tick", {}),
    ("3s-kolkata-jitter", "*/3 * * * * *", "Asia/Kolkata", "catch_up", "tick", {"jitter_s": 0.8}),
    ("h5s-new-york", "H/5 * * * * *", "America/New_York", "skip", "tick", {}),
    ("min-london", "* * * * *", "Europe/London", "skip", "tick", {}),
    ("min-new-york", "* * * * *", "America/New_York", "run_once", "tick", {}),
    ("min-kolkata", "* * * * *", "Asia/Kolkata", "catch_up", "tick", {}),
    ("min-lord-howe", "* * * * *", "Australia/Lord_Howe", "skip", "tick", {}),
    ("min30s-utc", "30 * * * * *", "UTC", "run_once", "flaky", {}),
    ("hourly-kolkata", "@hourly", "Asia/Kolkata", "catch_up", "tick", {}),
)

# Schedules with an overlap policy other than `allow` (in `all` and `overlap-policy-crash`; any of
# them used to crash the node that fired it, see that regression scenario).
OVERLAP_SCHEDULES: tuple[tuple[str, str, str, str, str, dict[str, Any]], ...] = (
    ("2s-london-forbid", "*/2 * * * * *", "Europe/London", "run_once", "tick", {"overlap_policy": "forbid"}),
    ("3s-new-york-buffer-one", "*/3 * * * * *", "America/New_York", "skip", "tick",
     {"overlap_policy": "buffer_one"}),
    ("5s-utc-replace", "*/5 * * * * *", "UTC", "catch_up", "tick", {"overlap_policy": "replace"}),
)


def schedule_specs(overlap: bool = False) -> list[ScheduleSpec]:
    rows = SCHEDULES + (OVERLAP_SCHEDULES if overlap else ())
    return [
        ScheduleSpec(tenant=TENANTS[i % 2], name=name, cron=cron, timezone=tz, job_type=job,
                     misfire_policy=misfire, max_catch_up=100, retry=RETRY, payload={"schedule": name}, **kw)
        for i, (name, cron, tz, misfire, job, kw) in enumerate(rows)
    ]


def create_workload(dsn: str, partitions: int, overlap: bool = False) -> list[dict[str, Any]]:
    return create_schedules(dsn, partitions, schedule_specs(overlap))


def job_plan(seed: int, i: int) -> tuple[str, float, dict[str, Any]]:
    """The i-th one-off job of a seed: (type, delay_s, payload). Pure."""
    rng = random.Random(f"{seed}:job:{i}")
    kind = rng.choices(("tick", "flaky", "long"), weights=(60, 25, 15))[0]
    delay = 0.0 if rng.random() < 0.3 else round(rng.uniform(0.5, 6.0), 2)
    payload: dict[str, Any] = {"i": i}
    if kind == "long":
        payload.update(steps=rng.randint(12, 24), step_s=0.25)
    return kind, delay, payload


class Traffic:
    """Submits one-off jobs about once a second from its own thread (with its own event loop and a
    small pool), until `stop()`. Submissions that fail (PostgreSQL restarting) are retried with the
    same idempotency key."""

    def __init__(self, dsn: str, partitions: int, seed: int, every_s: float = 1.0) -> None:
        self.dsn, self.partitions, self.seed, self.every_s = dsn, partitions, seed, every_s
        self.submitted: list[SubmittedJob] = []
        self.retries = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="chaos-traffic", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    async def _run(self) -> None:
        store = PgStore(StoreConfig(dsn=self.dsn, min_connections=1, max_connections=2))
        await store.open()
        try:
            i = 0
            while not self._stop.is_set():
                await self._submit(store, i)
                i += 1
                await asyncio.sleep(self.every_s * random.Random(f"{self.seed}:gap:{i}").uniform(0.6, 1.4))
        finally:
            await store.close()

    async def _submit(self, store: PgStore, i: int) -> None:
        kind, delay, payload = job_plan(self.seed, i)
        key = f"chaos-{self.seed}-{i}"
        for _attempt in range(40):
            now = SystemClock().now()
            run_at = now + timedelta(seconds=delay) if delay else None
            spec = JobSpec(tenant=TENANTS[i % 2], type=kind, payload=payload, run_at=run_at, retry=RETRY,
                           idempotency_key=key)
            try:
                row, _dedup = await submit_job(store, spec, now, self.partitions)
            except (CronwheelError, psycopg.Error) as exc:
                self.retries += 1
                if self._stop.is_set():
                    self.failed.append(f"{key}: {exc}")
                    return
                await asyncio.sleep(0.25)
                continue
            self.submitted.append(SubmittedJob(str(row["id"]), kind, row["run_at"].timestamp(), key, time.time()))
            return
        self.failed.append(f"{key}: gave up after 40 attempts")
