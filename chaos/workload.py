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
`long` checkpointing jobs of 3-6 s (15%); 30% due at once, 40% delayed 0.5-6 s (queued at
submission, claimed from their run_at: QUEUED_AT_SUBMIT_WITHIN), 30% delayed 11-20 s (scheduled,
queued by their partition's owner a second ahead, so the owners' failover is exercised for one-off
jobs too). Each has an idempotency key, so a submission retried across a PostgreSQL restart is
stored once.

Tenancy (created through the tenant API before any traffic, `TENANT_LIMITS`): every
`BURST_EVERY`-th submission also sends two bursts with submit_many, so the limits bind while the
faults run: `KEYED_BURST` `hold` jobs (0.5 s each) of tenant chaos-keys (10 starts/s, burst 3)
on one of two concurrency keys with limit 2, and `RATE_BURST` `tick` jobs of tenant chaos-rate,
limited to 4 starts/s (burst 4). The checker proves no key ever had a third run and no claim of
either tenant went past its bucket (chaos/checker_limits.py).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from chaos.history import SubmittedJob
from cronwheel.client import AlreadyExists, ApiError, ApplyPlan, Client, JobSpec, RetryPolicy

RETRY = RetryPolicy(initial_backoff=timedelta(seconds=0.5), backoff_multiplier=2.0,
                    max_backoff=timedelta(seconds=2), max_attempts=6)
TENANTS = ("chaos-a", "chaos-b")
T = TypeVar("T")
TENANT_LIMITS: dict[str, dict[str, Any]] = {
    "chaos-rate": {"rate_per_s": 4.0, "burst": 4.0},
    "chaos-keys": {"max_concurrency": 50, "rate_per_s": 10.0, "burst": 3.0},
}
KEY_LIMIT = 2
BURST_EVERY, KEYED_BURST, RATE_BURST = 5, 6, 10

SCHEDULES: tuple[tuple[str, str, str, str, str, dict[str, Any]], ...] = (
    ("sec-utc-skip", "* * * * * *", "UTC", "skip", "tick", {}),
    ("sec-london-run-once", "* * * * * *", "Europe/London", "run_once", "tick", {}),
    ("sec-new-york-catch-up", "* * * * * *", "America/New_York", "catch_up", "tick", {"priority": "critical"}),
    ("sec-kolkata-flaky", "* * * * * *", "Asia/Kolkata", "skip", "flaky", {}),
    ("sec-lord-howe-catch-up", "* * * * * *", "Australia/Lord_Howe", "catch_up", "tick", {}),
    ("2s-london-run-once", "*/2 * * * * *", "Europe/London", "run_once", "tick", {}),
    ("3s-kolkata-jitter", "*/3 * * * * *", "Asia/Kolkata", "catch_up", "tick", {"jitter": 0.8}),
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


def schedule_specs(overlap: bool = False) -> dict[str, list[dict[str, Any]]]:
    """tenant -> its schedules, as specs of Client.apply (create_schedule's keyword arguments)."""
    rows = SCHEDULES + (OVERLAP_SCHEDULES if overlap else ())
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in TENANTS}
    for i, (name, cron, tz, misfire, job, kw) in enumerate(rows):
        out[TENANTS[i % 2]].append(dict(name=name, cron=cron, timezone=tz, job_type=job, misfire_policy=misfire,
                                        max_catch_up=100, retry_policy=RETRY, payload={"schedule": name}, **kw))
    return out


def create_workload(addresses: Sequence[str], overlap: bool = False, schedules: bool = True) -> list[ApplyPlan]:
    """The tenants and the schedules, created through the public door: `Client.apply` per tenant
    (safe to run again: a second apply changes nothing). `schedules` False: the tenants only (the
    generative workload, chaos.generate, draws its own schedules)."""
    with Client(addresses) as cw:
        for tenant, limits in TENANT_LIMITS.items():
            try:
                cw.create_tenant(tenant, **limits)
            except AlreadyExists:  # a second run on the same cluster
                cw.update_tenant(tenant, **limits)
        if not schedules:
            return []
        return [cw.apply(specs, tenant=tenant) for tenant, specs in schedule_specs(overlap).items()]


def burst_plan(seed: int, i: int) -> list[tuple[str, dict[str, Any]]]:
    """The bursts sent with the i-th submission: (key, submit kwargs) per job; none unless i is a
    multiple of BURST_EVERY. Pure."""
    if i % BURST_EVERY:
        return []
    n = i // BURST_EVERY
    key = f"customer:{n % 2}"
    keyed = [(f"chaos-{seed}-{i}-hold-{k}", {"type": "hold", "payload": {"i": i, "k": k}, "tenant": "chaos-keys",
                                               "concurrency_key": key, "concurrency_limit": KEY_LIMIT})
             for k in range(KEYED_BURST)]
    rated = [(f"chaos-{seed}-{i}-rate-{k}", {"type": "tick", "payload": {"i": i, "k": k}, "tenant": "chaos-rate"})
             for k in range(RATE_BURST)]
    return keyed + rated


DEPS_EVERY = 4  # every 4th submission (from the 3rd) also sends a dependency family


def dependency_plan(seed: int, i: int) -> list[tuple[str, dict[str, Any]]]:
    """The dependency family sent with the i-th submission (issue 52): (key, submit kwargs) per
    job, in one submit_many: upstreams a (a `doomed` job of one attempt a third of the time: it
    ends dead) and b, a chain a -> c -> d and a fan-in (a, b) -> e, c and e under a drawn policy;
    none unless i % DEPS_EVERY == 2. Pure. chaos.model.decide_dependent predicts each
    dependent's end from its upstreams' (checker_model.check_dependencies)."""
    if i % DEPS_EVERY != 2:
        return []
    rng = random.Random(f"{seed}:deps:{i}")
    tenant = TENANTS[i % 2]

    def key(name: str) -> str:
        return f"chaos-{seed}-{i}-dep-{name}"

    def job(name: str, kind: str = "tick", after: tuple[str, ...] = (), policy: str | None = None,
            **kw: Any) -> tuple[str, dict[str, Any]]:
        spec: dict[str, Any] = {"type": kind, "payload": {"i": i, "dep": name}, "tenant": tenant, **kw}
        if after:
            spec.update(depends_on=[key(a) for a in after], dependency_policy=policy or "on_success")
        return key(name), spec

    fails = rng.random() < 1 / 3
    one = RetryPolicy(max_attempts=1)
    return [
        job("e", after=("a", "b"), policy=rng.choice(("on_success", "always"))),  # named before its upstreams
        job("a", "doomed", retry_policy=one) if fails else job("a"),
        job("b"),
        job("c", after=("a",), policy=rng.choice(("on_success", "always"))),
        job("d", after=("c",)),
    ]


def job_plan(seed: int, i: int) -> tuple[str, float, dict[str, Any]]:
    """The i-th one-off job of a seed: (type, delay_s, payload). Pure."""
    rng = random.Random(f"{seed}:job:{i}")
    kind = rng.choices(("tick", "flaky", "long"), weights=(60, 25, 15))[0]
    r = rng.random()
    delay = 0.0 if r < 0.3 else round(rng.uniform(0.5, 6.0), 2) if r < 0.7 else round(rng.uniform(11.0, 20.0), 2)
    payload: dict[str, Any] = {"i": i}
    if kind == "long":
        payload.update(steps=rng.randint(12, 24), step_s=0.25)
    return kind, delay, payload


class Traffic:
    """Submits one-off jobs about once a second from its own thread, through the Client at the
    cluster's live nodes (`addresses()` is asked again after a failure: nodes come and go), until
    `stop()`. A submission that fails (a node or PostgreSQL restarting) is retried with the same
    idempotency key, so it is stored once."""

    def __init__(self, addresses: Callable[[], list[str]], seed: int, every_s: float = 1.0) -> None:
        self.addresses, self.seed, self.every_s = addresses, seed, every_s
        self.submitted: list[SubmittedJob] = []
        self.retries = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-traffic", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _client(self) -> Client:
        return Client(self.addresses() or ["127.0.0.1:1"], deadline_s=5.0, retries=3)

    def _run(self) -> None:
        cw = self._client()
        try:
            i = 0
            while not self._stop.is_set():
                cw = self._submit(cw, i)
                cw = self._submit_family(cw, i)
                i += 1
                self._stop.wait(self.every_s * random.Random(f"{self.seed}:gap:{i}").uniform(0.6, 1.4))
        finally:
            cw.close()

    def _retrying(self, cw: Client, what: str, call: Callable[[Client], T]) -> tuple[Client, T | None]:
        """`call(cw)` until it answers (a submission carries its idempotency keys, so a retry is
        stored once): after a failure the Client is made again for the nodes live now. None when
        stopped while retrying or after 40 attempts (recorded in `failed`)."""
        for _attempt in range(40):
            try:
                return cw, call(cw)
            except ApiError as exc:
                self.retries += 1
                if self._stop.is_set():
                    self.failed.append(f"{what}: {exc}")
                    return cw, None
                time.sleep(0.25)
                cw.close()
                cw = self._client()
        self.failed.append(f"{what}: gave up after 40 attempts")
        return cw, None

    def _submit(self, cw: Client, i: int) -> Client:
        kind, delay, payload = job_plan(self.seed, i)
        key = f"chaos-{self.seed}-{i}"
        cw, ex = self._retrying(cw, key, lambda c: c.submit(
            kind, payload, delay=timedelta(seconds=delay) if delay else None, retry_policy=RETRY,
            idempotency_key=key, tenant=TENANTS[i % 2]))
        if ex is None:
            return cw
        assert ex.run_at is not None
        self.submitted.append(SubmittedJob(ex.id, kind, ex.run_at.timestamp(), key, time.time()))
        plan = burst_plan(self.seed, i)
        if not plan:
            return cw
        specs = [JobSpec(idempotency_key=k, retry_policy=RETRY, **kw) for k, kw in plan]
        cw, got = self._retrying(cw, f"bursts of {i}", lambda c: list(c.submit_many(specs)))
        if got is not None:
            now = time.time()
            for (k, kw), job in zip(plan, got, strict=True):
                assert job.run_at is not None
                self.submitted.append(SubmittedJob(job.execution_id, kw["type"], job.run_at.timestamp(), k, now))
        return cw

    def _submit_family(self, cw: Client, i: int) -> Client:
        """The i-th submission's dependency family (`dependency_plan`), recorded with each
        dependent's upstreams (execution ids) and policy."""
        plan = dependency_plan(self.seed, i)
        if not plan:
            return cw
        specs = [JobSpec(idempotency_key=k, **{"retry_policy": RETRY, **kw}) for k, kw in plan]
        cw, got = self._retrying(cw, f"dependencies of {i}", lambda c: list(c.submit_many(specs)))
        if got is None:
            return cw
        now, ids = time.time(), {k: job.execution_id for (k, _kw), job in zip(plan, got, strict=True)}
        for (k, kw), job in zip(plan, got, strict=True):
            assert job.run_at is not None
            self.submitted.append(SubmittedJob(job.execution_id, kw["type"], job.run_at.timestamp(), k, now,
                                               tuple(ids[u] for u in kw.get("depends_on", ())),
                                               kw.get("dependency_policy", "")))
        return cw
