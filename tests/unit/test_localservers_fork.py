"""Every process that starts children with a parent-death signal has gRPC's fork handlers off
before it first imports gRPC (the rule: cronwheel.devtools.localservers). Without it a child forked while
the parent's gRPC poller ran could abort before its exec: `python -m chaos run --scenario all
--seed 5` lost its restarted worker that way in stop 31 (exit -6, `epoll_wait error: Bad file
descriptor`), since the chaos runner, unlike the test process, never set it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What GRPC_ENABLE_FORK_SUPPORT was when `grpc` was first imported, importing `module` and then
# gRPC, in a fresh interpreter.
PROBE = """
import os, sys
seen = []
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc" and not seen:
            seen.append(os.environ.get("GRPC_ENABLE_FORK_SUPPORT"))
sys.meta_path.insert(0, Hook())
import {module}
import grpc
print(seen[0])
"""


@pytest.mark.parametrize("module", ["chaos.runner", "cronwheel.devtools.harness", "bench.e2e", "bench.fire",
                                    "bench.dispatch", "cronwheel.devtools.dev"])
def test_grpc_fork_handlers_are_off_before_grpc_is_first_imported(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=60, check=True)
    assert out.stdout.strip() == "false", out.stdout + out.stderr
