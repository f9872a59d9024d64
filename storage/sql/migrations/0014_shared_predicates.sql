-- 0014_shared_predicates: each rule that more than one statement applies is defined once, here,
-- as a plain SQL function the planner inlines (the statements' plans and index use are those of
-- the spelled-out predicate). Before, the reaper's read-only pre-check (`reap_due_partitions`)
-- restated the predicates of the fenced statements that do the work: had the two drifted, the
-- reaper would have skipped work silently. STABLE, not IMMUTABLE: timestamptz + interval is
-- stable, and an IMMUTABLE wrapper around it would not be inlined.

-- A running run whose lease lapsed without heartbeat, or that ran past its per-job timeout.
CREATE FUNCTION cronwheel_run_overdue(state text, lease_expires timestamptz, timeout_s double precision,
                                      started_at timestamptz, now timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT state = 'running'
       AND (lease_expires < now OR (timeout_s IS NOT NULL AND started_at + make_interval(secs => timeout_s) < now))
$$;

-- A retry whose backoff has passed: it becomes claimable.
CREATE FUNCTION cronwheel_retry_due(state text, run_at timestamptz, now timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT state = 'retry_scheduled' AND run_at <= now
$$;

-- A live, unpaused schedule with a dead man's switch, not yet raised, and no success within its
-- window (counted from its creation until the first success).
CREATE FUNCTION cronwheel_success_overdue(alert_s double precision, success_alert_at timestamptz,
                                          deleted_at timestamptz, paused boolean, last_success_at timestamptz,
                                          created_at timestamptz, now timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT alert_s IS NOT NULL AND success_alert_at IS NULL AND deleted_at IS NULL AND NOT paused
       AND coalesce(last_success_at, created_at) + make_interval(secs => alert_s) < now
$$;

-- The time before which a partition's finished executions may be pruned by age: the shortest
-- retention window in force there (the node's shortest, or a schedule's own); NULL: none.
CREATE FUNCTION cronwheel_prune_horizon(p integer, now timestamptz, shortest_s double precision)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT now - make_interval(secs => least(shortest_s, (
               SELECT least(min(keep_succeeded_for_s), min(keep_failed_for_s)) FROM schedules
                WHERE partition = p
                  AND (keep_last IS NOT NULL OR keep_succeeded_for_s IS NOT NULL OR keep_failed_for_s IS NOT NULL))))
$$;

-- The preload window: a due time in (after, horizon] (after NULL: everything up to horizon). The
-- firer's loads (due_schedules, due_oneoffs) and their cross-partition pre-check share it, so
-- the pre-check can never say "nothing" where a load would find something.
CREATE FUNCTION cronwheel_in_window(t timestamptz, after timestamptz, horizon timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t <= horizon AND t > coalesce(after, '-infinity'::timestamptz)  -- both bounds: an index range
$$;
