"""The report of a chaos run: one JSON document (report.json) and a human summary (summary.txt,
also printed). Pure: built from the run's records and the checker's results."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from chaos.checker import InvariantResult
from chaos.history import History, InjectionRecord
from chaos.scenarios import Scenario

SHOWN_VIOLATIONS = 8


def build(*, scenario: Scenario, seed: int, duration_s: float, wall_s: float, cluster: dict[str, Any],
          planned: list[dict[str, Any]], history: History | None, skipped: list[dict[str, Any]],
          notes: list[str], results: list[InvariantResult], error: str | None, run_dir: str,
          traffic: dict[str, Any], exit_codes: dict[str, int | None],
          drawn: dict[str, Any] | None = None) -> dict[str, Any]:
    injections = list(history.injections) if history else []
    t0 = history.meta.window_start if history else 0.0
    takeovers: list[Any] = next((r.counts.get("takeovers", []) for r in results if r.name == "takeover_within_ttl"),
                                []) or []
    passed = error is None and bool(results) and all(r.ok for r in results)
    return {
        "scenario": scenario.name, "seed": seed,
        "scenario_info": {"description": scenario.description, "failpoints": list(scenario.failpoints),
                          "overlap_schedules": scenario.overlap_schedules, "regression": scenario.regression},
        "duration_s": duration_s, "wall_s": round(wall_s, 1),
        "passed": passed, "error": error, "cluster": cluster,
        "timeline_planned": planned,
        "faults": [_fault(f, t0) for f in injections],
        "skipped_failpoints": skipped,
        "notes": notes,
        "invariants": [asdict(r) for r in results],
        "takeovers": takeovers,
        "traffic": traffic,
        "node_exit_codes": exit_codes,
        "history_dir": run_dir,
        "generated": _generated(drawn, history, results) if drawn is not None else None,
    }


def _generated(drawn: dict[str, Any], history: History | None, results: list[InvariantResult]) -> dict[str, Any]:
    """What a generative run drew (schedules by policy, operations by kind, faults) and the share of
    its ticks an operation made ambiguous."""
    ops: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    if history is not None:
        ops.update(o.kind + ("" if o.ok else " (unanswered)") for o in history.ops)
        ops["submit"] += len(history.submitted)
        faults.update(f.name for f in history.injections)
    ticks = next((r.counts for r in results if r.name == "ticks_exactly_once"), {})
    return {**drawn, "operations": dict(sorted(ops.items())), "faults": dict(sorted(faults.items())),
            "ambiguous_ticks": ticks.get("ambiguous", 0), "ticks": ticks.get("ticks_expected", 0),
            "ambiguous_share": ticks.get("ambiguous_share", 0.0)}


def _fault(f: InjectionRecord, t0: float) -> dict[str, Any]:
    return {"name": f.name, "target": f.target, "at_s": round(f.start - t0, 2), "took_s": round(f.end - f.start, 2),
            "start": f.start, "end": f.end, "ok": f.ok, "error": f.error, "details": f.details}


def _brief(details: dict[str, Any]) -> str:
    parts = []
    for k, v in details.items():
        if k in ("signal_at", "running"):
            continue
        if isinstance(v, float):
            v = round(v, 2)
        parts.append(f"{k}={v}")
    return " ".join(parts)


def summary(rep: dict[str, Any]) -> str:
    c = rep["cluster"]
    lines = [
        f"chaos run: scenario {rep['scenario']}, seed {rep['seed']}, duration {rep['duration_s']:g}s, "
        f"wall {rep['wall_s']:g}s: {'PASSED' if rep['passed'] else 'FAILED'}",
        f"cluster: {c.get('nodes')} nodes, {c.get('workers')} workers, etcd {c.get('etcd_members')} members, "
        f"{c.get('partitions')} partitions, lease TTL {c.get('lease_ttl_s')}s, misfire grace "
        f"{c.get('misfire_grace_s')}s, worker lease {c.get('worker_lease_s')}s, "
        f"network namespaces {'on' if c.get('netns') else 'off'}",
    ]
    info = rep.get("scenario_info", {})
    if info.get("regression"):
        lines.append(f"regression scenario for: {info['regression']}")
    if rep.get("error"):
        lines.append(f"ERROR: {rep['error'].strip().splitlines()[-1] if rep['error'].strip() else rep['error']}")
    lines.append(f"faults injected ({len(rep['faults'])}):")
    for f in rep["faults"]:
        mark = " " if f["ok"] else "!"
        lines.append(f" {mark} t+{f['at_s']:6.1f}s  {f['name']:<17} {f['target']:<9} {f['took_s']:5.1f}s  "
                     f"{_brief(f['details'])}{'  ERROR ' + str(f['error']) if f['error'] else ''}")
    for s in rep["skipped_failpoints"]:
        lines.append(f"   skipped {s['failpoint']} (step {s['step']}): {s['reason']}")
    for n in rep["notes"]:
        lines.append(f"note: {n}")
    lines.append("invariants:")
    for r in rep["invariants"]:
        counts = {k: v for k, v in r["counts"].items() if k != "takeovers"}
        shown = " ".join(f"{k}={v}" for k, v in counts.items())
        lines.append(f"  {'PASS' if r['ok'] else 'FAIL'} {r['name']:<26} {shown}")
        for v in r["violations"][:SHOWN_VIOLATIONS]:
            lines.append(f"       - {v}")
        if r["total_violations"] > SHOWN_VIOLATIONS:
            lines.append(f"       ... {r['total_violations'] - SHOWN_VIOLATIONS} more in report.json")
    tk = [f"{t['fault']} {t['target']} {t['max_s']}s" for t in rep["takeovers"] if t.get("max_s") is not None]
    if tk:
        lines.append("takeover times (fault -> every partition of the node acquired again): " + ", ".join(tk))
    g = rep.get("generated")
    if g:
        lines.append(f"drew {g['schedules']} schedules (overlap x misfire: "
                     + ", ".join(f"{k} {v}" for k, v in g["combinations"].items())
                     + f") and a herd of {g.get('herd', 0)} allow schedules due together every 10 s")
        lines.append(f"  jitter {g['jitter']}, max_catch_up {g['max_catch_up']}, retention {g['retention']}, "
                     f"zones {g['zones']}, {g['quota_schedules']} under a quota of "
                     f"{g['quota_max_executions_per_day']}/day")
        lines.append("  operations: " + ", ".join(f"{k} {v}" for k, v in g["operations"].items()))
        lines.append("  faults: " + ", ".join(f"{k} {v}" for k, v in g["faults"].items()))
        lines.append(f"  ambiguous ticks: {g['ambiguous_ticks']} of {g['ticks']} "
                     f"({100 * g['ambiguous_share']:.2f} %, must stay under 5 %)")
        lines.append(f"  replay: python -m chaos run --scenario {rep['scenario']} --generate --seed {rep['seed']} "
                     f"--duration {rep['duration_s']:g}")
    tr = rep["traffic"]
    lines.append(f"traffic: {tr.get('schedules')} schedules, {tr.get('oneoffs')} one-off jobs submitted "
                 f"({tr.get('submit_retries')} submit retries), {tr.get('executions')} executions, "
                 f"{tr.get('runs')} handler runs")
    lines.append(f"history and logs: {rep['history_dir']}")
    return "\n".join(lines)
