"""The shipped monitoring files (deploy/), read the same way by the unit check (structure,
promtool) and the end-to-end check (every metric they name is one a real node exports)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "cronwheel.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
OPERATING = ROOT / "docs" / "operating.md"
# A metric name in PromQL: an identifier of ours, not inside a label matcher's quotes.
_METRIC = re.compile(r"\b((?:cronwheel|process)_[a-zA-Z0-9_]+)\b")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expr) for every query of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def alert_exprs() -> list[tuple[str, str]]:
    """(alert name, expr) of deploy/prometheus/alerts.yml, read without a YAML library: every rule
    is an `- alert:` line followed by its `expr:` line (the file's own layout)."""
    out, name = [], ""
    for line in ALERTS.read_text().splitlines():
        s = line.strip()
        if s.startswith("- alert:"):
            name = s.split(":", 1)[1].strip()
        elif s.startswith("expr:"):
            out.append((name, s.split(":", 1)[1].strip()))
    return out


def scaling_example_exprs() -> list[tuple[str, str]]:
    """(kind, PromQL) of every query in docs/operating.md's autoscaling examples: the `yaml`
    blocks holding a KEDA ScaledObject (`query:`) or an HPA with its prometheus-adapter rule
    (`seriesQuery:`, `metricsQuery:`)."""
    out = []
    for block in re.findall(r"```yaml\n(.*?)```", OPERATING.read_text(), re.S):
        kind = next((k for k in ("ScaledObject", "HorizontalPodAutoscaler") if f"kind: {k}" in block), None)
        if kind is None:
            continue
        for m in re.finditer(r"^\s*(?:query|seriesQuery|metricsQuery):\s*(.+)$", block, re.M):
            out.append((kind, m.group(1).strip().strip("'")))
    return out


def metric_names(expr: str) -> set[str]:
    unquoted = re.sub(r'"[^"]*"', '""', expr)
    return set(_METRIC.findall(unquoted))


def exported_sample_names(families: list[Any]) -> set[str]:
    """Every sample name the families of a /metrics page can produce (histogram children,
    counters' _total, ...), whether or not a labelled child exists yet."""
    out: set[str] = set()
    for f in families:
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                    "summary": ("_sum", "_count", "_created")}.get(f.type, ("",))
        out.update(f.name + s for s in suffixes)
        out.update(s.name for s in f.samples)
    return out
