"""observe_many is exactly repeated Histogram.observe, bucket edges included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from cronwheel.cluster.metrics import observe_many

BOUNDS = (0.005, 0.01, 0.02, 0.05, 0.1, 1.0)


def _state(h: Histogram) -> list[tuple[str, float]]:
    return sorted((s.name + str(s.labels), s.value) for m in h.collect() for s in m.samples
                  if not s.name.endswith("_created"))


@given(st.lists(st.one_of(st.sampled_from(BOUNDS), st.floats(-1, 5, allow_nan=False)), max_size=200))
def test_observe_many_equals_observe_one_by_one(values: list[float]) -> None:
    one = Histogram("one_seconds", "x", buckets=BOUNDS, registry=CollectorRegistry())
    many = Histogram("one_seconds", "x", buckets=BOUNDS, registry=CollectorRegistry())
    for v in values:
        one.observe(v)
    observe_many(many, values)
    got, want = _state(many), _state(one)
    assert [k for k, _ in got] == [k for k, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b))


def test_failure_labels_carry_no_free_text_and_are_capped() -> None:
    """The metrics endpoint is public (Prometheus' convention, issue 48 item 5): a worker's
    error_type becomes a label only when it is an identifier, and only the first 50 do."""
    from cronwheel.cluster.metrics import Metrics

    m = Metrics()
    try:
        m.record_outcome("failed", "ValueError", "j")
        m.record_outcome("failed", "password=hunter2 in /etc/app.conf", "j")
        m.record_outcome("failed", "", "j")
        for i in range(60):
            m.record_outcome("failed", f"E{i}", "j")
        labels = {s.labels["type"] for metric in m.registry.collect() if metric.name == "cronwheel_failures"
                  for s in metric.samples}
        assert {"ValueError", "error", "other"} <= labels and len(labels) <= 51
        assert not any("hunter2" in label for label in labels)
    finally:
        m.close()


def test_scaling_values_sum_queues_past_the_label_cap_and_keep_series_that_emptied() -> None:
    from datetime import UTC, datetime, timedelta

    from cronwheel.cluster.metrics import JobTypeLabels, scaling_values
    from cronwheel.storage.logs import ScalingSignal

    now = datetime(2026, 12, 7, tzinfo=UTC)
    labels = JobTypeLabels(1)
    got = scaling_values([
        ScalingSignal("default", "critical", 3, now - timedelta(seconds=5), 2),
        ScalingSignal("q2", "critical", 4, now - timedelta(seconds=9), 1),  # past the cap: other
        ScalingSignal("q3", "critical", 1, None, 7),
        ScalingSignal("default", "bulk", 0, None, 1),
    ], now, labels, {("default", "default"), ("gone", "bulk")})
    assert got == {("default", "critical"): (3, 5.0, 2), ("other", "critical"): (5, 9.0, 8),
                   ("default", "bulk"): (0, 0.0, 1), ("default", "default"): (0, 0.0, 0),
                   ("gone", "bulk"): (0, 0.0, 0)}
