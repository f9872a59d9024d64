"""Shared test settings: hypothesis profiles (CI runs more examples, without deadlines, since
the machine is small and noisy)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# The test process talks gRPC and also starts servers, nodes and workers: gRPC's fork handlers
# must be off before any test module imports gRPC (the rule and why: cronwheel.localservers).
import cronwheel.localservers  # noqa: F401

settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
