-- name: insert_schedule
-- Create a schedule (not fenced: the API writes on behalf of a user, not of a partition).
INSERT INTO schedules (id, tenant, name, cron, timezone, dst_gap, dst_repeated, job_type, payload,
                       priority, retry_initial_s, retry_multiplier, retry_max_s, max_attempts,
                       timeout_s, misfire_policy, max_catch_up, overlap_policy, jitter_s, paused,
                       partition, next_run_at, alert_if_no_success_within_s)
VALUES (%(id)s, %(tenant)s, %(name)s, %(cron)s, %(timezone)s, %(dst_gap)s, %(dst_repeated)s,
        %(job_type)s, %(payload)s, %(priority)s, %(retry_initial_s)s, %(retry_multiplier)s,
        %(retry_max_s)s, %(max_attempts)s, %(timeout_s)s, %(misfire_policy)s, %(max_catch_up)s,
        %(overlap_policy)s, %(jitter_s)s, %(paused)s, %(partition)s, %(next_run_at)s,
        %(alert_if_no_success_within_s)s)
RETURNING *;

-- name: get_schedule
-- One live schedule by id.
SELECT * FROM schedules WHERE id = %(id)s AND deleted_at IS NULL;

-- name: due_schedules
-- The cron half of the due index for one partition, up to a horizon.
SELECT id, cron, timezone, dst_gap, dst_repeated, next_run_at, last_scheduled_for,
       misfire_policy, max_catch_up, overlap_policy, jitter_s, version
  FROM schedules
 WHERE partition = %(partition)s AND NOT paused AND deleted_at IS NULL
   AND next_run_at <= %(horizon)s
 ORDER BY next_run_at;

-- name: advance_schedules
-- Fenced: move fired cron schedules to their next tick, in the fire transaction.
UPDATE schedules AS s
   SET next_run_at = v.next_run_at, last_scheduled_for = v.last_scheduled_for
  FROM unnest(%(ids)s::uuid[], %(next_run_ats)s::timestamptz[], %(last_scheduled_fors)s::timestamptz[])
       AS v(id, next_run_at, last_scheduled_for)
 WHERE s.id = v.id AND s.partition = %(partition)s
   AND EXISTS (SELECT 1 FROM partitions WHERE id = %(partition)s AND epoch = %(epoch)s)
RETURNING s.id;
