"""Which partitions have had no owner for too long (pure: the time is an argument).

A partition is *held* while its etcd key exists and names a live member (a member key under a
lease); otherwise it is *unowned*: nobody fires its ticks, runs its reaper or prunes it. Short gaps
are normal (a rebalance hands a partition over in milliseconds; a dead node's partitions wait for
its lease TTL), so only a gap of at least `threshold_s` is reported, once per gap: a partition
reported stays reported until it is held again. A report that could not be written (the database
away) is offered again on the next observation, until `reported()` is called.

Every node watches the same keys and may report the same gap; the storage side writes one event
per gap (storage/partitions.py `report_unowned`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

DEFAULT_THRESHOLD_S = 30.0


@dataclass(frozen=True, slots=True)
class Gap:
    partition: int
    unowned_for_s: float


@dataclass(slots=True)
class UnownedWatch:
    """Not task-safe: one per coordinator, fed by its loop."""

    threshold_s: float = DEFAULT_THRESHOLD_S
    _since: dict[int, float] = field(default_factory=dict)  # partition -> monotonic start of its gap
    _reported: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.threshold_s > 0:
            raise ValueError(f"unowned alert threshold must be > 0 s, got {self.threshold_s}")

    def observe(self, holders: Mapping[int, str], members: Collection[str], partitions: int,
                now: float) -> list[Gap]:
        """`holders`: partition -> the node its key names; `now`: monotonic seconds. Returns the
        gaps that reached the threshold and were not reported yet, by partition."""
        out = []
        for p in range(partitions):
            if holders.get(p) in members:
                self._since.pop(p, None)
                self._reported.discard(p)
                continue
            since = self._since.setdefault(p, now)
            if p not in self._reported and now - since >= self.threshold_s:
                out.append(Gap(p, now - since))
        return out

    def reported(self, partition: int) -> None:
        """The gap of `partition` is recorded: do not offer it again until it is held again."""
        if partition in self._since:
            self._reported.add(partition)

    def reset(self) -> None:
        """This node cannot judge (its view is stale, its lease lapsed): start every gap afresh."""
        self._since.clear()
        self._reported.clear()
