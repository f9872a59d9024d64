"""deploy/: the Prometheus rules pass promtool (rules and their unit tests), the Grafana
dashboard is well formed. (Every metric both name is checked against a real node's /metrics by
tests/e2e/test_deploy_metrics.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.deploy_files import ALERTS, ALERTS_TEST, ROOT, alert_exprs, dashboard, dashboard_exprs, metric_names


def promtool() -> str:
    """promtool's path. Missing: a failure in CI (.ci/run installs Debian's `prometheus`), a skip
    elsewhere."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool is missing in CI: .ci/run installs it (apt-get install -y prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus); CI runs this check")
    return path


def test_alert_rules_pass_promtool_check_rules() -> None:
    out = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_exprs())} rules found" in out.stdout


def test_alert_rules_fire_as_their_unit_tests_say() -> None:
    out = subprocess.run([promtool(), "test", "rules", str(ALERTS_TEST)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_names_a_cronwheel_metric_or_up() -> None:
    for name, expr in alert_exprs():
        assert metric_names(expr) or "up{" in expr, name


def test_dashboard_panels_are_well_formed() -> None:
    d = dashboard()
    assert d["uid"] == "cronwheel" and d["title"] and isinstance(d["schemaVersion"], int)
    assert {v["name"] for v in d["templating"]["list"]} == {"datasource", "job"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        assert p["type"] in ("timeseries", "stat", "alertlist"), p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] != "alertlist":
            refs = [t["refId"] for t in p["targets"]]
            assert refs and len(refs) == len(set(refs)), p["title"]
            for t in p["targets"]:
                assert metric_names(t["expr"]), f"{p['title']}: {t['expr']} names no metric"
                assert t["datasource"]["uid"] == "${datasource}"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    names = set().union(*(metric_names(e) for _, e in dashboard_exprs()))
    assert {"cronwheel_fire_lag_seconds_bucket", "cronwheel_start_lag_seconds_bucket", "cronwheel_queue_depth",
            "cronwheel_executions_entered_total", "cronwheel_partitions_owned"} <= names
    assert any(p["type"] == "alertlist" for p in dashboard()["panels"])


def test_operating_md_lists_exactly_the_shipped_rules() -> None:
    """docs/operating.md's table of rules is the file's: same alerts, same expressions."""
    doc = (ROOT / "docs" / "operating.md").read_text()
    rows = re.findall(r"^\| `(Cronwheel\w+)` \| `(.+?)`(?: \(|\s*\|)", doc, flags=re.M)
    assert dict(rows) == dict(alert_exprs())
