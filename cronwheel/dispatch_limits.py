"""The dispatch API's per-call limits (proto/cronwheel/v1/dispatch.proto), defined once: the
node enforces them (cluster/dispatch) and the worker SDK sizes its calls by them (client), so
the two cannot drift apart. No imports: the client package loads it without the server's."""

# LeaseExecutionsRequest.max_count: 1..MAX_LEASE_COUNT. A call may lease a whole herd's worth
# (1,000 cron runs at one instant are one or two claims, not ten); the node claims one call at
# a time, so each call's fixed cost (two statements, a commit, a round trip) is paid per call.
MAX_LEASE_COUNT = 1000

# CompleteExecutionsRequest.items: 1..MAX_COMPLETE_BATCH completions.
MAX_COMPLETE_BATCH = 1000
