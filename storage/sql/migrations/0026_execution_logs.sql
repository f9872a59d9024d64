-- 0026_execution_logs: what a handler logged, per attempt (issue 53), apart from the executions
-- row: the worker SDK appends lines (DispatchService.AppendLogs, fenced by the attempt's token as
-- a heartbeat is) and readers page them by (attempt, seq). No foreign key: a key check would
-- lock the execution's row (FOR KEY SHARE) on every append, a write on the hottest table; the
-- rows go with their execution in retention's one delete (cronwheel_prune_delete below).
-- `seq` is the line's number in its attempt, given by the worker (a retried append repeats it:
-- ON CONFLICT DO NOTHING); numbers the SDK cut past the attempt's bound are missing, and the
-- truncation mark takes the first of them.
CREATE TABLE execution_logs (
    execution_id uuid NOT NULL,
    attempt      integer NOT NULL,
    seq          integer NOT NULL,
    at           timestamptz NOT NULL,
    level        text NOT NULL,
    logger       text NOT NULL DEFAULT '',
    message      text NOT NULL,
    PRIMARY KEY (execution_id, attempt, seq)
);
-- Retention's one write now also deletes the logs of the executions it deletes.
CREATE OR REPLACE FUNCTION cronwheel_prune_delete(p integer, e bigint, now timestamptz, ids uuid[]) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    WITH gone AS (
        DELETE FROM executions x
         WHERE x.id = ANY(ids) AND x.partition = p
           AND x.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
           AND EXISTS (SELECT 1 FROM partitions WHERE id = p AND epoch = e)
           AND NOT (x.has_dependents AND EXISTS (
                   SELECT 1 FROM execution_deps d JOIN executions w ON w.id = d.execution_id
                    WHERE d.upstream_id = x.id AND w.state = 'waiting'))
        RETURNING x.id, x.schedule_id, x.scheduled_for
    ), edges AS (
        DELETE FROM execution_deps d USING gone WHERE d.execution_id = gone.id
        RETURNING 1
    ), logs AS (
        DELETE FROM execution_logs l WHERE l.execution_id IN (SELECT id FROM gone)
        RETURNING 1
    ), marked AS (
        INSERT INTO execution_pruned AS m (schedule_id, partition, pruned_through, pruned, at)
        SELECT schedule_id, p, max(scheduled_for), count(*), now FROM gone
         WHERE schedule_id IS NOT NULL GROUP BY schedule_id
        ON CONFLICT (schedule_id) DO UPDATE
           SET pruned_through = greatest(m.pruned_through, excluded.pruned_through),
               pruned = m.pruned + excluded.pruned, at = excluded.at
        RETURNING 1
    ), ticks AS (
        INSERT INTO execution_pruned_ticks (schedule_id, first_tick, last_tick, ticks, at)
        SELECT schedule_id, min(scheduled_for), max(scheduled_for), array_agg(scheduled_for ORDER BY scheduled_for),
               now
          FROM gone WHERE schedule_id IS NOT NULL GROUP BY schedule_id
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
