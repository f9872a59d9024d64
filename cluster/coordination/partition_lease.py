"""Lease-trust arithmetic and the ownership record. Pure: time is an argument.

A node may act for a partition only while its etcd lease is *surely* alive. It cannot know when
etcd will expire the lease, only when it last asked for a renewal, so trust is anchored at the
start of the last successful keepalive attempt (not at the reply, which may have been delayed):

    trusted_until = attempt_started + granted_ttl - safety_margin      (monotonic seconds)

A slow reply therefore never extends the window, and a node whose process was paused finds on
waking that `now >= trusted_until` and stops before writing anything (the database fence would
refuse it anyway: this is the first wall, fencing is the second).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cronwheel.cluster.coordination.unowned import DEFAULT_THRESHOLD_S


@dataclass(frozen=True, slots=True)
class PartitionLeaseConfig:
    cluster: str = "cronwheel"
    ttl_s: int = 5
    renew_every_s: float = 5 / 3
    safety_margin_s: float = 1.0
    resync_every_s: float = 1.0
    etcd_timeout_s: float = 1.0
    retry_backoff_s: float = 0.2
    retry_backoff_max_s: float = 2.0
    # A partition without a live holder this long raises the partition_unowned alert (unowned.py).
    unowned_alert_after_s: float = DEFAULT_THRESHOLD_S

    def validate(self) -> PartitionLeaseConfig:
        if self.ttl_s < 2:
            raise ValueError(f"lease ttl_s must be >= 2, got {self.ttl_s}")
        if not 0 < self.safety_margin_s < self.ttl_s / 2:
            raise ValueError(f"safety_margin_s must be in (0, ttl_s/2), got {self.safety_margin_s}")
        if not 0 < self.renew_every_s <= (self.ttl_s - self.safety_margin_s) / 2:
            raise ValueError(
                f"renew_every_s ({self.renew_every_s}) must leave time for a retry before trust lapses"
            )
        if not self.unowned_alert_after_s > 0:
            raise ValueError(f"unowned_alert_after_s must be > 0, got {self.unowned_alert_after_s}")
        if not self.cluster or "/" in self.cluster:
            raise ValueError(f"cluster name must be non-empty without '/', got {self.cluster!r}")
        return self

    @staticmethod
    def for_ttl(ttl_s: int, cluster: str = "cronwheel",
                unowned_alert_after_s: float = DEFAULT_THRESHOLD_S) -> PartitionLeaseConfig:
        margin = min(1.0, ttl_s / 5)
        return PartitionLeaseConfig(
            cluster=cluster, ttl_s=ttl_s, renew_every_s=ttl_s / 3, safety_margin_s=margin,
            unowned_alert_after_s=unowned_alert_after_s,
        ).validate()


@dataclass(slots=True)
class TrustWindow:
    """Not task-safe by itself: owned by the lease task; readers only call `trusted(now)`."""

    safety_margin_s: float
    trusted_until: float = float("-inf")

    def renewed(self, attempt_started: float, granted_ttl_s: float) -> None:
        """A keepalive that started at `attempt_started` succeeded with `granted_ttl_s` left.

        The window never moves backwards: a late reply to an older attempt cannot shorten it,
        and it is anchored at the attempt's start, so it cannot be extended by a slow reply.
        """
        until = attempt_started + granted_ttl_s - self.safety_margin_s
        if until > self.trusted_until:
            self.trusted_until = until

    def trusted(self, now: float) -> bool:
        return now < self.trusted_until

    def remaining(self, now: float) -> float:
        return self.trusted_until - now

    def revoke(self) -> None:
        self.trusted_until = float("-inf")


@dataclass(slots=True)
class Ownership:
    """Which partitions this node may act for, with their epochs. Owned by the coordinator."""

    epochs: dict[int, int] = field(default_factory=dict)

    def snapshot(self) -> dict[int, int]:
        return dict(self.epochs)
