"""cronwheel.client: what users import.

- `Worker` (and `JobContext`, `NonRetryable`, `WorkerStopped`): run handlers for job types;
  at-least-once, with heartbeats, checkpoints and fencing tokens; reports sent in the background
  and never dropped while the lease holds (see cronwheel.client.worker).
- `load_worker(module)`: find the Worker a module defines (used by `cronwheel worker MODULE`).
"""

from cronwheel.client.worker import JobContext, NonRetryable, Worker
from cronwheel.client.worker_connection import WorkerStopped

__all__ = ["JobContext", "NonRetryable", "Worker", "WorkerStopped", "load_worker"]


def load_worker(module_name: str) -> Worker:
    """The Worker instance a module defines (named `worker`, or the only one)."""
    import importlib

    mod = importlib.import_module(module_name)
    found = [v for v in vars(mod).values() if isinstance(v, Worker)]
    named = getattr(mod, "worker", None)
    if isinstance(named, Worker):
        return named
    if len(found) == 1:
        return found[0]
    raise LookupError(f"module {module_name} defines {len(found)} Worker instances; name one `worker`")
