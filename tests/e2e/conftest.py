"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .webhook_receiver import Receiver, serve_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver of webhook deliveries, for one test."""
    yield from serve_receiver()
