"""The API's per-call limits, defined once: the node enforces them (cluster/commands,
cluster/dispatch) and the client sizes and checks its calls by them (client/calls.py, the worker
SDK), so the two cannot drift apart. First the scheduler API's (proto/cronwheel/v1/scheduler.proto),
then the dispatch API's (dispatch.proto). No imports: the client package loads it without the
server's."""

# A job type, an idempotency key, a schedule's name, cron or time zone: at most MAX_NAME characters.
MAX_NAME = 200

# A payload, as JSON: at most MAX_PAYLOAD_BYTES.
MAX_PAYLOAD_BYTES = 256 * 1024

# SubmitJobs: 1..MAX_SUBMIT_BATCH jobs in one call (the client splits a longer list).
MAX_SUBMIT_BATCH = 10_000

# LeaseExecutionsRequest.max_count: 1..MAX_LEASE_COUNT. A call may lease a whole herd's worth
# (1,000 cron runs at one instant are one or two claims, not ten); the node claims one call at
# a time, so each call's fixed cost (two statements, a commit, a round trip) is paid per call.
MAX_LEASE_COUNT = 1000

# CompleteExecutionsRequest.items: 1..MAX_COMPLETE_BATCH completions.
MAX_COMPLETE_BATCH = 1000

# Waiting LeaseExecutions calls (wait_timeout > 0) held at once by one node: per tenant (admin
# callers, which serve every tenant, count as one more) and per worker_id of a tenant. Past
# either, the call is refused with RESOURCE_EXHAUSTED. The SDK's Worker holds
# ceil((concurrency + prefetch) / 250) + 1 of them (client/worker_policy.max_lease_calls).
MAX_POLLS_PER_TENANT = 1000
MAX_POLLS_PER_WORKER = 64

# Answers carrying runs' payloads, checkpoints and results (LeaseExecutions, ListExecutions) are
# cut by bytes as well as by count: past the first row, rows are added while their payload,
# checkpoint, result and error (as JSON text) add up to at most ANSWER_ROWS_BYTES; fewer rows
# then come back (ListExecutions: with a next_page_token; LeaseExecutions: fewer leased). One row
# is at most 256 KiB payload + 1 MiB checkpoint + 256 KiB result + 16 KiB error (jsonb's
# re-spacing can add up to half), so with each row's other fields an answer always fits in
# MAX_ANSWER_BYTES: the node's gRPC send limit, and gRPC's default receive limit of clients.
ANSWER_ROWS_BYTES = 3 * 1024 * 1024
MAX_ANSWER_BYTES = 4 * 1024 * 1024

# Calls a node's gRPC core may hold before the node's event loop takes them (grpc.aio takes one
# call at a time, so a burst waits there). Past gRPC's defaults (1,000, then a random share of
# the calls up to 3,000, every call past that) gRPC ends them itself, as CANCELLED, before the
# node sees them: a tenant's 5,000 long polls sent at once came back about half CANCELLED
# instead of the node's RESOURCE_EXHAUSTED naming its cap (issue 48). Below this, every call
# reaches the node; past it gRPC still sheds them (a waiting call holds a few kB).
MAX_PENDING_CALLS = 10_000

# Execution logs (AppendLogs, issue 53). The SDK keeps each attempt's log within ATTEMPT_LOG_BYTES
# of message text: its first ATTEMPT_LOG_HEAD_BYTES as written, then the last bytes up to the
# bound, with a truncation mark between them (client/worker_logs.py). A line is at most
# MAX_LOG_LINE_BYTES (the SDK cuts longer ones). One AppendLogs call holds at most
# MAX_LOG_ITEMS runs, MAX_LOG_LINES lines and MAX_LOG_CALL_BYTES of text (under MAX_ANSWER_BYTES,
# gRPC's default receive limit of the node).
ATTEMPT_LOG_BYTES = 1024 * 1024
ATTEMPT_LOG_HEAD_BYTES = 512 * 1024
MAX_LOG_LINE_BYTES = 16 * 1024
MAX_LOG_ITEMS = 1000
MAX_LOG_LINES = 10_000
MAX_LOG_CALL_BYTES = 2 * 1024 * 1024
MAX_LOG_LEVEL_CHARS = 16
MAX_LOG_LOGGER_CHARS = 200
# GetExecutionLogs pages (the node's check, cluster/commands/logs.py, and the Client's, client/calls.py):
# page_size 0 means DEFAULT_LOG_PAGE lines, at most MAX_LOG_PAGE.
DEFAULT_LOG_PAGE = 1000
MAX_LOG_PAGE = 5000
