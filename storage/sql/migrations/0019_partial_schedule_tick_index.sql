-- 0019_partial_schedule_tick_index: a one-off job has no schedule (schedule_id NULL), so the
-- fire-once key (schedule_id, scheduled_for) can never conflict for it (NULLs never did); but as a
-- table constraint it indexed every one-off row, and every state change of one (its claim, its
-- completion: each a new row version) inserted an index entry for nothing. A partial unique index
-- keeps exactly the rule the constraint enforced, for cron, manual, backfill and catch-up runs,
-- under the same name (so a violation still names executions_schedule_tick). Measured on 20,000
-- one-off rows (PostgreSQL 15 and 18, batches of 250): claim and completion updates 10-20 % less
-- time (docs/perf-log.md, stop 45). The ON CONFLICT clauses that use it name its predicate.
-- On a large table, build executions_schedule_tick_new CONCURRENTLY first (docs/operating.md).
CREATE UNIQUE INDEX IF NOT EXISTS executions_schedule_tick_new ON executions (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
ALTER TABLE executions DROP CONSTRAINT executions_schedule_tick;
ALTER INDEX executions_schedule_tick_new RENAME TO executions_schedule_tick;
