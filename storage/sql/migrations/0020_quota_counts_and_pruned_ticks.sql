-- 0020_quota_counts_and_pruned_ticks. 1. The daily execution quota counts what was created, not what is
-- left (issue 47 item 4). It counted the tenant's executions rows created that day, so retention
-- gave the room back: keep_last=0 under a quota of 5 ran 30 ticks in 60 s. Now a counter row per
-- (tenant, UTC day) is incremented by the statement that inserts the executions (one statement
-- trigger, one UPSERT per tenant and day, not per row), for tenants that have a quota: a tenant
-- without one pays nothing but the trigger's look at its rows. A quota set on a tenant (created
-- with one, or set where there was none) starts its day's counter at the executions of that day
-- that exist then (what retention has already removed of that day is not known).

CREATE TABLE IF NOT EXISTS daily_executions (
    tenant  text NOT NULL,
    day     date NOT NULL,
    created bigint NOT NULL,
    PRIMARY KEY (tenant, day)
);

-- The one place executions are counted: after each INSERT statement on executions, the rows it
-- inserted of tenants with a quota, per tenant and UTC day of created_at, added to
-- daily_executions in (tenant, day) order (two statements never wait for each other in a cycle).
CREATE OR REPLACE FUNCTION cronwheel_count_created() RETURNS trigger
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

DROP TRIGGER IF EXISTS executions_count_created ON executions;
CREATE TRIGGER executions_count_created AFTER INSERT ON executions
    REFERENCING NEW TABLE AS created FOR EACH STATEMENT EXECUTE FUNCTION cronwheel_count_created();

-- A quota set where there was none: today's counter starts at the tenant's executions of today
-- that exist (never lower than what it already counted).
CREATE OR REPLACE FUNCTION cronwheel_seed_daily_count() RETURNS trigger
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

DROP TRIGGER IF EXISTS tenants_seed_daily_count ON tenants;
CREATE TRIGGER tenants_seed_daily_count AFTER INSERT OR UPDATE OF max_executions_per_day ON tenants
    FOR EACH ROW EXECUTE FUNCTION cronwheel_seed_daily_count();

-- The daily execution quota's room: for each of `tenants` that has a max_executions_per_day, the
-- quota and how many more executions it may create on the UTC day of `at` (negative: over). The
-- one definition of "used today", for the fire path's quota skips (fire_ticks_fenced,
-- fire_executions) and the submit path's count (api_used_today, under its per-group advisory
-- lock): the day's counter (daily_executions), which retention does not touch.
CREATE OR REPLACE FUNCTION cronwheel_daily_room(tenants text[], at timestamptz)
RETURNS TABLE (tenant text, quota integer, room bigint)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.max_executions_per_day,
           t.max_executions_per_day - coalesce((SELECT d.created FROM daily_executions d
                                                 WHERE d.tenant = t.id AND d.day = (at AT TIME ZONE 'UTC')::date), 0)
      FROM tenants t
     WHERE t.id = ANY (tenants) AND t.max_executions_per_day IS NOT NULL
$$;

-- The quota tenants' days so far: today's counters start from the rows that exist.
INSERT INTO daily_executions AS d (tenant, day, created)
SELECT t.id, (now() AT TIME ZONE 'UTC')::date, count(e.id)
  FROM tenants t LEFT JOIN executions e ON e.tenant = t.id AND e.created_at >= date_trunc('day', now(), 'UTC')
 WHERE t.max_executions_per_day IS NOT NULL
 GROUP BY t.id
ON CONFLICT (tenant, day) DO NOTHING;

-- 2. Explain tells a pruned tick from a missed one (issue 47 item 8). It called every tick up to
-- the schedule's latest pruned tick "pruned by retention", so a tick that never fired looked
-- pruned (with keep_last=0, every one did). Retention now records the ticks it removed: one row per
-- schedule and prune batch (`execution_pruned_ticks`, the batch's ticks as an array, found by
-- (schedule_id, last_tick)), dropped with the events after the retention period. Ticks pruned
-- before this migration were not recorded: up to `untracked_through` explain still cannot tell.
CREATE TABLE IF NOT EXISTS execution_pruned_ticks (
    schedule_id uuid NOT NULL,
    first_tick  timestamptz NOT NULL,
    last_tick   timestamptz NOT NULL,
    ticks       timestamptz[] NOT NULL,
    at          timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS execution_pruned_ticks_by_schedule ON execution_pruned_ticks (schedule_id, last_tick);
ALTER TABLE execution_pruned ADD COLUMN IF NOT EXISTS untracked_through timestamptz;
UPDATE execution_pruned SET untracked_through = pruned_through WHERE untracked_through IS NULL;

CREATE OR REPLACE FUNCTION cronwheel_prune_delete(p integer, e bigint, now timestamptz, ids uuid[]) RETURNS bigint
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
    ), ticks AS (
        INSERT INTO execution_pruned_ticks (schedule_id, first_tick, last_tick, ticks, at)
        SELECT schedule_id, min(scheduled_for), max(scheduled_for), array_agg(scheduled_for ORDER BY scheduled_for),
               now
          FROM gone WHERE schedule_id IS NOT NULL GROUP BY schedule_id
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
