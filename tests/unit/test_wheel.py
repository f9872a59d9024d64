"""Properties of the timing wheel, checked against a sorted-list reference model.

Example counts: the state machine runs ``WHEEL_MACHINE_EXAMPLES`` examples (1500 under the
"ci" hypothesis profile, which CI selects; 300 otherwise); override with the environment
variable ``CRONWHEEL_WHEEL_EXAMPLES``. The whole file stays under a minute on 2 cores in CI.
"""

from __future__ import annotations

import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from cronwheel.wheel import Handle, TimingWheel

_IN_CI = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev") == "ci"
WHEEL_MACHINE_EXAMPLES = int(os.environ.get("CRONWHEEL_WHEEL_EXAMPLES", 1500 if _IN_CI else 300))
PROPERTY_EXAMPLES = max(100, WHEEL_MACHINE_EXAMPLES // 3)

DAY = 86_400.0
STARTS = st.sampled_from([0.0, 1_700_000_000.0, 12_345.678])
TICKS = st.sampled_from([0.01, 0.1, 1.0, 0.37])
SLOTS = st.sampled_from([2, 3, 4, 16, 256])


class Model:
    """The reference: a dict of live entries; due entries are sorted by (deadline, seq)."""

    def __init__(self) -> None:
        self.live: dict[int, float] = {}  # seq (also the item) -> deadline
        self.seq = 0

    def insert(self, deadline: float) -> int:
        seq = self.seq
        self.seq += 1
        self.live[seq] = deadline
        return seq

    def cancel(self, seq: int) -> bool:
        return self.live.pop(seq, None) is not None

    def advance(self, now: float) -> list[int]:
        due = sorted((d, s) for s, d in self.live.items() if d <= now)
        for _, s in due:
            del self.live[s]
        return [s for _, s in due]


class EagerlyCompactingWheel(TimingWheel[int]):
    """Compacts a bucket at its first tombstone, so that compaction runs in every example."""

    _COMPACT_AT = 1


class WheelMachine(RuleBasedStateMachine):
    """Any interleaving of inserts, cancels and advances matches the model exactly."""

    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.wheel: TimingWheel[int] = TimingWheel(0.0)
        self.deadlines: list[float] = []
        self.cancelled_any = False

    @initialize(start=STARTS, tick=TICKS, slots=SLOTS, eager_compaction=st.booleans())
    def make_wheel(self, start: float, tick: float, slots: int, eager_compaction: bool) -> None:
        cls = EagerlyCompactingWheel if eager_compaction else TimingWheel
        self.wheel = cls(start, tick=tick, slots=slots)

    @property
    def now(self) -> float:
        return self.wheel.now

    def _insert(self, deadline: float) -> tuple[Handle, int]:
        handle = self.wheel.insert(deadline, self.model.seq)
        seq = self.model.insert(deadline)
        assert handle.seq == seq and handle.deadline == deadline
        self.deadlines.append(deadline)
        return handle, seq

    @rule(target=handles, back=st.floats(0.0, 1e5))
    def insert_past(self, back: float) -> tuple[Handle, int]:
        return self._insert(self.now - back)

    @rule(target=handles)
    def insert_at_now(self) -> tuple[Handle, int]:
        return self._insert(self.now)

    @rule(target=handles, ahead=st.floats(0.0, 1.0))
    def insert_near(self, ahead: float) -> tuple[Handle, int]:
        w = self.wheel
        return self._insert(self.now + ahead * 3 * w.tick * w.slots)

    @rule(target=handles, ahead=st.floats(0.0, 5 * DAY))
    def insert_far(self, ahead: float) -> tuple[Handle, int]:
        return self._insert(self.now + ahead)

    @rule(target=handles, n=st.integers(0, 3000))
    def insert_on_a_tick_boundary(self, n: int) -> tuple[Handle, int]:
        w = self.wheel
        return self._insert(w.now - w.now % w.tick + n * w.tick)

    @precondition(lambda self: self.deadlines)
    @rule(target=handles, data=st.data())
    def insert_duplicate_deadline(self, data: st.DataObject) -> tuple[Handle, int]:
        return self._insert(data.draw(st.sampled_from(self.deadlines)))

    @precondition(lambda self: self.deadlines)
    @rule(target=handles, data=st.data(), towards=st.sampled_from([-math.inf, math.inf]))
    def insert_next_to_an_earlier_deadline(
        self, data: st.DataObject, towards: float
    ) -> tuple[Handle, int]:
        return self._insert(math.nextafter(data.draw(st.sampled_from(self.deadlines)), towards))

    @rule(
        target=handles,
        ahead=st.one_of(st.floats(0.0, 10.0), st.floats(0.0, 2 * DAY)),
        spread=st.sampled_from([0.0, 1e-9, 0.003, 0.1, 1.0]),
        jitter=st.lists(st.integers(-3, 3), min_size=2, max_size=30),
        in_order=st.booleans(),
    )
    def insert_a_cluster(
        self, ahead: float, spread: float, jitter: list[int], in_order: bool
    ) -> MultipleResults[tuple[Handle, int]]:
        """Several entries in one bucket: equal, in or out of order, a few ticks apart."""
        base = self.now + ahead
        if in_order:
            jitter.sort()
        return multiple(*(self._insert(base + j * spread) for j in jitter))

    @rule(entry=handles)
    def cancel(self, entry: tuple[Handle, int]) -> None:
        handle, seq = entry
        expected = self.model.cancel(seq)
        self.cancelled_any |= expected
        assert self.wheel.cancel(handle) is expected

    def _advance(self, now: float) -> None:
        got = self.wheel.advance(now)
        assert got == self.model.advance(now)
        nd = self.wheel.next_deadline()
        assert nd is None or nd > now  # the firing loop never spins

    @rule(step=st.floats(0.0, 3.0))
    def advance_small(self, step: float) -> None:
        self._advance(self.now + step * self.wheel.tick)

    @rule(n=st.integers(1, 600))
    def advance_whole_ticks(self, n: int) -> None:
        self._advance(self.now + n * self.wheel.tick)

    @rule(step=st.floats(0.0, 10 * DAY))
    def advance_huge(self, step: float) -> None:
        self._advance(self.now + step)

    @rule()
    def advance_to_same_time(self) -> None:
        self._advance(self.now)

    @precondition(lambda self: self.model.live)
    @rule(data=st.data(), just_before=st.booleans())
    def advance_to_a_live_deadline(self, data: st.DataObject, just_before: bool) -> None:
        d = data.draw(st.sampled_from(sorted(self.model.live.values())))
        target = math.nextafter(d, -math.inf) if just_before else d
        self._advance(max(self.now, target))

    @invariant()
    def len_matches(self) -> None:
        assert len(self.wheel) == len(self.model.live)

    @invariant()
    def next_deadline_is_never_later_than_the_earliest_live_deadline(self) -> None:
        nd = self.wheel.next_deadline()
        if not self.model.live:
            assert nd is None
            return
        earliest = min(self.model.live.values())
        assert nd is not None and nd <= earliest
        if not self.cancelled_any:  # only tombstones can make it a strict lower bound
            assert nd == earliest


WheelMachine.TestCase.settings = settings(
    max_examples=WHEEL_MACHINE_EXAMPLES, stateful_step_count=40
)
TestWheelMatchesModel = WheelMachine.TestCase


@settings(max_examples=PROPERTY_EXAMPLES)
@given(
    offsets=st.lists(st.floats(-1.0, 3.0), max_size=60),
    start=STARTS,
    tick=st.sampled_from([0.01, 0.05, 0.1]),
    slots=SLOTS,
)
def test_caller_advancing_every_tick_gets_each_item_once_never_early_at_most_a_tick_late(
    offsets: list[float], start: float, tick: float, slots: int
) -> None:
    wheel: TimingWheel[int] = TimingWheel(start, tick=tick, slots=slots)
    deadlines = [start + off for off in offsets]
    for i, d in enumerate(deadlines):
        wheel.insert(d, i)
    seen: dict[int, float] = {}
    prev, n = start, 0
    while len(wheel):
        n += 1
        now = start + n * tick
        for i in wheel.advance(now):
            assert i not in seen  # exactly once
            seen[i] = now
            d = deadlines[i]
            assert d <= now  # never early
            if d > start:  # not due at the previous advance, so < one tick step late
                assert prev < d
                assert now - d <= tick + 4 * math.ulp(now)
        prev = now
    assert sorted(seen) == list(range(len(deadlines)))


@settings(max_examples=PROPERTY_EXAMPLES)
@given(
    offsets=st.lists(st.floats(-2.0, 5 * DAY), max_size=60),
    cancel_mask=st.lists(st.booleans(), max_size=60),
    start=STARTS,
    tick=TICKS,
    slots=SLOTS,
)
def test_firing_loop_sleeping_until_next_deadline_never_wakes_for_nothing(
    offsets: list[float], cancel_mask: list[bool], start: float, tick: float, slots: int
) -> None:
    """Waking at next_deadline() always finds work, except once per cancelled entry."""
    wheel: TimingWheel[int] = TimingWheel(start, tick=tick, slots=slots)
    handles = [wheel.insert(start + off, i) for i, off in enumerate(offsets)]
    cancels = sum(wheel.cancel(h) for h, c in zip(handles, cancel_mask, strict=False) if c)
    live = len(wheel)
    fired, idle_wakeups = 0, 0
    while (nd := wheel.next_deadline()) is not None:
        got = wheel.advance(max(nd, wheel.now))
        fired += len(got)
        idle_wakeups += not got
        assert idle_wakeups <= cancels
    assert fired == live and len(wheel) == 0


@settings(max_examples=PROPERTY_EXAMPLES)
@given(
    offsets=st.lists(st.floats(0.0, 3 * DAY), min_size=1, max_size=40),
    steps=st.lists(st.floats(0.0, DAY), max_size=8),
    tick=TICKS,
    slots=st.sampled_from([2, 3, 4]),
)
def test_cancel_works_wherever_the_entry_has_got_to_in_the_hierarchy(
    offsets: list[float], steps: list[float], tick: float, slots: int
) -> None:
    wheel: TimingWheel[int] = TimingWheel(0.0, tick=tick, slots=slots)
    handles = [wheel.insert(off, i) for i, off in enumerate(offsets)]
    returned: set[int] = set()
    for step in steps:  # move time so that buckets become runs at various levels
        returned.update(wheel.advance(wheel.now + step))
    for i, h in enumerate(handles):
        assert wheel.cancel(h) is (i not in returned)
        assert wheel.cancel(h) is False
    assert len(wheel) == 0
    assert wheel.advance(wheel.now + 4 * DAY) == []


@settings(max_examples=PROPERTY_EXAMPLES)
@given(
    ahead=st.floats(0.5, 2 * DAY),
    waits=st.lists(st.floats(0.0, 0.999), min_size=1, max_size=8),
    tick=TICKS,
    slots=SLOTS,
    approach=st.sampled_from(["jump", "just_before", "every_tick_near_the_end"]),
)
def test_equal_deadlines_inserted_as_time_passes_fire_in_insertion_order(
    ahead: float, waits: list[float], tick: float, slots: int, approach: str
) -> None:
    """The later an equal deadline is inserted, the lower its level: ties must still hold."""
    wheel: TimingWheel[int] = TimingWheel(0.0, tick=tick, slots=slots)
    d = ahead
    for i, frac in enumerate(waits):
        wheel.advance(max(wheel.now, min(math.nextafter(d, 0.0), wheel.now + (d - wheel.now) * frac)))
        wheel.insert(d, i)
        wheel.insert(math.nextafter(d, math.inf), 100 + i)  # a neighbour that must come after
    if approach == "just_before":
        assert wheel.advance(math.nextafter(d, -math.inf)) == []
    elif approach == "every_tick_near_the_end":
        while wheel.now + tick < d:
            assert wheel.advance(max(wheel.now, d - tick, wheel.now + tick)) == []
    n = len(waits)
    assert wheel.advance(d) == list(range(n))
    assert wheel.advance(d + tick) == [100 + i for i in range(n)]
