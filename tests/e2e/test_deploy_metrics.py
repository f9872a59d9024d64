"""Every metric the shipped dashboard and alert rules name is one a real node exports (read
from a node process's /metrics page), so a renamed metric cannot leave an empty panel."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy_files import alert_exprs, dashboard_exprs, exported_sample_names, metric_names

from .api_cluster import api_cluster
from .ops_helpers import scrape

pytestmark = [pytest.mark.e2e]


def test_every_metric_of_the_dashboard_and_the_alerts_is_exported_by_a_real_node() -> None:
    with api_cluster(partitions=4, auth=False) as (cluster, _address):
        page = scrape(cluster.nodes["n1"])
    exported = exported_sample_names(list(text_string_to_metric_families(page)))
    assert "cronwheel_executions_entered_total" in exported and "process_cpu_seconds_total" in exported
    for where, expr in [*dashboard_exprs(), *alert_exprs()]:
        missing = metric_names(expr) - exported
        assert not missing, f"{where}: {sorted(missing)} not exported by a node"
