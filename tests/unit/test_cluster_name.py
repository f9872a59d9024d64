"""`cronwheel migrate` and `cronwheel node` default to the same cluster name, or a default
deployment would refuse its own nodes (one database serves one cluster)."""

from __future__ import annotations

import inspect

from cronwheel.cli.main import build_parser
from cronwheel.cluster.coordination.partition_lease import PartitionLeaseConfig
from cronwheel.storage.migrate import migrate
from cronwheel.storage.partitions import DEFAULT_CLUSTER


def test_migrate_node_and_lease_config_default_to_one_cluster_name() -> None:
    parser = build_parser()
    node = parser.parse_args(["node"]).cluster
    migrate_flag = parser.parse_args(["migrate"]).cluster
    assert node == migrate_flag == PartitionLeaseConfig().cluster == DEFAULT_CLUSTER
    assert inspect.signature(migrate).parameters["cluster"].default == DEFAULT_CLUSTER
