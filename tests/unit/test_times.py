"""Time's conversions are written once (cronwheel/times.py, issue 49): the Unix epoch is defined
there and nowhere else in the product, and so is each conversion to and from it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronwheel.times import EPOCH, from_micros, from_unix_s, to_micros, to_unix_s

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("cron", "wheel", "storage", "cluster", "client", "cronwheel")
# The epoch built by hand, or an instant turned into units since it.
SPELLED = re.compile(r"datetime\(1970\b|fromtimestamp\(0\b|\b_?EPOCH\s*=|//\s*timedelta\(microseconds=1\)"
                     r"|//\s*timedelta\(seconds=1\)")


def test_the_epoch_and_each_conversion_are_defined_once() -> None:
    found = sorted(f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
                   for folder in PRODUCT for path in (ROOT / folder).rglob("*.py")
                   if path.relative_to(ROOT).as_posix() != "cronwheel/times.py"
                   for n, line in enumerate(path.read_text().splitlines(), 1) if SPELLED.search(line))
    assert found == [], found


@pytest.mark.parametrize("at", [EPOCH, datetime(2026, 12, 7, 15, 0, 0, 123456, tzinfo=UTC),
                                datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                                datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)])
def test_conversions_are_exact_and_go_back(at: datetime) -> None:
    assert from_micros(to_micros(at)) == at
    assert from_unix_s(to_unix_s(at)) == at.replace(microsecond=0)
    assert to_unix_s(at) * 1_000_000 <= to_micros(at) < (to_unix_s(at) + 1) * 1_000_000  # the floor, before 1970 too


def test_a_planted_epoch_is_found() -> None:
    for line in ("_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)", "us = (dt - E) // timedelta(microseconds=1)"):
        assert SPELLED.search(line)
    assert not SPELLED.search("now + i * timedelta(microseconds=1)")  # a step, not a conversion
    assert timedelta(0) == from_micros(0) - EPOCH
