"""The contract's enums as the domain's words, derived from the generated `common_pb2` (never
copied by hand): `PRIORITY[1] == "critical"`, `by_name(PRIORITY)["critical"] == 1`.

Each table maps an enum number (UNSPECIFIED, 0, left out) to its name without the type's prefix,
lower-cased, which is exactly the value stored in PostgreSQL and used by the cron and cluster
layers ("run_once", "retry_scheduled", "buffer_one", ...). Hand-written, not generated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cronwheel.v1 import common_pb2


def words(enum: Any, prefix: str) -> dict[int, str]:
    """number -> domain word of a generated enum (0, UNSPECIFIED, left out)."""
    return {number: name.removeprefix(prefix).lower() for name, number in enum.items() if number != 0}


def by_name(table: Mapping[int, str]) -> dict[str, int]:
    return {word: number for number, word in table.items()}


PRIORITY = words(common_pb2.Priority, "PRIORITY_")
MISFIRE = words(common_pb2.MisfirePolicy, "MISFIRE_POLICY_")
OVERLAP = words(common_pb2.OverlapPolicy, "OVERLAP_POLICY_")
DST_GAP = words(common_pb2.DstGapPolicy, "DST_GAP_POLICY_")
DST_REPEATED = words(common_pb2.DstRepeatedPolicy, "DST_REPEATED_POLICY_")
STATE = words(common_pb2.ExecutionState, "EXECUTION_STATE_")
TRIGGER = words(common_pb2.Trigger, "TRIGGER_")
DEPENDENCY_POLICY = words(common_pb2.DependencyPolicy, "DEPENDENCY_POLICY_")
