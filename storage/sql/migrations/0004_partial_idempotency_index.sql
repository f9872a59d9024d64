-- 0004_partial_idempotency_index: most executions (every cron tick) have no idempotency key;
-- indexing their NULLs cost every fire an index insert for nothing. A partial unique index
-- dedupes submissions exactly as the constraint did (NULLs never conflicted).
ALTER TABLE executions DROP CONSTRAINT executions_idempotency;
CREATE UNIQUE INDEX executions_idempotency ON executions (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
