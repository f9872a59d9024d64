-- 0020_daily_execution_counts: the daily execution quota counts what was created, not what is
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
