"""Dispatch: workers lease runs, heartbeat, checkpoint and finish them with a fencing token.

`Dispatcher` (claims and outcomes), `polls` (the waiting lease calls and their caps; the
DispatchService servicer over them is cluster/api/dispatch_service.py), `reaper` (lapsed
leases, timeouts, retries, the dead man's switch), `policy` (pure: the one retry policy and the
priority order, used by the worker path and the reaper alike: the SQL only applies its
decisions), `faults` (test-only, off unless its environment variable is set: the chaos suite's
completion stall).

Everything here reaches PostgreSQL through `storage.dispatch.DispatchPort` (`store.dispatch`):
no psycopg, no query by name. Time is the injected `Clock`'s: the dispatcher and the reaper pass
`now` into every query that decides by time, and their loops wait on `clock.sleep`/`clock.wait`.
"""
