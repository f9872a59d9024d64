-- 0016_tenant_api_tokens: tenants are set through the API (TenantService) and bearer tokens
-- live in the database as well as in the auth file.
--
-- tenants.rate_per_s: NULL means "no rate limit" (was NOT NULL DEFAULT 10000, a limit no query
-- read); rows still at that old default become NULL. tenants.burst: the token bucket's size,
-- NULL = one second's worth (rate_per_s); the claim enforces both (0017).
ALTER TABLE tenants ALTER COLUMN rate_per_s DROP NOT NULL;
ALTER TABLE tenants ALTER COLUMN rate_per_s DROP DEFAULT;
UPDATE tenants SET rate_per_s = NULL WHERE rate_per_s = 10000;
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS burst double precision CHECK (burst > 0);

-- tokens: API-made bearer tokens, stored as the SHA-256 of the secret (hex). Every node keeps
-- the live ones in memory and re-reads them every second (cluster/api/tokens.py).
CREATE TABLE IF NOT EXISTS tokens (
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
CREATE INDEX IF NOT EXISTS tokens_by_tenant ON tokens (tenant, id);

-- The daily execution quota's room: for each of `tenants` that has a max_executions_per_day, the
-- quota and how many more executions it may create on the UTC day of `at` (negative: over). The
-- one definition of "used today" for the fire path's quota skips (fire_ticks_fenced,
-- fire_executions, storage/sql/queries/executions.sql); the submit path counts the same rows
-- (api_used_today) under its per-group advisory lock.
CREATE OR REPLACE FUNCTION cronwheel_daily_room(tenants text[], at timestamptz)
RETURNS TABLE (tenant text, quota integer, room bigint)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.max_executions_per_day,
           t.max_executions_per_day - (SELECT count(*) FROM executions e
                                        WHERE e.tenant = t.id AND e.created_at >= date_trunc('day', at, 'UTC'))
      FROM tenants t
     WHERE t.id = ANY (tenants) AND t.max_executions_per_day IS NOT NULL
$$;
