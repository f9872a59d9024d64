-- 0027_one_rule_one_function (issue 49): rules that several statements apply, each written once, as
-- migration 0014 did for the reaper's predicates. Before, the statements spelled them out and a
-- test compared their text; a rule that drifted in one copy was a silent bug.

-- 1. The partition fence. It was spelled four ways: `EXISTS (SELECT 1 FROM partitions WHERE id = p
-- AND epoch = e)` in eleven statements and cronwheel_prune_delete, a `fence ... FOR SHARE OF p` CTE
-- (fire_ticks_fenced), `SELECT id ... FOR SHARE` (the pruner's statements) and check_fence.
--
-- The partition's row while it still carries epoch `e`, share-locked until the transaction ends:
-- an acquisition (record_epoch's UPDATE) waits for the fenced write to commit, and a write whose
-- partition has moved on finds no row and writes nothing. Callers: `EXISTS (SELECT 1 FROM
-- cronwheel_fence(p, e))` (uncorrelated, so run once per statement as an InitPlan), a CTE over it
-- (check_fence, the pruner), or one call per partition (fire_ticks_fenced). VOLATILE because it
-- locks (PostgreSQL refuses FOR SHARE in a STABLE function), hence never inlined; PL/pgSQL, not
-- SQL, because PL/pgSQL keeps its statement's plan for the session where an SQL function is planned
-- again in every statement that calls it (measured: +1.5 ms on active_counts under load, PL/pgSQL
-- within noise of the spelled-out EXISTS). The statements
-- that used the unlocked EXISTS all run in a transaction that already holds this share lock
-- (`fenced()`, `at_current_epoch`): PostgreSQL finds the lock held and takes nothing more, so their
-- lock semantics are unchanged. The only read of a partition's epoch that is not this function:
-- record_epoch (which moves the epoch) and the diagnostics that report it.
CREATE FUNCTION cronwheel_fence(p integer, e bigint) RETURNS TABLE (id integer, epoch bigint)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
BEGIN
    RETURN QUERY SELECT f.id, f.epoch FROM partitions AS f WHERE f.id = p AND f.epoch = e FOR SHARE OF f;
END
$$;

-- The one write of retention (as 0026 left it: 0020's, with 0024's dependencies and 0026's logs),
-- fenced through the function above; otherwise unchanged.
CREATE OR REPLACE FUNCTION cronwheel_prune_delete(p integer, e bigint, now timestamptz, ids uuid[]) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    WITH gone AS (
        DELETE FROM executions x
         WHERE x.id = ANY(ids) AND x.partition = p
           AND x.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
           AND EXISTS (SELECT 1 FROM cronwheel_fence(p, e))
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

-- 2. The fire guard, written three times before (a test compared the three texts).
-- The fire guard (storage/firing.py), applied by every statement that records a cron tick or moves a
-- schedule's cursor (fire_ticks_fenced, fire_executions, advance_schedules): the schedule is still
-- at the version the decision was loaded with, not paused or deleted, and its cursor
-- (schedule_due.next_run_at) is still the tick the decision started from. One expression, IMMUTABLE:
-- the planner inlines it, so the statements' plans are those of the spelled-out predicate.
CREATE FUNCTION cronwheel_fire_guard(version bigint, loaded_version bigint, paused boolean, deleted_at timestamptz,
                                     next_run_at timestamptz, from_tick timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT version = loaded_version AND NOT paused AND deleted_at IS NULL AND next_run_at = from_tick
$$;
