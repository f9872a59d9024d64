-- schema.sql: the current truth of the database (all migrations applied). A test checks that
-- applying every migration in order yields exactly this schema. Keep the two in step.
-- Every table that grows with the work carries `partition`, and every hot index leads with it.

CREATE TABLE cluster_meta (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);

-- The fencing record. epoch is the etcd create-revision of the partition key of the current
-- owner; it only ever increases (record_epoch updates WHERE epoch < new).
CREATE TABLE partitions (
    id          integer PRIMARY KEY CHECK (id >= 0),
    epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    owner       text,
    acquired_at timestamptz
);

-- Ownership history (acquired / released / lost), for "why didn't it fire?".
CREATE TABLE partition_history (
    id        bigserial PRIMARY KEY,
    partition integer NOT NULL,
    epoch     bigint NOT NULL,
    owner     text NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('acquired', 'released', 'lost')),
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX partition_history_by_partition ON partition_history (partition, at);

CREATE TABLE tenants (
    id                     text PRIMARY KEY,
    max_concurrency        integer NOT NULL DEFAULT 1000 CHECK (max_concurrency > 0),
    rate_per_s             double precision CHECK (rate_per_s > 0),    -- NULL: no rate limit
    weight                 integer NOT NULL DEFAULT 1 CHECK (weight > 0),
    max_schedules          integer CHECK (max_schedules > 0),
    max_executions_per_day integer CHECK (max_executions_per_day > 0),
    created_at             timestamptz NOT NULL DEFAULT now(),
    burst                  double precision CHECK (burst > 0),         -- NULL: rate_per_s (one second's worth)
    -- HTTP targets (0023): "HOST_GLOB" or "HOST_GLOB:PORT" each, the only destinations its targets
    -- may have; NULL: any public address.
    egress_rules           text[]
);

-- Per-tenant claim state (0017), written only by a claim holding the tenant's claim lock: the
-- token bucket (tokens as of refilled_at; NULL: full) and the decaying fair-share count.
CREATE TABLE tenant_dispatch (
    tenant      text PRIMARY KEY,
    tokens      double precision,
    refilled_at timestamptz,
    served      double precision NOT NULL DEFAULT 0,
    served_at   timestamptz
);


-- Every capability set a run may require (0025), registered before a run requiring it is stored.
CREATE TABLE capability_sets (
    capabilities text PRIMARY KEY,
    caps         text[] NOT NULL
);
INSERT INTO capability_sets (capabilities, caps) VALUES ('', '{}');

-- The (queue, capability set) lanes a worker may take from (0025): the claim and claim_wait.
CREATE FUNCTION cronwheel_claim_lanes(queues text[], have text[])
RETURNS TABLE (queue text, caps text)
LANGUAGE sql STABLE AS $$
    SELECT q.queue, c.capabilities FROM unnest(queues) AS q(queue) CROSS JOIN capability_sets c
     WHERE c.caps <@ have
$$;

-- A queue's limits per tenant (0025): NULL max_concurrency: only the tenant's cap.
CREATE TABLE tenant_queues (
    tenant          text NOT NULL,
    queue           text NOT NULL,
    max_concurrency integer CHECK (max_concurrency > 0),
    weight          integer NOT NULL DEFAULT 1 CHECK (weight > 0),
    PRIMARY KEY (tenant, queue)
);

CREATE TABLE schedules (
    id                           uuid PRIMARY KEY,
    tenant                       text NOT NULL,
    name                         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    cron                         text NOT NULL,
    timezone                     text NOT NULL,
    -- NULL: the default rules (gap: shift; repeated: first; an hour field of * fires in every
    -- real hour). A value overrides that axis (see cronwheel.cron).
    dst_gap                      text CHECK (dst_gap IN ('shift', 'skip')),
    dst_repeated                 text CHECK (dst_repeated IN ('first', 'last', 'both')),
    job_type                     text NOT NULL CHECK (length(job_type) BETWEEN 1 AND 200),
    payload                      jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority                     text NOT NULL DEFAULT 'default'
                                 CHECK (priority IN ('critical', 'default', 'bulk')),
    retry_initial_s              double precision NOT NULL DEFAULT 30 CHECK (retry_initial_s >= 0),
    retry_multiplier             double precision NOT NULL DEFAULT 4 CHECK (retry_multiplier >= 1),
    retry_max_s                  double precision NOT NULL DEFAULT 21600 CHECK (retry_max_s >= 0),
    max_attempts                 integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    timeout_s                    double precision CHECK (timeout_s > 0),
    misfire_policy               text NOT NULL CHECK (misfire_policy IN ('skip', 'run_once', 'catch_up')),
    max_catch_up                 integer NOT NULL DEFAULT 10 CHECK (max_catch_up BETWEEN 1 AND 1000),
    overlap_policy               text NOT NULL DEFAULT 'allow'
                                 CHECK (overlap_policy IN ('forbid', 'allow', 'replace', 'buffer_one', 'buffer_all')),
    jitter_s                     double precision NOT NULL DEFAULT 0 CHECK (jitter_s >= 0),
    paused                       boolean NOT NULL DEFAULT false,
    version                      bigint NOT NULL DEFAULT 1,
    partition                    integer NOT NULL,
    alert_if_no_success_within_s double precision CHECK (alert_if_no_success_within_s > 0),
    last_success_at              timestamptz,
    -- Dead man's switch: when "no success within alert_if_no_success_within_s" was raised
    -- (NULL: not raised since the last success).
    success_alert_at             timestamptz,
    created_at                   timestamptz NOT NULL DEFAULT now(),
    updated_at                   timestamptz NOT NULL DEFAULT now(),
    deleted_at                   timestamptz,
    -- Retention (cluster/retention): keep the last N finished runs and/or succeeded (skipped,
    -- cancelled) and failed (dead) runs for a time; NULL inherits the job type's or cluster's.
    keep_last                    integer CHECK (keep_last >= 0),
    keep_succeeded_for_s         double precision CHECK (keep_succeeded_for_s > 0),
    keep_failed_for_s            double precision CHECK (keep_failed_for_s > 0),
    -- An HTTP target (0023) instead of a job type for SDK workers: job_type is then 'http'.
    target                       jsonb,
    -- A child schedule (0024): no cron of its own (cron ''), runs once per successful run of this
    -- parent, with the parent run's scheduled time (dispatch.sql release_children).
    parent_schedule_id           uuid,
    -- Queues and capabilities (0025): what its runs get (executions.queue, .required_capabilities).
    queue                        text NOT NULL DEFAULT 'default',
    required_capabilities        text NOT NULL DEFAULT ''
);
-- Names are unique per tenant among live schedules.
CREATE UNIQUE INDEX schedules_tenant_name ON schedules (tenant, name) WHERE deleted_at IS NULL;
CREATE INDEX schedules_by_tenant ON schedules (tenant, created_at, id);
-- Schedules with a dead man's switch, per partition (the reaper checks them every second).
CREATE INDEX schedules_alerting ON schedules (partition) WHERE alert_if_no_success_within_s IS NOT NULL;
-- Schedules with their own retention, per partition (the pruner's keep_last pass).
CREATE INDEX schedules_retention ON schedules (partition, id)
    WHERE keep_last IS NOT NULL OR keep_succeeded_for_s IS NOT NULL OR keep_failed_for_s IS NOT NULL;
-- An admin's list across tenants, in creation order or by name (ListSchedules, the console).
CREATE INDEX schedules_live_by_created ON schedules (created_at, id) WHERE deleted_at IS NULL;
CREATE INDEX schedules_live_by_name ON schedules (name, id) WHERE deleted_at IS NULL;
-- The live children of a schedule (the parent run's completion reads them).
CREATE INDEX schedules_children ON schedules (parent_schedule_id) WHERE parent_schedule_id IS NOT NULL AND deleted_at IS NULL;

-- The cron half of the due index, narrow: one row per schedule, the only row a fire rewrites
-- (next tick, tick just fired). next_run_at is NULL while the schedule has no next tick (paused
-- through the API, deleted, expression exhausted). What the preloader scans per partition.
CREATE TABLE schedule_due (
    schedule_id        uuid PRIMARY KEY REFERENCES schedules (id) ON DELETE CASCADE,
    partition          integer NOT NULL,
    next_run_at        timestamptz,
    last_scheduled_for timestamptz
);
CREATE INDEX schedule_due_next ON schedule_due (partition, next_run_at) WHERE next_run_at IS NOT NULL;

CREATE TABLE executions (
    id               uuid PRIMARY KEY,
    schedule_id      uuid,
    tenant           text NOT NULL,
    type             text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    partition        integer NOT NULL,
    scheduled_for    timestamptz NOT NULL,
    run_at           timestamptz NOT NULL,
    priority         text NOT NULL DEFAULT 'default'
                     CHECK (priority IN ('critical', 'default', 'bulk')),
    state            text NOT NULL CHECK (state IN ('scheduled', 'queued', 'running', 'succeeded',
                     'failed', 'retry_scheduled', 'dead', 'cancelled', 'skipped', 'waiting')),
    state_reason     text,
    trigger          text NOT NULL DEFAULT 'cron'
                     CHECK (trigger IN ('cron', 'manual', 'backfill', 'submit', 'catch_up', 'parent')),
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    retry_initial_s  double precision NOT NULL DEFAULT 30,
    retry_multiplier double precision NOT NULL DEFAULT 4,
    retry_max_s      double precision NOT NULL DEFAULT 21600,
    timeout_s        double precision,
    lease_owner      text,
    lease_expires    timestamptz,
    fencing_token    bigint NOT NULL DEFAULT 0,
    checkpoint       jsonb,
    idempotency_key  text,
    error            text,
    error_type       text,
    result           jsonb,
    cancel_requested boolean NOT NULL DEFAULT false,
    fired_epoch      bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    fired_at         timestamptz,
    queued_at        timestamptz,
    started_at       timestamptz,
    heartbeat_at     timestamptz,
    finished_at      timestamptz,
    -- W3C traceparent of the execution's trace (0013); NULL: not traced.
    trace_context    text,
    -- Unique jobs (0015): sha256 of (tenant, type, compared args, period bucket) and the bitmask
    -- of the states in which the row holds it (cronwheel_unique_holds); NULL for other rows.
    unique_key       bytea,
    unique_states    smallint,
    -- Concurrency key (0017): at most concurrency_limit running runs of the tenant with this key.
    concurrency_key   text,
    concurrency_limit integer,
    CONSTRAINT executions_concurrency_key_limit
        CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL) AND (concurrency_limit IS NULL OR concurrency_limit >= 1)),
    -- The HTTP target a run of type 'http' calls (0023): its schedule's, copied at insert.
    target            jsonb,
    -- Its concurrency key's token bucket (0023: an HTTP target's rate_per_s, burst); NULL: none.
    key_rate_per_s    double precision,
    key_burst         double precision,
    -- Dependencies (0024): a `waiting` job's count of upstreams not yet finished (NULL: it named
    -- none), what an upstream that did not succeed does to it ('on_success': cancels it;
    -- 'always': it runs anyway), and whether a job is an upstream of any (the trigger's test).
    waiting_for       integer CHECK (waiting_for >= 0),
    dependency_policy text CHECK (dependency_policy IN ('on_success', 'always')),
    has_dependents    boolean NOT NULL DEFAULT false,
    -- Queues and capabilities (0025): the queue a worker must name to lease the run, and the
    -- capabilities it must advertise, canonical ('' none; 'key=value' sorted, joined by ',').
    queue                 text NOT NULL DEFAULT 'default',
    required_capabilities text NOT NULL DEFAULT ''
);
-- The token buckets of rate-limited concurrency keys (0023), spent by the claim under the
-- tenant's claim lock.
CREATE TABLE key_dispatch (
    tenant      text NOT NULL,
    ckey        text NOT NULL,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    rate_per_s  double precision NOT NULL,  -- of the last run started (claim_wait's next token)
    burst       double precision,
    PRIMARY KEY (tenant, ckey)
);
-- The whole fire-once story: one execution per (schedule, tick). Partial (0019): a one-off job
-- has no schedule, so its NULL never conflicted, and indexing it cost each of its row versions
-- an index entry. An ON CONFLICT on it names the predicate.
CREATE UNIQUE INDEX executions_schedule_tick ON executions (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
-- Submissions are deduplicated per tenant (partial: cron ticks carry no key).
CREATE UNIQUE INDEX executions_idempotency ON executions (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Unique jobs (0015): whether a row whose unique_states is `states` holds its unique_key in
-- `state`. The one definition of each state's bit (storage/executions.py UNIQUE_STATE_BITS mirrors it).
CREATE FUNCTION cronwheel_unique_holds(states smallint, state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (states & CASE state
                         WHEN 'scheduled' THEN 1
                         WHEN 'queued' THEN 2
                         WHEN 'running' THEN 4
                         WHEN 'retry_scheduled' THEN 8
                         WHEN 'succeeded' THEN 16
                         WHEN 'failed' THEN 32
                         WHEN 'dead' THEN 64
                         WHEN 'cancelled' THEN 128
                         WHEN 'skipped' THEN 256
                         ELSE 0
                     END) <> 0
$$;
-- One execution per unique key among the rows in their unique states (two racing submits: one).
CREATE UNIQUE INDEX executions_unique ON executions (unique_key)
    WHERE unique_key IS NOT NULL AND cronwheel_unique_holds(unique_states, state);
-- One-off half of the due index (state scheduled) and the retry timer (retry_scheduled).
CREATE INDEX executions_due ON executions (partition, run_at)
    WHERE state IN ('scheduled', 'retry_scheduled');
-- The reaper: running executions by lease expiry.
CREATE INDEX executions_running ON executions (partition, lease_expires)
    WHERE state = 'running';
CREATE INDEX executions_by_tenant ON executions (tenant, created_at, id);
-- Finished executions by when they finished (a skipped record: when it was recorded), per partition: what
-- the pruner walks from the oldest, a batch at a time.
CREATE INDEX executions_finished ON executions (partition, (coalesce(finished_at, created_at)), id)
    WHERE state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped');

-- What retention removed, per schedule: the latest tick pruned (explain: "pruned by retention").
-- The due cursor (schedule_due), not these rows or the executions, says what has fired.
CREATE TABLE execution_pruned (
    schedule_id    uuid PRIMARY KEY,
    partition      integer NOT NULL,
    pruned_through timestamptz NOT NULL,
    pruned         bigint NOT NULL DEFAULT 0,
    at             timestamptz NOT NULL,
    -- Ticks up to here were pruned before their ticks were recorded (0020): explain cannot tell.
    untracked_through timestamptz
);

-- The ticks retention removed, one row per schedule and prune batch (0020): explain tells a pruned
-- tick (here) from one that never fired (nowhere). Dropped with the events (prune_history).
CREATE TABLE execution_pruned_ticks (
    schedule_id uuid NOT NULL,
    first_tick  timestamptz NOT NULL,
    last_tick   timestamptz NOT NULL,
    ticks       timestamptz[] NOT NULL,
    at          timestamptz NOT NULL
);
CREATE INDEX execution_pruned_ticks_by_schedule ON execution_pruned_ticks (schedule_id, last_tick);

-- Dependencies (0024): one row per (dependent, upstream). outcome: NULL while the upstream has not
-- finished, then the finished state it resolved with (at resolved_at), once. Deleted with the
-- dependent (cronwheel_prune_delete). The trigger executions_release_dependents resolves an
-- upstream's edges in the transaction that finishes it (docs/semantics.md "Dependencies").
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


-- Append-only audit and alert log.
CREATE TABLE events (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    tenant       text,
    kind         text NOT NULL,
    schedule_id  uuid,
    execution_id uuid,
    partition    integer,
    actor        text,
    alert        boolean NOT NULL DEFAULT false,
    data         jsonb NOT NULL DEFAULT '{}'::jsonb,
    webhooks_pending boolean NOT NULL DEFAULT true  -- not yet fanned out to webhook deliveries (0022)
);
CREATE INDEX events_by_schedule ON events (schedule_id, at);
CREATE INDEX events_by_kind ON events (kind, at);
-- The webhook outbox (0022): events the senders have not fanned out yet.
CREATE INDEX events_webhooks_pending ON events (id) WHERE webhooks_pending;
-- The claim's lanes (0025): queued runs per tenant, queue, capability set and priority.
CREATE INDEX executions_queued_by_lane ON executions (tenant, queue, required_capabilities, priority, run_at)
    WHERE state = 'queued';
-- Running work per tenant and queue (the tenant's cap, a queue's limit, a worker's queue slots).
CREATE INDEX executions_running_by_queue ON executions (tenant, queue)
    WHERE state = 'running';
-- Running runs per concurrency key (0017).
CREATE INDEX executions_running_by_key ON executions (tenant, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
-- Buffered cron runs (overlap buffer_*) waiting for the run ahead of them.
CREATE INDEX executions_buffered ON executions (schedule_id, scheduled_for)
    WHERE state = 'scheduled' AND state_reason = 'buffered';

-- The tenants that have queued work, by a loose index scan of executions_queued_by_lane (one
-- index probe per tenant, however many runs are queued). Both statements of a claim start here.
CREATE VIEW queued_tenants AS
WITH RECURSIVE tq(tenant) AS (
    (SELECT tenant FROM executions WHERE state = 'queued' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant FROM executions e
             WHERE e.state = 'queued' AND e.tenant > tq.tenant ORDER BY e.tenant LIMIT 1)
      FROM tq WHERE tq.tenant IS NOT NULL
)
SELECT tenant FROM tq WHERE tenant IS NOT NULL;

-- Push alerts (0011): webhook subscriptions and the deliveries each event owes them.
CREATE TABLE webhooks (
    id          uuid PRIMARY KEY,
    tenant      text,                       -- NULL: every tenant's events and cluster events (admins)
    url         text NOT NULL,
    secret      text NOT NULL,              -- HMAC-SHA256 key of the signature header
    kinds       text[] NOT NULL,
    schedule_id uuid,                       -- NULL: any schedule's events (and those of none)
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    created_by  text
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant);

CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    webhook_id      uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        bigint NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    claimed_by      text,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz
);
-- What the senders poll: due pending deliveries, oldest first.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

-- Named secrets (0021): the secret store's database provider (storage/secrets.py). A tenant's
-- value by name ('' : the cluster's), sealed with the nodes' key like webhooks.secret.
CREATE TABLE secrets (
    tenant      text NOT NULL DEFAULT '',
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.-]{1,128}$'),
    value       text NOT NULL,              -- sealed (cwsec1:KEY_ID:...); plaintext only on a cluster without a key
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- Functions (0009: ids; 0014: the rules several statements share, inlined by the planner).
CREATE FUNCTION cronwheel_uuid7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

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

-- What handlers logged, per attempt (0026): apart from the executions row, appended by the
-- worker SDK (AppendLogs, fenced by the attempt's token), deleted with their execution by
-- cronwheel_prune_delete. No foreign key: its check would lock the execution's row on every
-- append. `seq` is the line's number in its attempt (the SDK's); cut lines leave a gap that the
-- truncation mark starts.
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

-- The partition fence (0027), the one check of every write on behalf of a partition owner: the
-- partition's row while it still carries epoch `e`, share-locked until the transaction ends (an
-- acquisition waits for the fenced write); no row: stale, write nothing. VOLATILE because it locks,
-- so never inlined: an uncorrelated `EXISTS (SELECT 1 FROM cronwheel_fence(p, e))` runs once per
-- statement (PL/pgSQL: its plan is kept for the session). In a transaction that already holds the
-- lock (`fenced()`) it takes nothing more.
CREATE FUNCTION cronwheel_fence(p integer, e bigint) RETURNS TABLE (id integer, epoch bigint)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
BEGIN
    RETURN QUERY SELECT f.id, f.epoch FROM partitions AS f WHERE f.id = p AND f.epoch = e FOR SHARE OF f;
END
$$;

-- Delete the finished executions `ids` of partition p, if still finished and p is still at epoch
-- e, and record per schedule what went (explain's "pruned by retention"): the one write of
-- retention (with their logs, 0026). Answers how many rows went.
CREATE FUNCTION cronwheel_prune_delete(p integer, e bigint, now timestamptz, ids uuid[]) RETURNS bigint
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

-- The fire guard (0027; storage/firing.py), applied by every statement that records a cron tick or moves a
-- schedule's cursor (fire_ticks_fenced, fire_executions, advance_schedules): the schedule is still
-- at the version the decision was loaded with, not paused or deleted, and its cursor
-- (schedule_due.next_run_at) is still the tick the decision started from. One expression, IMMUTABLE:
-- the planner inlines it, so the statements' plans are those of the spelled-out predicate.
CREATE FUNCTION cronwheel_fire_guard(version bigint, loaded_version bigint, paused boolean, deleted_at timestamptz,
                                     next_run_at timestamptz, from_tick timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT version = loaded_version AND NOT paused AND deleted_at IS NULL AND next_run_at = from_tick
$$;

-- The preload window: a due time in (after, horizon] (after NULL: everything up to horizon). The
-- firer's loads (due_schedules, due_oneoffs) and their cross-partition pre-check share it, so
-- the pre-check can never say "nothing" where a load would find something.
CREATE FUNCTION cronwheel_in_window(t timestamptz, after timestamptz, horizon timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t <= horizon AND t > coalesce(after, '-infinity'::timestamptz)  -- both bounds: an index range
$$;
-- Bearer tokens made through the API (TenantService.CreateToken), stored as the SHA-256 (hex) of
-- the secret; every node keeps the live ones in memory, re-read every second.
CREATE TABLE tokens (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    tenant      text,
    admin       boolean NOT NULL DEFAULT false,
    sha256      text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL,
    created_by  text,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    CHECK (admin OR tenant IS NOT NULL)
);
CREATE INDEX tokens_by_tenant ON tokens (tenant, id);

-- What the daily execution quota counts (0020): executions created per tenant with a quota and UTC
-- day, kept by the trigger executions_count_created (below); retention does not touch it.
CREATE TABLE daily_executions (
    tenant  text NOT NULL,
    day     date NOT NULL,
    created bigint NOT NULL,
    PRIMARY KEY (tenant, day)
);

-- Tenant quotas (0016).
-- The daily execution quota's room: for each of `tenants` that has a max_executions_per_day, the
-- quota and how many more executions it may create on the UTC day of `at` (negative: over). The
-- one definition of "used today", for the fire path's quota skips (fire_ticks_fenced,
-- fire_executions) and the submit path's count (api_used_today, under its per-group advisory
-- lock): the day's counter (daily_executions), which retention does not touch.
CREATE FUNCTION cronwheel_daily_room(tenants text[], at timestamptz)
RETURNS TABLE (tenant text, quota integer, room bigint)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.max_executions_per_day,
           t.max_executions_per_day - coalesce((SELECT d.created FROM daily_executions d
                                                 WHERE d.tenant = t.id AND d.day = (at AT TIME ZONE 'UTC')::date), 0)
      FROM tenants t
     WHERE t.id = ANY (tenants) AND t.max_executions_per_day IS NOT NULL
$$;

-- Limits at lease time (0017).
-- The one token-bucket rule (the claim spends, claim_wait reads): the bucket's level at
-- `at`, refilled at `rate` per second from `level` at `refilled_at`, capped at the bucket size
-- (burst, NULL: rate; at least 1, or no run could ever start). NULL rate: no limit (NULL).
-- A clock that went backwards refills nothing.
CREATE FUNCTION cronwheel_bucket_tokens(rate double precision, burst double precision,
                                                   level double precision, refilled_at timestamptz,
                                                   at timestamptz) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN rate IS NULL THEN NULL
                WHEN level IS NULL OR refilled_at IS NULL THEN GREATEST(coalesce(burst, rate), 1)
                ELSE LEAST(GREATEST(coalesce(burst, rate), 1),
                           level + rate * GREATEST(0, extract(epoch FROM at - refilled_at)::float8)) END
$$;

-- Daily execution counts (0020): the trigger that keeps daily_executions.
-- The one place executions are counted: after each INSERT statement on executions, the rows it
-- inserted of tenants with a quota, per tenant and UTC day of created_at, added to
-- daily_executions in (tenant, day) order (two statements never wait for each other in a cycle).
CREATE FUNCTION cronwheel_count_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tenants WHERE max_executions_per_day IS NOT NULL) THEN
        RETURN NULL;  -- no quota anywhere (the common case): the inserted rows are not read
    END IF;
    INSERT INTO daily_executions AS d (tenant, day, created)
    SELECT n.tenant, (n.created_at AT TIME ZONE 'UTC')::date, count(*)
      FROM created n
     WHERE n.tenant IN (SELECT t.id FROM tenants t WHERE t.max_executions_per_day IS NOT NULL)
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (tenant, day) DO UPDATE SET created = d.created + excluded.created;
    RETURN NULL;
END $$;

CREATE TRIGGER executions_count_created AFTER INSERT ON executions
    REFERENCING NEW TABLE AS created FOR EACH STATEMENT EXECUTE FUNCTION cronwheel_count_created();

-- A quota set where there was none: today's counter starts at the tenant's executions of today
-- that exist (never lower than what it already counted).
CREATE FUNCTION cronwheel_seed_daily_count() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.max_executions_per_day IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.max_executions_per_day IS NULL) THEN
        INSERT INTO daily_executions AS d (tenant, day, created)
        SELECT NEW.id, (now() AT TIME ZONE 'UTC')::date, count(*) FROM executions e
         WHERE e.tenant = NEW.id AND e.created_at >= date_trunc('day', now(), 'UTC')
        ON CONFLICT (tenant, day) DO UPDATE SET created = greatest(d.created, excluded.created);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tenants_seed_daily_count AFTER INSERT OR UPDATE OF max_executions_per_day ON tenants
    FOR EACH ROW EXECUTE FUNCTION cronwheel_seed_daily_count();


-- HTTP targets (0023): a run of type 'http' keeps its schedule's target, copied at insert, and
-- its concurrency limit becomes the concurrency key 'target:<origin>'.
CREATE FUNCTION cronwheel_copy_target() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.target IS NULL AND NEW.schedule_id IS NOT NULL THEN
        NEW.target := (SELECT s.target FROM schedules s WHERE s.id = NEW.schedule_id);
    END IF;
    IF NEW.concurrency_key IS NULL
       AND ((NEW.target->>'concurrency_limit') IS NOT NULL OR (NEW.target->>'rate_per_s') IS NOT NULL) THEN
        NEW.concurrency_key := 'target:' || lower(substring(NEW.target->>'url' FROM '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]+'));
        NEW.concurrency_limit := coalesce((NEW.target->>'concurrency_limit')::int, 2147483647);
        NEW.key_rate_per_s := (NEW.target->>'rate_per_s')::float8;
        NEW.key_burst := (NEW.target->>'burst')::float8;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER executions_copy_target BEFORE INSERT ON executions
    FOR EACH ROW WHEN (NEW.type = 'http')
    EXECUTE FUNCTION cronwheel_copy_target();
