"""The collector and long-lived processes: one rule for the node and the worker.

A node or a worker imports its modules, builds its parts, and then runs for days. Every full
collection (generation 2) walks every tracked object alive, with the event loop stopped, though
those made at startup (modules, classes, functions, the process's own parts, the user's handlers)
live as long as the process: measured on this machine, 17-24 ms a time in the node (~63,000
objects) and 15-16 ms in a worker (`bench.e2e` W3: one came 89 ms into a 1,000-run herd,
between the worker's lease answers). `gc.freeze()` moves them to the permanent generation, so a
collection walks only what was made since. Reference counting still frees frozen objects; only a
reference cycle among them that later becomes garbage would stay.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect once, then take what is alive out of the collector's sight. Called once the
    process is built and before it serves: a node when it first becomes ready, a worker started
    with `Worker.run()` (or `cronwheel worker`) before its first lease call."""
    gc.collect()
    gc.freeze()
