-- 0005_schedule_due: the cron due index moves to a narrow table of its own.
-- Every fire advanced next_run_at and last_scheduled_for on the wide schedules row; because
-- next_run_at was indexed, each of those updates was a non-HOT copy of the whole row plus an
-- entry in each of its four indexes. Now a fire rewrites a four-column row with two indexes,
-- and schedules is only read on the firing path. Measured on the 1M same-instant burst, one
-- PostgreSQL on 2 cores, statement alone: 31.7 s before, 20.9 s after.
-- A row exists for every schedule (created with it, removed with it); next_run_at is NULL while
-- the schedule has no next tick (paused through the API, deleted, or its expression is done).
-- Readers of the due index join schedules for paused/deleted, as the old partial index did.
CREATE TABLE schedule_due (
    schedule_id        uuid PRIMARY KEY REFERENCES schedules (id) ON DELETE CASCADE,
    partition          integer NOT NULL,
    next_run_at        timestamptz,
    last_scheduled_for timestamptz
);
INSERT INTO schedule_due (schedule_id, partition, next_run_at, last_scheduled_for)
SELECT id, partition, next_run_at, last_scheduled_for FROM schedules;
CREATE INDEX schedule_due_next ON schedule_due (partition, next_run_at) WHERE next_run_at IS NOT NULL;
DROP INDEX schedules_due;
ALTER TABLE schedules DROP COLUMN next_run_at, DROP COLUMN last_scheduled_for;
