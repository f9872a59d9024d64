-- 0024_job_dependencies: job B after job A (issue 52, item 1). A submitted job may name the
-- executions it waits for (its upstreams); it is stored `waiting`, with `waiting_for` the number
-- of upstreams not yet finished, one execution_deps row per upstream. When an upstream reaches a
-- finished state, the trigger executions_release_dependents resolves its edges in the same
-- transaction (cronwheel_resolve_dependents): the dependent is queued when its last upstream
-- finished, or cancelled naming the upstream that did not succeed (dependency_policy
-- 'on_success', the default; 'always' runs it anyway). A finish that does not commit resolves
-- nothing; an edge is resolved once (outcome IS NULL), so a retried finish cannot resolve it
-- twice. See docs/semantics.md "Dependencies" for how every write stays fenced.
ALTER TABLE executions DROP CONSTRAINT executions_state_check;
ALTER TABLE executions ADD CONSTRAINT executions_state_check
    CHECK (state IN ('scheduled', 'queued', 'running', 'succeeded', 'failed', 'retry_scheduled', 'dead',
                     'cancelled', 'skipped', 'waiting'));
ALTER TABLE executions ADD COLUMN waiting_for integer CHECK (waiting_for >= 0);
ALTER TABLE executions ADD COLUMN dependency_policy text CHECK (dependency_policy IN ('on_success', 'always'));
ALTER TABLE executions ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;

CREATE TABLE execution_deps (
    execution_id uuid NOT NULL,
    upstream_id  uuid NOT NULL,
    outcome      text,
    resolved_at  timestamptz,
    PRIMARY KEY (execution_id, upstream_id)
);
CREATE INDEX execution_deps_by_upstream ON execution_deps (upstream_id, execution_id);

CREATE FUNCTION cronwheel_resolve_dependents(up uuid, up_state text, at timestamptz) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    WITH edges AS (
        UPDATE execution_deps SET outcome = up_state, resolved_at = at
         WHERE upstream_id = up AND outcome IS NULL
        RETURNING execution_id
    ), moved AS (
        UPDATE executions w
           SET waiting_for = w.waiting_for - 1,
               state = CASE WHEN up_state <> 'succeeded' AND w.dependency_policy = 'on_success' THEN 'cancelled'
                            WHEN w.waiting_for = 1 THEN 'queued' ELSE 'waiting' END,
               state_reason = CASE WHEN up_state <> 'succeeded' AND w.dependency_policy = 'on_success'
                                   THEN 'upstream ' || up::text || ' ended ' || up_state
                                   WHEN w.waiting_for = 1 THEN NULL ELSE w.state_reason END,
               queued_at = CASE WHEN (up_state = 'succeeded' OR w.dependency_policy = 'always') AND w.waiting_for = 1
                                THEN at ELSE w.queued_at END,
               run_at = CASE WHEN (up_state = 'succeeded' OR w.dependency_policy = 'always') AND w.waiting_for = 1
                             THEN greatest(w.run_at, at) ELSE w.run_at END,
               finished_at = CASE WHEN up_state <> 'succeeded' AND w.dependency_policy = 'on_success'
                                  THEN at ELSE w.finished_at END
         WHERE w.id IN (SELECT execution_id FROM edges) AND w.state = 'waiting'
        RETURNING w.state
    ), woke AS MATERIALIZED (
        SELECT pg_notify('cronwheel_queued', 'released') FROM (SELECT 1 FROM moved WHERE state = 'queued' LIMIT 1) r
    )
    SELECT (SELECT count(*) FROM moved) + 0 * (SELECT count(*) FROM woke)
$$;

CREATE FUNCTION cronwheel_upstream_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cronwheel_resolve_dependents(NEW.id, NEW.state, coalesce(NEW.finished_at, now()));
    RETURN NULL;
END $$;

CREATE TRIGGER executions_release_dependents AFTER UPDATE OF state ON executions
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.state IS DISTINCT FROM NEW.state
          AND NEW.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped'))
    EXECUTE FUNCTION cronwheel_upstream_finished();

-- Child schedules (Dkron's parent and child jobs): a schedule with a parent has no cron of its own
-- (cron ''; its due row never has a next tick) and runs once for each successful run of its parent,
-- with that run's scheduled time (dispatch.sql `release_children`, in the parent run's completion
-- transaction; trigger 'parent'). The unique (schedule_id, scheduled_for) makes it once.
ALTER TABLE schedules ADD COLUMN parent_schedule_id uuid;
CREATE INDEX schedules_children ON schedules (parent_schedule_id) WHERE parent_schedule_id IS NOT NULL AND deleted_at IS NULL;
ALTER TABLE executions DROP CONSTRAINT executions_trigger_check;
ALTER TABLE executions ADD CONSTRAINT executions_trigger_check
    CHECK (trigger IN ('cron', 'manual', 'backfill', 'submit', 'catch_up', 'parent'));

-- Retention spares an upstream that a waiting job depends on, and takes a pruned job's edges with it.
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
