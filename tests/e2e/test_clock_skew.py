"""A node process whose clock is off PostgreSQL's beyond --max-clock-skew holds no partition.

Black box (issue 47, item 6): n2 runs with its wall clock 5 s ahead (chaos/skewed.py, as the chaos
suite skews a node), the bound is the default 2 s. n2 stays up and serves, but the cluster
converges on n1 alone, n2's /metrics say why, and it claims nothing: a run due in 3 s, queued
ahead, is not leased by n2 although n2's clock says it is 2 s overdue. Fails without the guard
(the cluster converges on both nodes).
"""

from __future__ import annotations

import uuid

import grpc
import pytest

from cronwheel.devtools.harness import ProcessCluster
from cronwheel.v1 import dispatch_pb2, dispatch_pb2_grpc

from .helpers import wait_until
from .ops_helpers import value

pytestmark = [pytest.mark.e2e]


def test_a_node_process_with_a_clock_5s_ahead_stands_down_and_claims_nothing() -> None:
    with ProcessCluster(partitions=8, lease_ttl_s=3) as c:
        c.start_node("n1")
        c.wait_converged(["n1"])
        n2 = c.start_node_with("n2", module="chaos.skewed", module_args=("5.0",))
        wait_until(lambda: value(n2, "cronwheel_clock_skew_exceeded") == 1, 30, "n2 to measure its skew")
        assert value(n2, "cronwheel_clock_skew_seconds") == pytest.approx(5.0, abs=0.3)
        c.wait_converged(["n1"])
        assert n2.alive() and value(n2, "cronwheel_partitions_owned") == 0
        c.sql("INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger)"
              " VALUES (%s, 't', 'noop', 0, now() + interval '3 s', now() + interval '3 s', 'queued', 'submit')"
              " RETURNING id",
              uuid.uuid4())
        with grpc.insecure_channel(n2.address) as ch:
            got = dispatch_pb2_grpc.DispatchServiceStub(ch).LeaseExecutions(dispatch_pb2.LeaseExecutionsRequest(
                worker_id="w1", max_count=10, lease_duration={"seconds": 30}), timeout=10)
        assert list(got.executions) == [], "n2 leased a run queued ahead before its run_at"
