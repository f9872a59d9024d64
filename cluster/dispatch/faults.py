"""Test-only fault hook of the dispatcher (chaos suite). Off unless the environment names it.

`CRONWHEEL_TEST_STALL_FAULTS=<file>`: JSON `{"schedule_id": "<uuid>", "stall_s": X}` (or
`{"execution_id": "<uuid>", ...}`: that run, a one-off job's). The first
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
from collections.abc import Sequence
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

    def _take(self, runs: Sequence[tuple[uuid.UUID, uuid.UUID | None]]) -> float | None:
        assert self.path is not None
        try:
            spec = json.loads(self.path.read_text())
            key = "execution_id" if "execution_id" in spec else "schedule_id"
            target, stall = uuid.UUID(str(spec[key])), float(spec["stall_s"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("bad stall fault file ignored", extra={"event": "test_fault_bad_file", "error": str(exc)})
            return None
        if target not in {r[0] if key == "execution_id" else r[1] for r in runs}:
            return None
        try:
            self.path.rename(self.path.with_name(f"{self.path.name}.taken.{os.getpid()}"))
        except FileNotFoundError:
            return None  # another node took it
        return stall

    async def stall_completion(self, clock: Clock, runs: Sequence[tuple[uuid.UUID, uuid.UUID | None]]) -> None:
        """Inside a completion batch's transaction, after its first round trip: stop for the
        file's `stall_s` if the batch succeeded a run of its schedule (or that run); `runs`:
        the batch's (execution id, schedule id) pairs."""
        if self.path is None:
            return
        stall = self._take(runs)
        if stall is None:
            return
        log.warning("completion stalled mid-transaction (test fault)", extra={
            "event": "test_fault_completion_stalled", "stall_s": stall,
            "execution_ids": [str(r[0]) for r in runs]})
        await clock.sleep(stall)
