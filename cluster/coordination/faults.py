"""Test-only fault hooks of the coordinator (chaos suite). Off unless the environment names them.

`CRONWHEEL_TEST_KEEPALIVE_FAULTS=<file>`: before each keepalive the lease task reads `<file>`,
JSON `{"count": N, "after_lapse_s": X}`; while N > 0 it takes one (rewriting the file, deleting it
at 0) and delays that keepalive's reply until the local trust window has been closed for X
seconds, holding the trust watchdog meanwhile. This is "a keepalive answered after the trust
window but before the drop" (issue 14, hole 1): the firing path sees the partition untrusted for
X seconds, then trust comes back (the reply renews the window from the attempt's start, which
etcd did honour) without the partitions ever being dropped. The delay never goes past the window
the reply opens, so the node never acts on an expired lease. Never set it in production.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cronwheel.clock import Clock
from cronwheel.failpoints import KEEPALIVE_FAULTS_ENV

log = logging.getLogger("cronwheel.cluster.coordination.faults")


@dataclass
class KeepaliveFaults:
    """Owned by the lease task; the watchdog only reads `holding`."""

    path: Path | None = None
    holding: bool = False  # a delayed reply is pending: the watchdog must not drop yet

    @staticmethod
    def from_env() -> KeepaliveFaults:
        value = os.environ.get(KEEPALIVE_FAULTS_ENV, "")
        return KeepaliveFaults(Path(value) if value else None)

    def take(self) -> float | None:
        """The lateness (seconds after the window closes) of the next reply, if one is due."""
        if self.path is None:
            return None
        try:
            spec = json.loads(self.path.read_text())
            count, late = int(spec["count"]), float(spec["after_lapse_s"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("bad keepalive fault file ignored", extra={"event": "test_fault_bad_file", "error": str(exc)})
            return None
        if count <= 0:
            return None
        if count == 1:
            self.path.unlink(missing_ok=True)
        else:
            self.path.write_text(json.dumps({"count": count - 1, "after_lapse_s": late}))
        return late

    async def delay_reply(self, clock: Clock, lapse_at: float, renewed_until: float) -> None:
        """Hold the reply of a keepalive until `lapse_at + late` (monotonic), but end before
        `renewed_until`, the window the reply will open."""
        late = self.take()
        if late is None:
            return
        until = min(lapse_at + late, renewed_until - 0.05)
        self.holding = True
        try:
            log.warning("keepalive reply delayed (test fault)", extra={
                "event": "test_fault_keepalive_delayed", "after_lapse_s": late,
                "held_s": round(until - clock.monotonic(), 3)})
            await clock.sleep(until - clock.monotonic())
        finally:
            self.holding = False
