-- name: explain_executions
-- The executions of a schedule whose tick lies in [start, end] or is one of `also_at` (the
-- runs that replaced run_once-coalesced ticks of the window).
SELECT id, scheduled_for, run_at, state, state_reason, trigger, attempt, fired_at, fired_epoch,
       started_at, concurrency_key, concurrency_limit, key_rate_per_s, key_burst
  FROM executions
 WHERE schedule_id = %(schedule_id)s
   AND ((scheduled_for >= %(start)s AND scheduled_for <= %(end)s)
        OR scheduled_for = ANY(%(also_at)s::timestamptz[]));

-- name: explain_events
-- The events of a schedule that explain [start, end] needs, not every one it ever had (the console
-- asks every 3 s): those recorded in the window; after it, its definition changes (explain walks
-- back from the current definition) and the misfire records of ticks in it (recorded when the miss
-- was found, after the ticks); before it, only the latest pause or resume (paused at `start`?).
-- events_by_schedule (schedule_id, at) from `start`.
(SELECT id, at, kind, actor, alert, data FROM events
  WHERE schedule_id = %(schedule_id)s AND at >= %(start)s
    AND (at <= %(end)s OR kind = 'schedule_updated'
         OR (kind IN ('misfire_refused', 'misfire_skipped')
             AND (data->>'first_missed')::timestamptz <= %(end)s)))
UNION ALL
(SELECT id, at, kind, actor, alert, data FROM events
  WHERE schedule_id = %(schedule_id)s AND at < %(start)s AND kind IN ('schedule_paused', 'schedule_resumed')
  ORDER BY at DESC, id DESC LIMIT 1)
ORDER BY at, id;

-- name: explain_ownership
-- The ownership history of a partition up to the end of a window.
SELECT epoch, owner, kind, at FROM partition_history
 WHERE partition = %(partition)s AND at <= %(end)s + interval '1 hour'
 ORDER BY at, id;

-- name: prune_history
-- Retention: drop events, ownership history and the records of pruned ticks older than the
-- retention period (explain refuses windows older than it: a record pruned at `at` holds ticks
-- before `at`), and the daily execution counters of days before yesterday (UTC; the quota reads
-- only the current day's).
WITH e AS (DELETE FROM events WHERE at < %(now)s::timestamptz - make_interval(days => %(days)s) RETURNING 1),
     h AS (DELETE FROM partition_history WHERE at < %(now)s::timestamptz - make_interval(days => %(days)s) RETURNING 1),
     d AS (DELETE FROM daily_executions WHERE day < (%(now)s::timestamptz AT TIME ZONE 'UTC')::date - 1),
     t AS (DELETE FROM execution_pruned_ticks WHERE at < %(now)s::timestamptz - make_interval(days => %(days)s))
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM h);
