-- name: insert_schedule
-- Create a schedule and its due-index row (not fenced: the API writes on behalf of a user, not
-- of a partition).
WITH s AS (
    INSERT INTO schedules (id, tenant, name, cron, timezone, dst_gap, dst_repeated, job_type, payload,
                           priority, retry_initial_s, retry_multiplier, retry_max_s, max_attempts,
                           timeout_s, misfire_policy, max_catch_up, overlap_policy, jitter_s, paused,
                           partition, alert_if_no_success_within_s, keep_last, keep_succeeded_for_s,
                           keep_failed_for_s, target, queue, required_capabilities, created_at, updated_at)
    VALUES (%(id)s, %(tenant)s, %(name)s, %(cron)s, %(timezone)s, %(dst_gap)s, %(dst_repeated)s,
            %(job_type)s, %(payload)s, %(priority)s, %(retry_initial_s)s, %(retry_multiplier)s,
            %(retry_max_s)s, %(max_attempts)s, %(timeout_s)s, %(misfire_policy)s, %(max_catch_up)s,
            %(overlap_policy)s, %(jitter_s)s, %(paused)s, %(partition)s,
            %(alert_if_no_success_within_s)s, %(keep_last)s, %(keep_succeeded_for_s)s,
            %(keep_failed_for_s)s, %(target)s, %(queue)s, %(required_capabilities)s, %(now)s, %(now)s)
    RETURNING *
), d AS (
    INSERT INTO schedule_due (schedule_id, partition, next_run_at)
    SELECT id, partition, %(next_run_at)s FROM s
    RETURNING *
)
SELECT s.*, d.next_run_at, d.last_scheduled_for FROM s JOIN d ON d.schedule_id = s.id;

-- name: due_schedules
-- The cron half of the due index for one partition: next ticks in (after, horizon].
SELECT s.id, s.cron, s.timezone, s.dst_gap, s.dst_repeated, d.next_run_at, d.last_scheduled_for,
       s.misfire_policy, s.max_catch_up, s.overlap_policy, s.jitter_s, s.version
  FROM schedule_due d JOIN schedules s ON s.id = d.schedule_id
 WHERE d.partition = %(partition)s AND d.next_run_at IS NOT NULL
   AND cronwheel_in_window(d.next_run_at, %(after)s::timestamptz, %(horizon)s::timestamptz)
   AND NOT s.paused AND s.deleted_at IS NULL
 ORDER BY d.next_run_at;

-- name: schedule_for_fire
-- One schedule as the firing path sees it (after a change notification); NULL if gone. Same
-- columns as due_schedules (both decode into storage.firing.DueSchedule).
SELECT s.id, s.cron, s.timezone, s.dst_gap, s.dst_repeated, d.next_run_at, d.last_scheduled_for,
       s.misfire_policy, s.max_catch_up, s.overlap_policy, s.jitter_s, s.version
  FROM schedules s JOIN schedule_due d ON d.schedule_id = s.id
 WHERE s.id = %(id)s AND NOT s.paused AND s.deleted_at IS NULL;

-- name: advance_schedules
-- Fenced: move fired cron schedules to their next tick, in the fire transaction, each only while
-- it passes the fire guard (cronwheel_fire_guard, as `fire_executions`): a schedule updated, paused or
-- deleted since it was loaded is left to its new definition, and the cursor is a compare-and-set
-- (`next_run_at` must still be the tick the decision was made from), so no advance skips a tick
-- it did not record.
UPDATE schedule_due AS d
   SET next_run_at = v.next_run_at, last_scheduled_for = v.last_scheduled_for
  FROM unnest(%(ids)s::uuid[], %(next_run_ats)s::timestamptz[], %(last_scheduled_fors)s::timestamptz[],
              %(versions)s::bigint[], %(cursors)s::timestamptz[])
       AS v(id, next_run_at, last_scheduled_for, version, cursor)
  JOIN schedules AS s ON s.id = v.id
 WHERE d.schedule_id = v.id AND d.partition = %(partition)s
   AND cronwheel_fire_guard(s.version, v.version, s.paused, s.deleted_at, d.next_run_at, v.cursor)
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
RETURNING d.schedule_id;

-- name: notify_due
-- Tell the partition's owner that a due-index entry changed (delivered at commit).
SELECT pg_notify('cronwheel_due', %(payload)s);

-- name: get_schedule_any
-- A schedule by id, live or deleted, optionally of one tenant.
SELECT s.*, d.next_run_at, d.last_scheduled_for
  FROM schedules s JOIN schedule_due d ON d.schedule_id = s.id
 WHERE s.id = %(id)s AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s);

-- name: count_live_schedules
-- A tenant's live schedules (quota).
SELECT count(*) FROM schedules WHERE tenant = %(tenant)s AND deleted_at IS NULL;

-- name: set_schedule_parent
-- A child schedule's parent, set in the transaction that creates it (never changed after).
UPDATE schedules SET parent_schedule_id = %(parent)s WHERE id = %(id)s
RETURNING parent_schedule_id;
