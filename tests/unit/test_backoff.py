"""Infrastructure backoff is one rule (cronwheel/backoff.py, issue 49): the firing path's loads,
the coordinator's loops, the client's transport and the worker's calls take their pauses from it,
and no other module doubles a pause itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cronwheel.backoff import backoff_s
from cronwheel.client.transport import Settings
from cronwheel.client.worker_policy import backoff_s as worker_backoff_s

ROOT = Path(__file__).resolve().parents[2]
DOUBLING = re.compile(r"\b\w*(delay|backoff|pause)\w* \* 2\b|2 \*\* min\(")


def test_the_pause_doubles_from_the_first_up_to_the_cap_and_jitter_stays_in_its_upper_half() -> None:
    assert [backoff_s(n, 0.5, 5.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff_s(10_000, 0.5, 5.0) == 5.0
    assert [backoff_s(n, 5.0, 2.0) for n in (1, 2)] == [5.0, 5.0]  # a cap below the first pause: the first
    assert backoff_s(3, 0.1, 5.0, rand=0.0) == pytest.approx(0.2)
    assert backoff_s(3, 0.1, 5.0, rand=0.999) < 0.4
    for bad in ({"failures": 0}, {"failures": 1, "rand": 1.0}):
        with pytest.raises(ValueError):
            backoff_s(initial_s=0.1, max_s=1.0, **bad)  # type: ignore[arg-type]


def test_the_client_transport_and_the_worker_take_the_shared_rule() -> None:
    s = Settings(addresses=("a:1", "b:2"), retries=8, backoff_s=0.1, backoff_max_s=0.3)
    assert list(s.pauses()) == [0.0, 0.1, 0.0, 0.2, 0.0, 0.3, 0.0, 0.3]  # none while an address is untried
    assert worker_backoff_s(3, 0.5) == backoff_s(3, 0.05, 2.0, 0.5)


def test_no_other_module_doubles_a_pause() -> None:
    found = sorted(f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                   for folder in ("cluster", "client", "cronwheel", "storage") for p in (ROOT / folder).rglob("*.py")
                   if p.relative_to(ROOT).as_posix() != "cronwheel/backoff.py"
                   for n, line in enumerate(p.read_text().splitlines(), 1) if DOUBLING.search(line))
    assert found == [], found
