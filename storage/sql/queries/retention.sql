-- Retention of finished executions (cluster/retention). A batch is ONE statement, its own
-- transaction: it share-locks the partition row at the caller's epoch (`fence`; none: stale, nothing
-- is deleted), a pass chooses the rows (`prune_expired` or `prune_keep_last`) and
-- cronwheel_prune_delete (schema.sql), the one write of retention, deletes them, naming the epoch
-- again. A finished state is one of succeeded, failed, dead, cancelled, skipped; the delete re-checks
-- it, so a run retried meanwhile is left alone. What has fired is the due cursor's business
-- (schedule_due), never these rows': deleting an execution cannot make its tick due again.

-- name: prune_due_partitions
-- Not fenced, read only: which of `partitions` the pruner has anything to look at as of `now`, and
-- for which pass: `age`, a finished execution older than the partition's horizon (the age pass);
-- `keep_last`, a schedule with keep_last (the keep_last pass). One statement (an index probe per
-- partition and pass) instead of two fenced transactions per owned partition every round, most
-- with nothing to do. The state list is the executions_finished index's predicate (migration
-- 0010), as in the statements below.
SELECT w.partition, k.keep_last, a.age
  FROM unnest(%(partitions)s::int[]) AS w(partition)
 CROSS JOIN LATERAL (SELECT EXISTS (
           SELECT 1 FROM schedules s
            WHERE s.partition = w.partition AND s.keep_last IS NOT NULL
              AND (s.keep_last IS NOT NULL OR s.keep_succeeded_for_s IS NOT NULL OR s.keep_failed_for_s IS NOT NULL))
       AS keep_last) AS k
 CROSS JOIN LATERAL (SELECT EXISTS (
           SELECT 1 FROM executions e
            WHERE e.partition = w.partition
              AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
              AND coalesce(e.finished_at, e.created_at)
                  < cronwheel_prune_horizon(w.partition, %(now)s, %(shortest_s)s::float8))
       AS age) AS a
 WHERE k.keep_last OR a.age;

-- name: prune_expired
-- One fenced batch of the age pass: the oldest finished executions of a partition, after a keyset
-- cursor, older than the shortest window in force (the node's, or a schedule's own); of those,
-- delete the ones older than their own window: the schedule's keep_*_for_s, else the job type's,
-- else the cluster default (NULL: kept forever by time): those are `doomed`.
WITH fence AS MATERIALIZED (
    SELECT id FROM cronwheel_fence(%(partition)s, %(epoch)s)
), horizon AS (
    SELECT cronwheel_prune_horizon(%(partition)s, %(now)s, %(shortest_s)s::float8) AS before
), scanned AS (
    SELECT e.id, e.schedule_id, e.scheduled_for, e.state, e.type,
           coalesce(e.finished_at, e.created_at) AS done_at
      FROM executions e, horizon h
     WHERE e.partition = %(partition)s
       AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
       AND coalesce(e.finished_at, e.created_at) < h.before
       AND (coalesce(e.finished_at, e.created_at), e.id)
           > (coalesce(%(after_at)s::timestamptz, '-infinity'),
              coalesce(%(after_id)s::uuid, '00000000-0000-0000-0000-000000000000'))
     ORDER BY coalesce(e.finished_at, e.created_at), e.id
     LIMIT %(limit)s
), windowed AS (
    -- The schedule's own windows by one primary-key probe per row (a join may hash the whole
    -- schedules table per batch: a million schedules for a thousand rows).
    SELECT c.*, (SELECT ARRAY[s.keep_succeeded_for_s, s.keep_failed_for_s] FROM schedules s
                  WHERE s.id = c.schedule_id) AS own
      FROM scanned c
), doomed AS (
    SELECT c.id FROM windowed c
      LEFT JOIN unnest(%(types)s::text[], %(types_succeeded_s)s::float8[], %(types_failed_s)s::float8[])
                AS t(type, succeeded_s, failed_s) ON t.type = c.type
     WHERE c.done_at < %(now)s::timestamptz - make_interval(secs => CASE
               WHEN c.state IN ('failed', 'dead') THEN
                    CASE WHEN c.own[2] IS NOT NULL THEN c.own[2]
                         WHEN t.type IS NOT NULL THEN t.failed_s ELSE %(failed_s)s::float8 END
               ELSE CASE WHEN c.own[1] IS NOT NULL THEN c.own[1]
                         WHEN t.type IS NOT NULL THEN t.succeeded_s ELSE %(succeeded_s)s::float8 END
           END)
)
SELECT f.fenced, (SELECT count(*) FROM scanned) AS scanned,
       CASE WHEN f.fenced THEN cronwheel_prune_delete(%(partition)s, %(epoch)s, %(now)s, ARRAY(SELECT id FROM doomed))
            ELSE 0 END AS deleted,
       last.done_at AS last_at, last.id AS last_id
  FROM (SELECT EXISTS (SELECT 1 FROM fence) AS fenced) AS f  -- the lock first, then the choice
  LEFT JOIN LATERAL (SELECT done_at, id FROM scanned ORDER BY done_at DESC, id DESC LIMIT 1) AS last ON true;

-- name: prune_keep_last
-- One fenced batch of the keep_last pass: for a page of the partition's schedules with keep_last
-- (by id, after a cursor), delete their finished executions beyond the newest keep_last (by
-- tick), at most `limit` rows: `doomed`.
WITH fence AS MATERIALIZED (
    SELECT id FROM cronwheel_fence(%(partition)s, %(epoch)s)
), keeping AS (
    SELECT id, keep_last FROM schedules
     WHERE partition = %(partition)s AND keep_last IS NOT NULL
       AND (keep_last IS NOT NULL OR keep_succeeded_for_s IS NOT NULL OR keep_failed_for_s IS NOT NULL)
       AND id > coalesce(%(after_id)s::uuid, '00000000-0000-0000-0000-000000000000')
     ORDER BY id
     LIMIT %(schedules)s
), doomed AS (
    SELECT x.id FROM keeping k
     CROSS JOIN LATERAL (
         SELECT e.id FROM executions e
          WHERE e.schedule_id = k.id AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
          ORDER BY e.scheduled_for DESC
         OFFSET k.keep_last LIMIT %(limit)s
     ) AS x
     LIMIT %(limit)s
)
SELECT f.fenced, (SELECT count(*) FROM keeping) AS schedules,
       CASE WHEN f.fenced THEN cronwheel_prune_delete(%(partition)s, %(epoch)s, %(now)s, ARRAY(SELECT id FROM doomed))
            ELSE 0 END AS deleted,
       (SELECT count(*) FROM doomed) AS doomed,
       (SELECT id FROM keeping ORDER BY id DESC LIMIT 1) AS last_id
  FROM (SELECT EXISTS (SELECT 1 FROM fence) AS fenced) AS f;

-- name: pruned_through
-- What retention removed of a schedule: the latest tick pruned and how many runs, and up to where
-- ticks were pruned before the ticks themselves were recorded (explain).
SELECT pruned_through, pruned, untracked_through FROM execution_pruned WHERE schedule_id = %(schedule_id)s;

-- name: pruned_ticks
-- The ticks in [start, end] of a schedule whose executions retention removed (explain): the
-- batches' records whose span meets the window (execution_pruned_ticks_by_schedule from `start`).
SELECT t.tick FROM execution_pruned_ticks p CROSS JOIN LATERAL unnest(p.ticks) AS t(tick)
 WHERE p.schedule_id = %(schedule_id)s AND p.last_tick >= %(start)s AND p.first_tick <= %(end)s
   AND t.tick >= %(start)s AND t.tick <= %(end)s;
