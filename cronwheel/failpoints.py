"""The names of the nodes' test-only fault hooks: the environment variables the chaos suite sets
and the nodes read. A shared leaf, so that chaos names a hook without importing server code.

    KEEPALIVE_FAULTS_ENV  cluster/coordination/faults.py: delay a keepalive's reply past the trust
                          window (the file it names holds `{"count": N, "after_lapse_s": X}`)
    STALL_FAULTS_ENV      cluster/dispatch/faults.py: stall a completion batch mid-transaction
                          (the file it names holds `{"schedule_id": "<uuid>", "stall_s": X}`)

Each hook is off unless its variable is set. Never set them in production.
"""

from __future__ import annotations

KEEPALIVE_FAULTS_ENV = "CRONWHEEL_TEST_KEEPALIVE_FAULTS"
STALL_FAULTS_ENV = "CRONWHEEL_TEST_STALL_FAULTS"
