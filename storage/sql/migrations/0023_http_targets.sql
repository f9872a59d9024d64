-- 0023_http_targets: a schedule or a one-off job may call an HTTP target instead of naming a job
-- type for SDK workers (issue 50; cronwheel/http_target.py). Its runs have the reserved job type
-- 'http' and are leased by doers (`cronwheel worker --http`) like any other run, so leases,
-- heartbeats, timeouts, retries and fencing apply unchanged. The target (url, method, headers,
-- body, timeout_s, signing_secret) is JSON, validated by the API; a header may name a secret of
-- the tenant instead of holding a value (resolved by the doer at call time, never stored here).
ALTER TABLE schedules ADD COLUMN target jsonb;
-- A tenant's egress rules (issue 50, item 4): "HOST_GLOB" or "HOST_GLOB:PORT" each; NULL (or
-- none): any public address. Set by an admin; checked when a target is stored.
ALTER TABLE tenants ADD COLUMN egress_rules text[];
ALTER TABLE executions ADD COLUMN target jsonb;
-- A target's rate limit (issue 50, item 3): a token bucket per concurrency key, spent by the claim
-- as tenant_dispatch is (0017), under the tenant's claim lock (a key is the tenant's), so exact
-- across nodes and doers. The run carries its rate (NULL: none) as it carries concurrency_limit.
ALTER TABLE executions ADD COLUMN key_rate_per_s double precision;
ALTER TABLE executions ADD COLUMN key_burst double precision;
CREATE TABLE key_dispatch (
    tenant      text NOT NULL,
    ckey        text NOT NULL,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    rate_per_s  double precision NOT NULL,  -- of the last run started (claim_wait's next token)
    burst       double precision,
    PRIMARY KEY (tenant, ckey)
);

-- An execution keeps the target its schedule had when it was created, as it keeps the job type
-- and payload. The five statements that create runs of a schedule (the fire path, triggers,
-- backfills) copy the schedule's job type; this trigger copies its target for the runs whose
-- type is 'http' only (the WHEN clause: other runs pay nothing), so none of them had to change.
-- A one-off job's target is inserted with it (schedule_id NULL: nothing to copy).
-- A target's concurrency limit (the most of the tenant's calls to one origin, scheme://host:port
-- as written, open at once) is the one rule of concurrency keys (0017): its runs get the key
-- 'target:<origin>' and the limit, so the claim holds them back exactly, across nodes and doers,
-- at lease time (a held-back run takes no doer slot). A job's own concurrency key wins. A target's
-- rate_per_s (and burst) become the run's key_rate_per_s / key_burst (no concurrency limit: the
-- largest integer), the claim's per-key token bucket.
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
