-- Retention of finished executions (cluster/retention). A batch is one short transaction inside
-- `fenced(partition, epoch)`: a pass chooses the rows (`prune_expired` or `prune_keep_last`) and
-- `prune_delete` deletes them, naming the epoch again. A finished state is one of succeeded, failed, dead,
-- cancelled, skipped; the DELETE re-checks it, so a run retried meanwhile is left alone.
-- What has fired is the due cursor's business (schedule_due), never these rows': deleting an
-- execution cannot make its tick due again.

-- name: prune_due_partitions
-- Not fenced, read only: which of `partitions` the pruner has anything to look at as of `now`:
-- a finished execution older than the partition's horizon (the age pass), or a schedule with
-- keep_last (the keep_last pass). One statement (an index probe per partition) instead of two
-- fenced transactions per owned partition every round with nothing to do. The state list is the
-- executions_finished index's predicate (migration 0010), as in the statements below.
SELECT w.partition FROM unnest(%(partitions)s::int[]) AS w(partition)
 WHERE EXISTS (SELECT 1 FROM schedules s
                WHERE s.partition = w.partition AND s.keep_last IS NOT NULL
                  AND (s.keep_last IS NOT NULL OR s.keep_succeeded_for_s IS NOT NULL OR s.keep_failed_for_s IS NOT NULL))
    OR EXISTS (SELECT 1 FROM executions e
                WHERE e.partition = w.partition
                  AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
                  AND coalesce(e.finished_at, e.created_at)
                      < cronwheel_prune_horizon(w.partition, %(now)s, %(shortest_s)s::float8));

-- name: prune_expired
-- Inside the fenced prune transaction (the write is `prune_delete`): one batch of the oldest
-- finished executions of a partition, after a keyset cursor,
-- older than the shortest window in force (the node's, or a schedule's own); of those, delete
-- the ones older than their own window: the schedule's keep_*_for_s, else the job type's, else
-- the cluster default (NULL: kept forever by time): those are `doomed`.
WITH horizon AS (
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
SELECT (SELECT count(*) FROM scanned) AS scanned, ARRAY(SELECT id FROM doomed) AS doomed,
       last.done_at AS last_at, last.id AS last_id
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (SELECT done_at, id FROM scanned ORDER BY done_at DESC, id DESC LIMIT 1) AS last ON true;

-- name: prune_keep_last
-- Inside the fenced prune transaction (the write is `prune_delete`): for a page of the partition's schedules with keep_last (by id, after a cursor), delete
-- their finished executions beyond the newest keep_last (by tick), at most `limit` rows: `doomed`.
WITH keeping AS (
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
SELECT (SELECT count(*) FROM keeping) AS schedules, ARRAY(SELECT id FROM doomed) AS doomed,
       (SELECT id FROM keeping ORDER BY id DESC LIMIT 1) AS last_id;

-- name: prune_delete
-- Fenced: delete the executions one of the two passes above chose (`ids`), if they are still
-- finished and the caller still owns the partition, and record per schedule what went. The one
-- write of retention: both passes end here, in the same transaction as their choice.
WITH gone AS (
    DELETE FROM executions x
     WHERE x.id = ANY(%(ids)s::uuid[]) AND x.partition = %(partition)s
       AND x.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
       AND EXISTS (SELECT 1 FROM partitions WHERE id = %(partition)s AND epoch = %(epoch)s)
    RETURNING x.schedule_id, x.scheduled_for
), marked AS (
    INSERT INTO execution_pruned AS m (schedule_id, partition, pruned_through, pruned, at)
    SELECT schedule_id, %(partition)s, max(scheduled_for), count(*), %(now)s FROM gone
     WHERE schedule_id IS NOT NULL GROUP BY schedule_id
    ON CONFLICT (schedule_id) DO UPDATE
       SET pruned_through = greatest(m.pruned_through, excluded.pruned_through),
           pruned = m.pruned + excluded.pruned, at = excluded.at
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: prune_commit_async
-- Inside a prune transaction: its commit does not wait for the WAL flush. A prune lost to a
-- crash is undone whole (the rows and their marks come back together) and simply done again;
-- fire commits no longer queue behind the prune's flushes.
SET LOCAL synchronous_commit = off;

-- name: pruned_through
-- What retention removed of a schedule: the latest tick pruned and how many runs (explain).
SELECT pruned_through, pruned FROM execution_pruned WHERE schedule_id = %(schedule_id)s;
