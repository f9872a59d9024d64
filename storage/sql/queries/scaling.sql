-- Scaling signals (issue 53, cluster/metrics.py): what a worker autoscaler reads.

-- name: scaling_signals
-- Per queue and priority: runs ready for a worker as of `now` (queued, their run_at come), the
-- run_at of the oldest of them, and runs running. The `keyed` select list is the ONE place that
-- says what a queue is (executions.queue, 0025). Each state is read through its partial index.
WITH keyed AS (
    SELECT queue, priority, state, run_at
      FROM executions
     WHERE state = 'running' OR (state = 'queued' AND run_at <= %(now)s)
)
SELECT queue, priority,
       count(*) FILTER (WHERE state = 'queued') AS ready,
       min(run_at) FILTER (WHERE state = 'queued') AS oldest_ready_at,
       count(*) FILTER (WHERE state = 'running') AS running
  FROM keyed
 GROUP BY queue, priority;
