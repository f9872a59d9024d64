-- 0013_execution_trace_context: the W3C traceparent of an execution's trace (cronwheel/tracing.py),
-- written by the submit path and, for a cron tick, by the fire path, only while tracing is on;
-- handed to the worker with the lease. NULL: not traced. Nullable, no default: adding it rewrites
-- nothing.
ALTER TABLE executions ADD COLUMN IF NOT EXISTS trace_context text;
