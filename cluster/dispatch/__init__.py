"""Dispatch: workers lease runs, heartbeat, checkpoint and finish them with a fencing token.

`Dispatcher` (claims and outcomes through the storage port), `service` (the DispatchService
servicer), `reaper` (lapsed leases, timeouts, retries, the dead man's switch), `policy` (pure:
the one retry policy and the priority order, used by the worker path and the reaper alike).
"""
