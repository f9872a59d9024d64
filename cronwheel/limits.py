"""The scheduler API's limits that the client checks before it sends, as the node does, defined
once: the node enforces them (cluster/commands) and the client sizes and checks its requests by
them (client/calls.py), so the two cannot drift apart. The dispatch API's per-call limits are in
`cronwheel.dispatch_limits`. No imports: the client package loads it without the server's."""

# A job type, an idempotency key, a schedule's name, cron or time zone: at most MAX_NAME characters.
MAX_NAME = 200

# A payload, as JSON: at most MAX_PAYLOAD_BYTES.
MAX_PAYLOAD_BYTES = 256 * 1024

# SubmitJobs: 1..MAX_SUBMIT_BATCH jobs in one call (the client splits a longer list).
MAX_SUBMIT_BATCH = 10_000
