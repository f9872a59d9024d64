"""Test-only fault hook of the webhook sender (e2e and chaos). Off unless the environment names it.

`CRONWHEEL_TEST_WEBHOOK_HOLD_FANOUT=<file>`: while `<file>` exists, the sender fans no event out
to its deliveries (it still claims and sends deliveries that exist). This opens, for as long as a
test wants, the window between an event's commit and the enqueue of its deliveries, so that a
test can kill the node inside it and show that the event, the outbox, still owes its deliveries
(storage/webhooks.py). Never set it in production.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOLD_FANOUT_ENV = "CRONWHEEL_TEST_WEBHOOK_HOLD_FANOUT"


@dataclass(frozen=True, slots=True)
class FanOutFaults:
    path: Path | None = None

    @staticmethod
    def from_env() -> FanOutFaults:
        value = os.environ.get(HOLD_FANOUT_ENV, "")
        return FanOutFaults(Path(value) if value else None)

    def holding(self) -> bool:
        return self.path is not None and self.path.exists()
