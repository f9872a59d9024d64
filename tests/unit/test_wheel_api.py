"""The wheel's API contract: bad input, repr, handles, bursts, laziness and memory."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable

import pytest

from cronwheel.wheel import Handle, TimingWheel

NAN = float("nan")
INF = float("inf")


def _populated() -> tuple[TimingWheel[str], list[Handle]]:
    wheel: TimingWheel[str] = TimingWheel(1000.0, tick=0.5, slots=4)
    handles = [
        wheel.insert(d, f"x{i}")
        for i, d in enumerate([999.0, 1000.2, 1001.0, 1003.7, 1050.0, 1003.7, 5000.0])
    ]
    wheel.advance(1000.5)
    return wheel, handles


def _same_future(a: TimingWheel[str], b: TimingWheel[str]) -> None:
    """Both wheels behave identically from here on."""
    assert len(a) == len(b) and a.now == b.now and a.next_deadline() == b.next_deadline()
    assert repr(a) == repr(b)
    for w in (a, b):
        w.insert(1002.0, "late")
    for now in (1001.0, 1003.7, 1049.0, 6000.0):
        assert a.advance(now) == b.advance(now)
        assert len(a) == len(b) and a.next_deadline() == b.next_deadline()


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_deadline_is_refused_by_name_and_changes_nothing(bad: float) -> None:
    wheel, _ = _populated()
    twin, _ = _populated()
    with pytest.raises(ValueError, match=rf"deadline .*{bad!r}"):
        wheel.insert(bad, "bad")
    _same_future(wheel, twin)


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_now_is_refused_by_name_and_changes_nothing(bad: float) -> None:
    wheel, _ = _populated()
    twin, _ = _populated()
    with pytest.raises(ValueError, match=rf"now .*{bad!r}"):
        wheel.advance(bad)
    _same_future(wheel, twin)


def test_advancing_backwards_is_refused_naming_both_times_and_changes_nothing() -> None:
    wheel, _ = _populated()
    twin, _ = _populated()
    with pytest.raises(ValueError, match=r"1000\.4999.*earlier than the last advance 1000\.5"):
        wheel.advance(1000.4999)
    _same_future(wheel, twin)


def test_deadline_too_far_for_its_tick_index_is_a_value_error_and_changes_nothing() -> None:
    wheel: TimingWheel[str] = TimingWheel(0.0, tick=1e-300)
    with pytest.raises(ValueError, match=r"deadline 1e\+300 is too far"):
        wheel.insert(1e300, "x")
    with pytest.raises(ValueError, match=r"now 1e\+300 is too far"):
        wheel.advance(1e300)
    assert len(wheel) == 0 and wheel.now == 0.0 and wheel.levels == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": NAN}, "start must be a finite number of seconds, got nan"),
        ({"start": INF}, "start must be a finite number of seconds, got inf"),
        ({"start": 0.0, "tick": 0.0}, "tick must be a positive finite number of seconds, got 0.0"),
        ({"start": 0.0, "tick": -0.01}, "tick must be a positive finite number of seconds, got -0.01"),
        ({"start": 0.0, "tick": NAN}, "tick must be a positive finite number of seconds, got nan"),
        ({"start": 0.0, "tick": INF}, "tick must be a positive finite number of seconds, got inf"),
        ({"start": 0.0, "slots": 1}, "slots must be an integer >= 2, got 1"),
        ({"start": 0.0, "slots": 0}, "slots must be an integer >= 2, got 0"),
        ({"start": 0.0, "slots": -3}, "slots must be an integer >= 2, got -3"),
        ({"start": 0.0, "slots": 2.5}, "slots must be an integer >= 2, got 2.5"),
    ],
)
def test_bad_construction_is_refused_naming_the_value(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}$".replace("+", r"\+")):
        TimingWheel(**kwargs)  # type: ignore[arg-type]


def test_repr_shows_time_shape_and_size() -> None:
    wheel, handles = _populated()
    assert repr(wheel) == "TimingWheel(now=1000.5, tick=0.5, slots=4, levels=7, len=5)"
    assert repr(handles[2]) == "Handle(seq=2, deadline=1001.0, issued)"
    wheel.cancel(handles[2])
    assert repr(handles[2]) == "Handle(seq=2, deadline=1001.0, cancel() called)"
    assert repr(TimingWheel(0.0)) == "TimingWheel(now=0.0, tick=0.01, slots=256, levels=1, len=0)"


def test_worked_example_of_the_package_docstring() -> None:
    w: TimingWheel[str] = TimingWheel(0.0, tick=1.0, slots=4)
    h_a = w.insert(2.5, "A")
    w.insert(9, "B")
    w.insert(9, "C")
    h_d = w.insert(40, "D")
    w.insert(-1, "E")
    assert w.levels == 3 and w.next_deadline() == -1
    assert w.advance(3) == ["E", "A"] and w.next_deadline() == 9
    assert w.advance(9) == ["B", "C"]
    w.insert(9.5, "F")
    assert (w.cancel(h_d), w.cancel(h_d), len(w), w.next_deadline()) == (True, False, 1, 9.5)
    assert w.advance(50) == ["F"] and len(w) == 0 and w.next_deadline() is None
    assert w.cancel(h_a) is False


def test_past_and_present_deadlines_fire_at_the_next_advance_even_without_moving() -> None:
    wheel: TimingWheel[str] = TimingWheel(100.0)
    wheel.insert(100.0, "now")
    wheel.insert(3.0, "long ago")
    assert wheel.next_deadline() == 3.0
    assert wheel.advance(100.0) == ["long ago", "now"]


def test_a_million_style_burst_comes_back_whole_and_in_insertion_order() -> None:
    wheel: TimingWheel[int] = TimingWheel(0.0)
    for i in range(200_000):
        wheel.insert(90.0, i)
    assert wheel.next_deadline() == 90.0
    assert wheel.advance(math.nextafter(90.0, 0.0)) == []
    out = wheel.advance(90.0)
    assert out == list(range(200_000)) and len(wheel) == 0


def test_the_same_item_inserted_twice_fires_twice() -> None:
    wheel: TimingWheel[object] = TimingWheel(0.0)
    item = object()
    wheel.insert(1.0, item)
    wheel.insert(1.0, item)
    assert wheel.advance(1.0) == [item, item]


def test_cancel_is_idempotent_and_false_after_expiry() -> None:
    wheel: TimingWheel[str] = TimingWheel(0.0, tick=0.01, slots=8)
    early, late = wheel.insert(0.5, "early"), wheel.insert(3 * 86_400.0, "late")
    assert wheel.advance(1.0) == ["early"]
    assert wheel.cancel(early) is False
    assert (wheel.cancel(late), wheel.cancel(late), len(wheel)) == (True, False, 0)
    assert wheel.advance(4 * 86_400.0) == []


def test_cancelling_most_of_a_bucket_compacts_it_and_keeps_the_rest_in_order() -> None:
    wheel: TimingWheel[int] = TimingWheel(0.0)
    handles = [wheel.insert(60.0 + (i % 7) * 0.001, i) for i in range(1000)]
    assert sum(wheel.cancel(h) for h in handles if h.seq % 10) == 900
    assert sum(wheel.cancel(h) for h in handles if h.seq % 10) == 0
    assert len(wheel) == 100 and wheel.next_deadline() == 60.0
    kept = sorted(range(0, 1000, 10), key=lambda i: (60.0 + (i % 7) * 0.001, i))
    assert wheel.advance(61.0) == kept


def test_a_handle_from_another_wheel_is_refused() -> None:
    a: TimingWheel[str] = TimingWheel(0.0)
    b: TimingWheel[str] = TimingWheel(0.0)
    handle = a.insert(1.0, "x")
    with pytest.raises(ValueError, match="issued by another TimingWheel"):
        b.cancel(handle)
    assert len(a) == 1 and len(b) == 0


def test_overflow_levels_are_created_only_when_a_deadline_needs_them() -> None:
    wheel: TimingWheel[str] = TimingWheel(0.0, tick=0.01, slots=256)
    assert wheel.levels == 1
    wheel.insert(2.0, "level 0")
    assert wheel.levels == 1
    wheel.insert(120.0, "level 1")
    assert wheel.levels == 2
    wheel.insert(86_400.0, "a day away")
    assert wheel.levels == 3
    assert wheel.advance(86_400.0) == ["level 0", "level 1", "a day away"]


def _bytes_per_timer(n: int, insert: Callable[[float, object], object]) -> float:
    items = [object() for _ in range(n)]  # owned by the caller: allocated before measuring
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, item in enumerate(items):
            insert(1_700_000_000.0 + (i % 12_000) * 0.01 + 0.005, item)  # handles dropped
        return (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()


def test_a_timer_costs_well_under_150_bytes() -> None:
    wheel: TimingWheel[object] = TimingWheel(1_700_000_000.0)
    assert _bytes_per_timer(100_000, wheel.insert) < 150
