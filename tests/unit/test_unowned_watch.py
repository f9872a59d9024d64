"""The unowned watch (cluster/coordination/unowned.py): a gap is reported once it reaches the
threshold, once, and again only after the partition was held in between."""

from __future__ import annotations

import pytest

from cronwheel.cluster.coordination.unowned import Gap, UnownedWatch

MEMBERS = {"n1", "n2"}


def test_a_partition_without_a_key_is_reported_once_when_its_gap_reaches_the_threshold() -> None:
    w = UnownedWatch(threshold_s=30)
    held = {0: "n1", 1: "n2"}  # partition 2 has no key
    assert w.observe(held, MEMBERS, 3, now=100.0) == []
    assert w.observe(held, MEMBERS, 3, now=129.9) == []
    assert w.observe(held, MEMBERS, 3, now=130.0) == [Gap(2, 30.0)]
    w.reported(2)
    assert w.observe(held, MEMBERS, 3, now=200.0) == []


def test_a_key_naming_a_node_that_is_no_member_is_no_owner() -> None:
    w = UnownedWatch(threshold_s=5)
    held = {0: "n1", 1: "gone"}
    w.observe(held, MEMBERS, 2, now=0.0)
    assert w.observe(held, MEMBERS, 2, now=5.0) == [Gap(1, 5.0)]


def test_a_report_not_written_is_offered_again_and_a_partition_held_again_starts_a_new_gap() -> None:
    w = UnownedWatch(threshold_s=1)
    w.observe({}, MEMBERS, 1, now=0.0)
    assert w.observe({}, MEMBERS, 1, now=1.0) == [Gap(0, 1.0)]
    assert w.observe({}, MEMBERS, 1, now=2.0) == [Gap(0, 2.0)], "not marked reported: offered again"
    w.reported(0)
    assert w.observe({0: "n1"}, MEMBERS, 1, now=3.0) == []
    assert w.observe({}, MEMBERS, 1, now=3.5) == []
    assert w.observe({}, MEMBERS, 1, now=4.5) == [Gap(0, 1.0)]


def test_a_short_handover_is_not_a_gap_worth_reporting() -> None:
    w = UnownedWatch(threshold_s=30)
    w.observe({0: "n1"}, MEMBERS, 1, now=0.0)
    w.observe({}, MEMBERS, 1, now=1.0)  # released by n1 ...
    assert w.observe({0: "n2"}, MEMBERS, 1, now=1.2) == []  # ... taken by n2
    assert w.observe({0: "n2"}, MEMBERS, 1, now=100.0) == []


def test_reset_forgets_every_gap_so_a_node_that_could_not_judge_starts_afresh() -> None:
    w = UnownedWatch(threshold_s=10)
    w.observe({}, MEMBERS, 1, now=0.0)
    w.reset()
    assert w.observe({}, MEMBERS, 1, now=9.0) == []
    assert w.observe({}, MEMBERS, 1, now=19.0) == [Gap(0, 10.0)]


def test_the_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threshold"):
        UnownedWatch(threshold_s=0)
