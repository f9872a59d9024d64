"""bench.e2e imports cleanly, and the figures it reads from the node's metrics are computed as
Prometheus' histogram_quantile would compute them over the workload's window."""

from __future__ import annotations

import math

from bench.e2e import CPU_GROUPS, Record, checks, claim_figures, floor_txt, hist_quantile, pct


def test_a_quantile_of_the_difference_of_two_scrapes_interpolates_within_its_bucket() -> None:
    before = {0.01: 5.0, 0.1: 5.0, float("inf"): 5.0}  # fires before the workload do not count
    after = {0.01: 5.0, 0.1: 105.0, float("inf"): 105.0}  # 100 fires, all in (0.01, 0.1]
    assert math.isclose(hist_quantile(before, after, 0.5), 0.055)
    assert math.isclose(hist_quantile(before, after, 0.99), 0.0991)
    assert math.isnan(hist_quantile(after, after, 0.5))  # nothing observed in the window


def test_a_quantile_in_the_open_bucket_is_its_lower_bound() -> None:
    assert hist_quantile({}, {1.0: 0.0, float("inf"): 10.0}, 0.99) == 1.0


def test_duplicates_missing_and_unacknowledged_come_from_the_handler_records() -> None:
    recs = [Record("a", "-", 0.0, 1.0, 1), Record("a", "-", 0.0, 2.0, 2), Record("x", "-", 0.0, 1.0, 1)]
    assert checks({"a", "b"}, recs) == {"duplicates": 1.0, "missing": 1.0, "unacknowledged": 1.0}
    assert pct([3.0, 1.0, 2.0], 0.5) == 2.0


def test_the_claims_of_a_herd_are_the_distinct_started_at_of_its_rows() -> None:
    t = 1_000.0  # every run due at T; three claims leased them at T+0.02, T+0.05 and T+0.09
    rows = [(t, t + 0.02)] * 3 + [(t, t + 0.05)] * 5 + [(t, t + 0.09)] * 2
    got = claim_figures(rows)
    assert got["claims"] == 3.0
    assert math.isclose(got["claim_last_ms"], 90.0, abs_tol=1e-6)
    assert math.isclose(got["rows_lease_p50_ms"], 50.0, abs_tol=1e-6)
    assert math.isclose(got["rows_lease_p99_ms"], 90.0, abs_tol=1e-6)
    assert claim_figures([])["claims"] == 0.0 and math.isnan(claim_figures([])["claim_last_ms"])


def test_s_prints_the_node_cpu_of_a_call_of_each_kind_from_the_same_run() -> None:
    m = {"per_s_64": 2_000.0, "floor_per_s": 4_000.0}
    for phase, node_s in (("s64", 8.0), ("floor", 6.0)):  # 10 s windows: 20,000 submits, 40,000 checks
        m.update({f"cpu_{phase}_wall_s": 10.0, **{f"cpu_{phase}_{g}_s": 0.0 for g in CPU_GROUPS}})
        m[f"cpu_{phase}_node_s"] = node_s
    text = floor_txt(m)
    assert "4,000 calls/s" in text and "node CPU 0.15 ms a call, against 0.40 ms a SubmitJob" in text
    assert floor_txt({"per_s_64": 1.0}) == ""  # a run without the floor prints nothing of it
