"""The webhook sender's tunables (cluster/webhooks/sender.py): one frozen config, validated at
construction; the node's config composes it. A module of its own, importing nothing heavy, so the
CLI reads its defaults for `cronwheel node`'s flags without loading the sender."""

from __future__ import annotations

from dataclasses import dataclass, field

from cronwheel import egress


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """The sender's tunables. The backoff before retry n is uniform in
    [0, min(backoff_max_s, backoff_initial_s * backoff_multiplier^(n-1))] (full jitter)."""

    poll_s: float = 1.0  # pause between passes when no delivery ended
    lease_s: float = 60.0  # a claimed delivery is due again after this (its sender died)
    timeout_s: float = 10.0  # per delivery, in all: connect, send, and the whole answer
    max_attempts: int = 12
    backoff_initial_s: float = 10.0
    backoff_multiplier: float = 2.0
    backoff_max_s: float = 3600.0
    batch: int = 16  # requests in flight on this node at most
    per_tenant: int = 4  # of which one tenant's (or the cluster's own webhooks') at most
    fan_out_batch: int = 500  # events fanned out per transaction
    retention_days: int = 30  # finished deliveries are pruned after this
    prune_every_s: float = 600.0
    egress: egress.EgressPolicy = field(default_factory=egress.EgressPolicy)  # --egress-allow

    def validate(self) -> WebhookConfig:
        if not 0 < self.poll_s <= 60:
            raise ValueError(f"webhooks: poll_s must be in (0, 60], got {self.poll_s}")
        if not 0 < self.timeout_s < self.lease_s:
            raise ValueError(f"webhooks: need 0 < timeout_s ({self.timeout_s}) < lease_s ({self.lease_s}): "
                             "a lease shorter than a request would send it twice")
        if not 1 <= self.max_attempts <= 1000:
            raise ValueError(f"webhooks: max_attempts must be 1..1000, got {self.max_attempts}")
        if self.backoff_initial_s < 0 or self.backoff_max_s < self.backoff_initial_s or self.backoff_multiplier < 1:
            raise ValueError("webhooks: need 0 <= backoff_initial_s <= backoff_max_s and backoff_multiplier >= 1")
        if not 1 <= self.batch <= 256:
            raise ValueError(f"webhooks: batch must be 1..256, got {self.batch}")
        if not 1 <= self.per_tenant <= self.batch:
            raise ValueError(f"webhooks: per_tenant must be 1..batch ({self.batch}), got {self.per_tenant}")
        if not 1 <= self.fan_out_batch <= 10000:
            raise ValueError(f"webhooks: fan_out_batch must be 1..10000, got {self.fan_out_batch}")
        if self.retention_days < 1 or self.prune_every_s <= 0:
            raise ValueError("webhooks: retention_days >= 1 and prune_every_s > 0 are required")
        return self
