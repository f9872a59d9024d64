"""Test-only fault hook of the dispatcher (chaos suite). Off unless the environment names it.

`CRONWHEEL_TEST_STALL_FAULTS=<file>`: JSON `{"schedule_id": "<uuid>", "stall_s": X}`. The first
completion batch (`Dispatcher.complete_many`) that succeeds a run of that schedule takes the file
(renaming it away: with one file shared by every node, one node takes it) and then stops for X
seconds in the middle of its transaction: after its first round trip (the runs are updated and
row-locked) and before the second (the release of buffered runs and the COMMIT). To PostgreSQL
this is a node cut off or paused mid-transaction, the fault chaos seed 4 met by chance (stop 41):
the server waits for the rest of the pipeline with the rows locked, and only the session's
`transaction_timeout` (storage/db.py SessionLimits) ends it. Never set it in production.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cronwheel.clock import Clock
from cronwheel.failpoints import STALL_FAULTS_ENV

log = logging.getLogger("cronwheel.cluster.dispatch.faults")


@dataclass
class StallFaults:
    path: Path | None = None

    @staticmethod
    def from_env() -> StallFaults:
        value = os.environ.get(STALL_FAULTS_ENV, "")
        return StallFaults(Path(value) if value else None)

    def _take(self, schedule_ids: Iterable[uuid.UUID | None]) -> float | None:
        assert self.path is not None
        try:
            spec = json.loads(self.path.read_text())
            target, stall = uuid.UUID(str(spec["schedule_id"])), float(spec["stall_s"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("bad stall fault file ignored", extra={"event": "test_fault_bad_file", "error": str(exc)})
            return None
        if target not in set(schedule_ids):
            return None
        try:
            self.path.rename(self.path.with_name(f"{self.path.name}.taken.{os.getpid()}"))
        except FileNotFoundError:
            return None  # another node took it
        return stall

    async def stall_completion(self, clock: Clock, schedule_ids: Iterable[uuid.UUID | None]) -> None:
        """Inside a completion batch's transaction, after its first round trip: stop for the
        file's `stall_s` if the batch succeeded a run of its schedule."""
        if self.path is None:
            return
        stall = self._take(schedule_ids)
        if stall is None:
            return
        log.warning("completion stalled mid-transaction (test fault)", extra={
            "event": "test_fault_completion_stalled", "stall_s": stall})
        await clock.sleep(stall)
