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
