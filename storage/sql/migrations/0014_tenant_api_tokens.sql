-- 0014_tenant_api_tokens: tenants are set through the API (TenantService) and bearer tokens
-- live in the database as well as in the auth file.
--
-- tenants.rate_per_s: NULL means "no rate limit" (was NOT NULL DEFAULT 10000, a limit no query
-- read); rows still at that old default become NULL. tenants.burst: the token bucket's size,
-- NULL = one second's worth (rate_per_s). Idempotent (the limits migration does the same).
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
