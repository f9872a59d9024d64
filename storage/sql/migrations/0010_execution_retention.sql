-- 0010_execution_retention: finished executions are pruned by the partition owner (issue 17).
-- Per schedule: keep the last N finished runs and/or keep succeeded (skipped, cancelled) and
-- failed (dead) runs for a time; NULL inherits the node's per-job-type or cluster default.
ALTER TABLE schedules
    ADD COLUMN keep_last            integer CHECK (keep_last >= 0),
    ADD COLUMN keep_succeeded_for_s double precision CHECK (keep_succeeded_for_s > 0),
    ADD COLUMN keep_failed_for_s    double precision CHECK (keep_failed_for_s > 0);
-- The schedules with their own retention, per partition (the pruner's keep_last pass and the
-- shortest window in force): most schedules have none and stay out of the index.
CREATE INDEX schedules_retention ON schedules (partition, id)
    WHERE keep_last IS NOT NULL OR keep_succeeded_for_s IS NOT NULL OR keep_failed_for_s IS NOT NULL;
-- Finished executions by the time they finished (a skipped record has no finished_at: when it was recorded),
-- per partition: the pruner walks this from the oldest, a batch at a time, and stops at the
-- shortest window in force, so finding prunable rows never reads live work. IF NOT EXISTS: on a
-- large table an operator builds it first with CREATE INDEX CONCURRENTLY (docs/operating.md).
CREATE INDEX IF NOT EXISTS executions_finished ON executions (partition, (coalesce(finished_at, created_at)), id)
    WHERE state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped');
-- What retention has removed, per schedule: the latest tick pruned, so explain says "pruned by
-- retention" for a tick with no execution at or before it instead of "missed". The due cursor
-- (schedule_due), not these rows or the executions, says what has fired.
CREATE TABLE execution_pruned (
    schedule_id    uuid PRIMARY KEY,
    partition      integer NOT NULL,
    pruned_through timestamptz NOT NULL,
    pruned         bigint NOT NULL DEFAULT 0,
    at             timestamptz NOT NULL
);
