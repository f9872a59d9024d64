"""Shared test settings: hypothesis profiles (CI runs more examples, without deadlines, since
the machine is small and noisy), and SIGINT reaching the processes tests start."""

from __future__ import annotations

import os
import signal

from hypothesis import HealthCheck, settings

# The test process talks gRPC and also starts servers, nodes and workers: gRPC's fork handlers
# must be off before any test module imports gRPC (the rule and why: cronwheel.localservers).
import cronwheel.localservers  # noqa: F401

# Tests send Ctrl-C (SIGINT) to the CLIs they start (`events --follow`, `dev`) and expect exit
# code 130. A test run started as a background job of a shell without job control (`cmd &` in a
# script, nohup) inherits SIGINT ignored, every process it starts inherits that too, and such a
# CLI rightly keeps ignoring it: the test then waited for an exit that never came. A caught
# signal is reset to its default in a child at exec, so catching it here gives every child the
# default, whoever launched the run.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
