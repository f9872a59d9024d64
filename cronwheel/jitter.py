"""The jitter hash: a tick's deterministic offset within its schedule's jitter window.

A shared leaf. cron applies it (`cronwheel.cron.jitter_offset_s` validates its arguments, then
calls `offset_s`), and the chaos checker recomputes the run_at a row was fired for with it, so
that the checker imports no server code and the rule is written once.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime

from cronwheel.times import to_micros


def offset_s(schedule_id: str, tick: datetime, window_s: float) -> float:
    """Offset in [0, window_s) for `schedule_id`'s tick (aware), the same on every node and run;
    0.0 when window_s is 0. The caller validates: cron.jitter_offset_s is the checked door."""
    if window_s == 0:
        return 0.0
    micros = to_micros(tick)
    digest = hashlib.blake2b(f"{schedule_id}\x1f{micros}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") >> 11) / float(1 << 53)  # uniform in [0, 1)
    return min(unit * window_s, math.nextafter(window_s, 0.0))
