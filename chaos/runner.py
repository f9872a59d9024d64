"""One chaos run: start the cluster, load the workload, walk the seeded timeline of faults (health
checked before and after each), stop the traffic, let the work drain, collect the history, stop
everything, check, report.

Everything a run leaves is under `<out>/<scenario>-seed<N>-<stamp>/`: report.json, summary.txt,
history.json (what the checker judged; `python -m chaos check DIR` judges it again) and, when the
run failed or --keep was given, `cluster/` with every node, worker, etcd and forwarder log and
the workers' JSONL.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from chaos import generate, netns
from chaos.checker import InvariantResult, check
from chaos.cluster import ChaosCluster
from chaos.collect import collect
from chaos.failpoints import FAILPOINTS, unavailable_reason
from chaos.history import HealthSample, History, InjectionRecord, RunMeta, save_history
from chaos.report import build, summary
from chaos.scenarios import Scenario, Step, plan, without_known_bugs
from chaos.workload import Traffic, create_workload

WARMUP_S = 3.0
SETTLE_MAX_S = 45.0
# Ticks of the window not yet fired or given their misfire record (a stalled partition).
BEHIND_SQL = ("SELECT count(*) FROM schedules s JOIN schedule_due d ON d.schedule_id = s.id"
              " WHERE NOT s.paused AND s.deleted_at IS NULL AND d.next_run_at <= to_timestamp(%s)")
DRAIN_SQL = (
    "SELECT count(*) FROM executions WHERE state NOT IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')"
    " AND ((schedule_id IS NULL AND created_at <= to_timestamp(%s)) OR fired_at <= to_timestamp(%s))"
)


@dataclass(frozen=True, slots=True)
class RunConfig:
    scenario: Scenario
    seed: int
    duration_s: float
    out: Path
    nodes: int = 3
    workers: int = 2
    keep: bool = False
    include_known_bugs: bool = False
    generate: bool = False  # the generative workload (chaos.generate) instead of the fixed schedules
    herd: int = 200  # --generate: allow schedules due together every 10 s (chaos.generate.draw_herd)


@dataclass
class _State:
    injections: list[InjectionRecord]
    health: list[HealthSample]
    skipped: list[dict[str, Any]]
    notes: list[str]
    executed: list[Step]
    walked: int = 0  # timeline steps reached (executed or skipped as unavailable)


def run(cfg: RunConfig) -> tuple[int, dict[str, Any]]:
    """Exit code (0 pass, 1 an invariant failed, 3 the run itself broke) and the report."""
    t_begin = time.time()
    # The traffic's pool retries through a PostgreSQL restart; its warnings are not the report.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    run_dir = cfg.out / f"{cfg.scenario.name}-seed{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    st = _State([], [], [], [], [])
    scenario = cfg.scenario
    if not cfg.include_known_bugs:
        scenario, masked = without_known_bugs(scenario)
        st.notes.extend(masked)
    spec = replace(scenario.cluster, nodes=cfg.nodes, workers=cfg.workers)
    if spec.netns:
        ok, why = netns.available()
        if not ok:
            spec = replace(spec, netns=False)
            st.notes.append(f"network partitions skipped: {why}")
    timeline = plan(scenario, cfg.seed)
    cluster = ChaosCluster(spec, run_dir / "cluster")
    history: History | None = None
    error: str | None = None
    exit_codes: dict[str, int | None] = {}
    traffic: Traffic | None = None
    operator: generate.Operator | None = None
    drawn, quota = generate.draw_schedules(cfg.seed, cfg.duration_s) if cfg.generate else ([], 0)
    herd = generate.draw_herd(cfg.seed, cfg.herd) if cfg.generate else []
    try:
        cluster.start()
        create_workload(cluster.pc.addresses(), overlap=scenario.overlap_schedules, schedules=not cfg.generate)
        ids = generate.create(cluster.pc.addresses(), drawn + herd, quota) if cfg.generate else {}
        previews = generate.record_previews(cluster.pc.addresses(), cfg.duration_s + SETTLE_MAX_S + 120)
        created = _created_at(cluster.pc.addresses())
        traffic = Traffic(cluster.pc.addresses, cfg.seed)
        if cfg.generate:
            operator = generate.Operator(
                cluster.pc.addresses, generate.draw_ops(cfg.seed, cfg.duration_s, len(drawn), len(herd)),
                [ids[d.spec["name"]] for d in drawn + herd], {p.schedule_id: list(p.ticks) for p in previews},
                cfg.seed)
        traffic.start()
        window_start = time.time()
        if operator is not None:
            operator.start(window_start)
        time.sleep(WARMUP_S)
        _walk(cluster, timeline, window_start, cfg.duration_s, st)
        traffic.stop()
        if operator is not None:
            operator.stop()
        window_end = time.time()
        _settle(cluster, window_end, st)
        explains = generate.record_explains(cluster.pc.addresses(), sorted(created.items()), window_end)
        exit_codes = cluster.quiesce()
        meta = RunMeta(
            scenario=cfg.scenario.name, seed=cfg.seed, partitions=spec.partitions, lease_ttl_s=spec.lease_ttl_s,
            misfire_grace_s=spec.misfire_grace_s, worker_lease_s=spec.worker_lease_s, window_start=window_start,
            window_end=window_end, collected_at=time.time(), worker_nodes=dict(cluster.worker_node),
            skews=dict(cluster.max_skew), generated=cfg.generate,
            quotas={generate.QUOTA_TENANT: quota} if cfg.generate else {},
        )
        names = sorted(set(cluster.pc.nodes) | set(cluster.base_nodes) | set(cluster.extras))
        history = collect(cluster.pc.dsn, cluster.workdir, cluster.jsonl_dir, meta, names, traffic.submitted,
                          st.injections, st.health)
        history = replace(history, previews=tuple(previews), explains=tuple(explains),
                          ops=tuple(operator.ops) if operator is not None else ())
        if traffic.failed:
            st.notes.append(f"{len(traffic.failed)} submissions never landed: {traffic.failed[:3]}")
    except BaseException as exc:  # a broken run still reports, keeps its logs and cleans up
        error = "".join(traceback.format_exception(exc))
        if traffic is not None:
            traffic.stop()
        if operator is not None:
            operator.stop()
        if not isinstance(exc, Exception):
            st.notes.append(f"interrupted by {type(exc).__name__}")
    finally:
        try:
            exit_codes = cluster.stop()
        except Exception as exc:  # teardown trouble must not hide the run's result
            st.notes.append(f"teardown: {type(exc).__name__}: {exc}")
    for node, code in exit_codes.items():
        if code != 0:
            st.notes.append(f"{node} exited {code} on the final SIGTERM")
    if history is not None:  # first: a checker that raises must not lose the run (`chaos check DIR`)
        save_history(history, run_dir / "history.json")
    results: list[InvariantResult] = check(history) if history is not None else []
    rep = build(
        scenario=scenario, seed=cfg.seed, duration_s=cfg.duration_s, wall_s=time.time() - t_begin,
        cluster={**asdict(spec), "etcd_members": 3}, planned=[asdict(s) for s in timeline[:st.walked + 3]],
        history=history, skipped=st.skipped, notes=st.notes, results=results, error=error, run_dir=str(run_dir),
        traffic=_traffic_stats(history, traffic), exit_codes=exit_codes,
        drawn=generate.describe(drawn, quota, len(herd)) if cfg.generate else None,
    )
    (run_dir / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    (run_dir / "summary.txt").write_text(summary(rep) + "\n")
    if rep["passed"] and not cfg.keep:
        shutil.rmtree(run_dir / "cluster", ignore_errors=True)
    return (0 if rep["passed"] else 3 if error else 1), rep


def _walk(cluster: ChaosCluster, timeline: list[Step], t0: float, duration_s: float, st: _State) -> None:
    for step in timeline:
        if time.time() - t0 >= duration_s:
            return
        st.walked = step.index + 1
        fp = FAILPOINTS[step.failpoint]
        if not fp.available(cluster):
            st.skipped.append({"step": step.index, "failpoint": step.failpoint,
                               "reason": unavailable_reason(fp, cluster)})
            continue
        before = cluster.health(f"before:{fp.name}")
        st.health.append(before)
        if not before.ok:
            st.notes.append(f"stopped injecting: unhealthy before step {step.index} ({fp.name})")
            return
        t = time.time()
        try:
            rec = fp.inject(cluster, random.Random(step.seed))
        except Exception as exc:
            rec = InjectionRecord(fp.name, "?", t, time.time(), False, f"{type(exc).__name__}: {exc}")
        st.injections.append(replace(rec, details={"step": step.index, **rec.details}))
        st.executed.append(step)
        after = cluster.health(f"after:{fp.name}")
        st.health.append(after)
        if not after.ok:
            st.notes.append(f"stopped injecting: no recovery after step {step.index} ({fp.name})")
            return
        time.sleep(step.gap_s)


def _settle(cluster: ChaosCluster, window_end: float, st: _State) -> None:
    """Let the work of the window finish: healthy, every schedule past the window (each of its
    ticks fired or given its misfire record), every run of the window terminal."""
    st.health.append(cluster.health("settle"))
    earliest = window_end + 2.0
    deadline = window_end + SETTLE_MAX_S
    left = behind = -1
    while time.time() < deadline:
        try:
            behind = int(cluster.pc.sql(BEHIND_SQL, window_end)[0][0])
            left = int(cluster.pc.sql(DRAIN_SQL, window_end, window_end)[0][0])
        except Exception as exc:  # PostgreSQL must be up by now; report rather than hang
            st.notes.append(f"settle: {type(exc).__name__}: {exc}")
            left = behind = -1
        if left == 0 and behind == 0 and time.time() >= earliest:
            return
        time.sleep(0.5)
    st.notes.append(f"settle: after {SETTLE_MAX_S}s {behind} schedule(s) still had ticks of the window to fire "
                    f"and {left} execution(s) of the window were not terminal")


def _created_at(addresses: list[str]) -> dict[str, float]:
    """schedule id -> created_at of every live schedule (the range explain is asked over)."""
    from cronwheel.client import Client

    with Client(addresses) as cw:
        return {s.id: s.created_at.timestamp() for s in cw.list_schedules(page_size=1000) if s.created_at}


def _traffic_stats(h: History | None, traffic: Traffic | None) -> dict[str, Any]:
    if h is None:
        return {}
    return {"schedules": len(h.schedules), "oneoffs": len(h.submitted), "executions": len(h.executions),
            "runs": sum(1 for r in h.runs if r.event == "start"),
            "submit_retries": traffic.retries if traffic else 0}
