-- Queries of the user-facing API (SchedulerService, AdminService.ListEvents). None is fenced:
-- the API writes on behalf of a user, not of a partition owner; the owner learns of each
-- change by NOTIFY (notify_due / notify_queued) sent in the same transaction.
-- Tenancy is checked by the caller on the row read under lock, never by trusting the request.

-- name: api_get_schedule
-- One live schedule by id (any tenant; the caller checks the tenant).
SELECT s.*, d.next_run_at, d.last_scheduled_for
  FROM schedules s JOIN schedule_due d ON d.schedule_id = s.id
 WHERE s.id = %(id)s AND s.deleted_at IS NULL;

-- name: api_lock_schedule
-- One live schedule by id, row-locked until the end of the transaction.
SELECT s.*, d.next_run_at, d.last_scheduled_for
  FROM schedules s JOIN schedule_due d ON d.schedule_id = s.id
 WHERE s.id = %(id)s AND s.deleted_at IS NULL
   FOR UPDATE OF s;

-- name: api_tenant_quotas
-- A tenant's quotas (no lock: a tenant without a schedule quota creates schedules in parallel).
SELECT max_schedules, max_executions_per_day, egress_rules FROM tenants WHERE id = %(tenant)s;

-- name: api_lock_schedule_quota
-- Transaction-scoped advisory lock of one tenant's schedule quota: creations of a tenant WITH a
-- max_schedules count one after another (the count that follows, in its own statement, takes its
-- snapshot after the lock: READ COMMITTED), without locking the tenants row.
SELECT pg_advisory_xact_lock(hashtext('cronwheel.schedules'), hashtext(%(tenant)s));

-- name: api_write_schedule
-- Write every settable field of a live schedule, its paused flag, and soft-delete it when
-- `deleted` (kept for explain and history, its name free again); bump its version and set its
-- next tick (`next_run_at`: NULL when paused or deleted). Update, pause, resume and delete.
WITH s AS (
    UPDATE schedules
       SET name = %(name)s, cron = %(cron)s, timezone = %(timezone)s, dst_gap = %(dst_gap)s,
           dst_repeated = %(dst_repeated)s, job_type = %(job_type)s, payload = %(payload)s,
           priority = %(priority)s, retry_initial_s = %(retry_initial_s)s,
           retry_multiplier = %(retry_multiplier)s, retry_max_s = %(retry_max_s)s,
           max_attempts = %(max_attempts)s, timeout_s = %(timeout_s)s,
           misfire_policy = %(misfire_policy)s, max_catch_up = %(max_catch_up)s,
           overlap_policy = %(overlap_policy)s, jitter_s = %(jitter_s)s,
           alert_if_no_success_within_s = %(alert_if_no_success_within_s)s, paused = %(paused)s,
           keep_last = %(keep_last)s, keep_succeeded_for_s = %(keep_succeeded_for_s)s,
           keep_failed_for_s = %(keep_failed_for_s)s, target = %(target)s, queue = %(queue)s,
           required_capabilities = %(required_capabilities)s,
           deleted_at = CASE WHEN %(deleted)s::boolean THEN %(now)s::timestamptz ELSE deleted_at END,
           version = version + 1, updated_at = %(now)s
     WHERE id = %(id)s AND deleted_at IS NULL
    RETURNING *
), d AS (
    UPDATE schedule_due SET next_run_at = %(next_run_at)s WHERE schedule_id IN (SELECT id FROM s)
    RETURNING *
)
SELECT s.*, d.next_run_at, d.last_scheduled_for FROM s JOIN d ON d.schedule_id = s.id;

-- name: api_unfire_ahead
-- Take back a schedule's cron ticks queued ahead of their run_at (FiringConfig.queue_ahead_s) and
-- not due at `now`: an edit, pause or delete made before a tick is due applies to it, as it did
-- when ticks were queued at their time. The rows go (never claimed: a claim takes a run only from
-- its run_at), so the tick can be fired again; the answer is the earliest tick taken back (NULL:
-- none). Reads executions_schedule_tick (schedule_id, scheduled_for). Only a row never leased
-- (`fencing_token = 0`) is a tick queued ahead: a retry requeued by its owner at its run_at reads
-- `queued` with run_at ahead of an API node whose clock runs behind, and stays. Runs under the
-- schedule's row lock (api_lock_schedule), taken after any fire of the schedule in flight
-- committed (the fire locks the row FOR KEY SHARE): this statement's snapshot holds its rows.
WITH gone AS (
    DELETE FROM executions
     WHERE schedule_id = %(id)s AND state = 'queued' AND trigger = 'cron' AND run_at > %(now)s
       AND fencing_token = 0
    RETURNING scheduled_for
)
SELECT min(scheduled_for) AS tick FROM gone;

-- name: api_list_schedules
-- A page of live schedules by (created_at, id), after the cursor, with optional filters
-- (name_like: an ILIKE pattern whose wildcards in the typed text the caller escaped). The page
-- is cut before the join, so only its rows are joined with schedule_due.
SELECT s.*, d.next_run_at, d.last_scheduled_for
  FROM (SELECT * FROM schedules s
         WHERE s.deleted_at IS NULL
           AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
           AND (%(job_type)s::text IS NULL OR s.job_type = %(job_type)s)
           AND (%(paused)s::boolean IS NULL OR s.paused = %(paused)s)
           AND (%(name_like)s::text IS NULL OR s.name ILIKE %(name_like)s)
           AND (%(after_created_at)s::timestamptz IS NULL
                OR (s.created_at, s.id) > (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
         ORDER BY s.created_at, s.id
         LIMIT %(limit)s) s
  JOIN schedule_due d ON d.schedule_id = s.id
 ORDER BY s.created_at, s.id;

-- name: api_list_schedules_by_name
-- The same page ordered by (name, id), after the (name, id) cursor.
SELECT s.*, d.next_run_at, d.last_scheduled_for
  FROM (SELECT * FROM schedules s
         WHERE s.deleted_at IS NULL
           AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
           AND (%(job_type)s::text IS NULL OR s.job_type = %(job_type)s)
           AND (%(paused)s::boolean IS NULL OR s.paused = %(paused)s)
           AND (%(name_like)s::text IS NULL OR s.name ILIKE %(name_like)s)
           AND (%(after_name)s::text IS NULL OR (s.name, s.id) > (%(after_name)s::text, %(after_id)s::uuid))
         ORDER BY s.name, s.id
         LIMIT %(limit)s) s
  JOIN schedule_due d ON d.schedule_id = s.id
 ORDER BY s.name, s.id;

-- name: api_insert_run
-- One execution of a schedule made by the API (manual trigger); nothing if the tick or the
-- idempotency key is taken.
INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at,
                        priority, state, state_reason, trigger, max_attempts, retry_initial_s,
                        retry_multiplier, retry_max_s, timeout_s, idempotency_key, fired_at,
                        queued_at, finished_at, created_at, queue, required_capabilities)
SELECT %(id)s, s.id, s.tenant, s.job_type, coalesce(%(payload)s::jsonb, s.payload), s.partition,
       %(scheduled_for)s, %(scheduled_for)s, s.priority, %(state)s, %(state_reason)s, %(trigger)s,
       s.max_attempts, s.retry_initial_s, s.retry_multiplier, s.retry_max_s, s.timeout_s,
       %(idempotency_key)s, %(scheduled_for)s,
       CASE WHEN %(state)s = 'queued' THEN %(scheduled_for)s END,
       CASE WHEN %(state)s = 'skipped' THEN %(scheduled_for)s END, %(now)s, s.queue, s.required_capabilities
  FROM schedules AS s
 WHERE s.id = %(schedule_id)s
ON CONFLICT DO NOTHING
RETURNING *;

-- name: api_backfill_executions
-- Queue one execution per given tick of a schedule, in tick order; ticks that already have an
-- execution are left alone.
INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at,
                        priority, state, trigger, max_attempts, retry_initial_s, retry_multiplier,
                        retry_max_s, timeout_s, fired_at, queued_at, created_at, queue, required_capabilities)
SELECT v.id, s.id, s.tenant, s.job_type, s.payload, s.partition, v.scheduled_for, v.run_at,
       s.priority, 'queued', 'backfill', s.max_attempts, s.retry_initial_s, s.retry_multiplier,
       s.retry_max_s, s.timeout_s, %(now)s, %(now)s, %(now)s, s.queue, s.required_capabilities
  FROM unnest(%(ids)s::uuid[], %(scheduled_fors)s::timestamptz[], %(run_ats)s::timestamptz[])
       AS v(id, scheduled_for, run_at)
  JOIN schedules AS s ON s.id = %(schedule_id)s
 ORDER BY v.scheduled_for
ON CONFLICT (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL DO NOTHING
RETURNING id, scheduled_for;

-- name: api_get_execution
-- One execution by id (any tenant; the caller checks the tenant).
SELECT * FROM executions WHERE id = %(id)s;

-- name: api_lock_execution
-- One execution by id, row-locked until the end of the transaction.
SELECT * FROM executions WHERE id = %(id)s FOR UPDATE;

-- name: api_by_idempotency_key
-- The execution a tenant's idempotency key names, if any.
SELECT * FROM executions WHERE tenant = %(tenant)s AND idempotency_key = %(idempotency_key)s;

-- name: api_cancel_executions
-- Cancel unstarted executions now and ask running ones to stop: the execution `id`, or every
-- unfinished execution of `schedule_id` (the other one NULL). Finished ones are left alone.
UPDATE executions
   SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
       cancel_requested = CASE WHEN state = 'running' THEN true ELSE cancel_requested END,
       finished_at = CASE WHEN state = 'running' THEN finished_at ELSE %(now)s END,
       state_reason = %(reason)s
 WHERE (id = %(id)s OR schedule_id = %(schedule_id)s)
   AND (state IN ('scheduled', 'queued', 'retry_scheduled', 'failed', 'waiting')
        OR (state = 'running' AND NOT cancel_requested))
RETURNING *;

-- name: api_retry_execution
-- Bring a finished execution back: queued (or retry_scheduled) at run_at with more attempts.
UPDATE executions
   SET state = %(state)s, run_at = %(run_at)s, max_attempts = greatest(max_attempts, attempt + %(additional)s),
       cancel_requested = false, finished_at = NULL, state_reason = %(reason)s,
       queued_at = CASE WHEN %(state)s = 'queued' THEN %(now)s ELSE queued_at END
 WHERE id = %(id)s
RETURNING *;

-- name: api_list_executions
-- The keys of a page of executions by (scheduled_for, id) descending, before the cursor, with
-- filters, and each one's bytes (payload, checkpoint, result and error as text). Read through a
-- server-side cursor a few rows at a time (storage/executions.py `list`): the sizes are computed
-- per row fetched (the inner query passes the columns on without reading them), so a page cut
-- by bytes reads a few 1 MiB checkpoints, not `limit` of them.
SELECT p.id, p.scheduled_for,
       octet_length(p.payload::text) + coalesce(octet_length(p.checkpoint::text), 0)
         + coalesce(octet_length(p.result::text), 0) + coalesce(octet_length(p.error), 0) AS row_bytes
  FROM (SELECT id, scheduled_for, payload, checkpoint, result, error FROM executions
         WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
           AND (%(schedule_id)s::uuid IS NULL OR schedule_id = %(schedule_id)s)
           AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
           AND (%(type)s::text IS NULL OR type = %(type)s)
           AND (%(from)s::timestamptz IS NULL OR scheduled_for >= %(from)s)
           AND (%(until)s::timestamptz IS NULL OR scheduled_for < %(until)s)
           AND (%(before_scheduled_for)s::timestamptz IS NULL
                OR (scheduled_for, id) < (%(before_scheduled_for)s::timestamptz, %(before_id)s::uuid))
         ORDER BY scheduled_for DESC, id DESC
         LIMIT %(limit)s) p
 ORDER BY p.scheduled_for DESC, p.id DESC;

-- name: api_executions_by_ids
-- The executions of a page (api_list_executions' keys), in the page's order.
SELECT * FROM executions WHERE id = ANY(%(ids)s::uuid[]) ORDER BY scheduled_for DESC, id DESC;

-- name: api_list_events
-- A page of the audit and alert log by ascending id, with filters.
SELECT id, at, tenant, kind, schedule_id, execution_id, partition, actor, alert, data
  FROM events
 WHERE id > %(after_id)s
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
   AND (%(schedule_id)s::uuid IS NULL OR schedule_id = %(schedule_id)s)
   AND (%(execution_id)s::uuid IS NULL OR execution_id = %(execution_id)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
   AND (NOT %(alerts_only)s OR alert)
 ORDER BY id
 LIMIT %(limit)s;

-- name: api_partition_epoch
-- Inside a transaction: the partition's current epoch, share-locked until commit exactly as
-- check_fence locks it (an acquisition waits; fenced queries can then run under this epoch).
SELECT epoch FROM partitions WHERE id = %(partition)s FOR SHARE;
