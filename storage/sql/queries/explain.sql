-- name: explain_executions
-- The executions of a schedule whose tick lies in [start, end] or is one of `also_at` (the
-- runs that replaced run_once-coalesced ticks of the window).
SELECT id, scheduled_for, run_at, state, state_reason, trigger, attempt, fired_at, fired_epoch
  FROM executions
 WHERE schedule_id = %(schedule_id)s
   AND ((scheduled_for >= %(start)s AND scheduled_for <= %(end)s)
        OR scheduled_for = ANY(%(also_at)s::timestamptz[]));

-- name: explain_events
-- Every recorded change and alert of a schedule (pause, resume, update, misfire, ...).
SELECT id, at, kind, actor, alert, data FROM events WHERE schedule_id = %(schedule_id)s ORDER BY at, id;

-- name: explain_ownership
-- The ownership history of a partition up to the end of a window.
SELECT epoch, owner, kind, at FROM partition_history
 WHERE partition = %(partition)s AND at <= %(end)s + interval '1 hour'
 ORDER BY at, id;

-- name: prune_history
-- Retention: drop events and ownership history older than the retention period, and the daily
-- execution counters of days before yesterday (UTC; the quota reads only the current day's).
WITH e AS (DELETE FROM events WHERE at < %(now)s::timestamptz - make_interval(days => %(days)s) RETURNING 1),
     h AS (DELETE FROM partition_history WHERE at < %(now)s::timestamptz - make_interval(days => %(days)s) RETURNING 1),
     d AS (DELETE FROM daily_executions WHERE day < (%(now)s::timestamptz AT TIME ZONE 'UTC')::date - 1)
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM h);
