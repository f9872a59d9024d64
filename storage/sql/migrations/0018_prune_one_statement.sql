-- 0018_prune_one_statement: a prune batch is one statement (one round trip, its own transaction)
-- instead of a fenced transaction of five (BEGIN, the fence check, the choice, the delete, COMMIT),
-- so that it fits between two fires of the node's fire loop (cluster/retention/pruner.py). The
-- delete both passes end in is defined once, here: the age pass (`prune_expired`) and the
-- keep_last pass (`prune_keep_last`) each choose their rows and call it, after their statement
-- share-locked the partition row at the caller's epoch.

-- Delete the finished executions `ids` of partition p, if still finished and p is still at epoch
-- e, and record per schedule what went (explain's "pruned by retention"): the one write of
-- retention. Answers how many rows went.
CREATE FUNCTION cronwheel_prune_delete(p integer, e bigint, now timestamptz, ids uuid[]) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    WITH gone AS (
        DELETE FROM executions x
         WHERE x.id = ANY(ids) AND x.partition = p
           AND x.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
           AND EXISTS (SELECT 1 FROM partitions WHERE id = p AND epoch = e)
        RETURNING x.schedule_id, x.scheduled_for
    ), marked AS (
        INSERT INTO execution_pruned AS m (schedule_id, partition, pruned_through, pruned, at)
        SELECT schedule_id, p, max(scheduled_for), count(*), now FROM gone
         WHERE schedule_id IS NOT NULL GROUP BY schedule_id
        ON CONFLICT (schedule_id) DO UPDATE
           SET pruned_through = greatest(m.pruned_through, excluded.pruned_through),
               pruned = m.pruned + excluded.pruned, at = excluded.at
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
