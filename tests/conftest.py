"""Shared test settings: hypothesis profiles (CI runs more examples, without deadlines, since
the machine is small and noisy)."""

from __future__ import annotations

import os

# The test process itself talks gRPC (Client and Worker tests run in-process) and also forks
# servers, nodes and workers (subprocess with a preexec_fn, for the parent-death signal). With
# gRPC's fork support on, a fork taken while another thread is inside gRPC skips gRPC's fork
# handlers and the child could die before its exec (a node that "did not start" with an epoll
# "Bad file descriptor" in its log; initdb with SIGSEGV). The children exec at once and need
# nothing of the parent's gRPC state, so the handlers are off for the test process. Read by grpc
# when it is first imported: this file is loaded before any test module imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
