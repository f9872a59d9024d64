"""Shared test settings: hypothesis profiles (CI runs more examples, without deadlines, since
the machine is small and noisy), and SIGINT reaching the processes tests start."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The test process talks gRPC and also starts servers, nodes and workers: gRPC's fork handlers
# must be off before any test module imports gRPC (the rule and why: cronwheel.devtools.localservers).
import cronwheel.devtools.localservers  # noqa: F401

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

# A second, older PostgreSQL for the tests whose subject differs by server version: query plans
# (stop 39: a completion batch's kept plan was a sequential scan on 15 and an index scan on 18, the
# wheel's PostgreSQL and CI's) and the transaction limit (15 and 16 have no transaction_timeout:
# the nodes enforce it, stop 43). Debian's postgresql-15 unless $CRONWHEEL_POSTGRES15_BIN names
# another directory holding `postgres` and `initdb`. Missing, its tests are skipped on a
# developer's machine and FAIL in CI (CI=true): `.ci/run` installs it.
PG15_BIN = Path(os.environ.get("CRONWHEEL_POSTGRES15_BIN") or "/usr/lib/postgresql/15/bin")


def require_pg15() -> Path:
    """PG15_BIN, or skip the test (fail it in CI) where it is missing."""
    if not all((PG15_BIN / exe).exists() for exe in ("postgres", "initdb")):
        why = f"PostgreSQL 15 is missing ({PG15_BIN}): apt-get install -y postgresql-15"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run these tests on PostgreSQL 15 too: {why}")
        pytest.skip(why)
    return PG15_BIN
