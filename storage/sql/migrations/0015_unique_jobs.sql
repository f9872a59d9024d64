-- 0015_unique_jobs: unique jobs beyond idempotency keys (River's unique_key + unique_states).
-- A submitted job with `unique` options carries unique_key (sha256 of tenant, type, the compared
-- args and the period bucket, computed by cluster/commands/unique.py) and unique_states (a bitmask
-- of the states in which it holds that key). The partial unique index admits one row per key among
-- the rows whose own state is in their own mask, so two submits racing on two nodes make one
-- execution, and a row that leaves its states (finishes) frees the key for the next submit.
-- The bit of each state is defined here and nowhere else in SQL; storage/executions.py mirrors it
-- (UNIQUE_STATE_BITS) and tests/integration/test_unique_jobs.py checks that the two agree.
-- Both columns are NULL for every other row (cron ticks, triggers, jobs without `unique`): they
-- make no index entry, and adding them rewrites nothing.
CREATE OR REPLACE FUNCTION cronwheel_unique_holds(states smallint, state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (states & CASE state
                         WHEN 'scheduled' THEN 1
                         WHEN 'queued' THEN 2
                         WHEN 'running' THEN 4
                         WHEN 'retry_scheduled' THEN 8
                         WHEN 'succeeded' THEN 16
                         WHEN 'failed' THEN 32
                         WHEN 'dead' THEN 64
                         WHEN 'cancelled' THEN 128
                         WHEN 'skipped' THEN 256
                         ELSE 0
                     END) <> 0
$$;

ALTER TABLE executions ADD COLUMN IF NOT EXISTS unique_key bytea;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS unique_states smallint;

CREATE UNIQUE INDEX IF NOT EXISTS executions_unique ON executions (unique_key)
    WHERE unique_key IS NOT NULL AND cronwheel_unique_holds(unique_states, state);
