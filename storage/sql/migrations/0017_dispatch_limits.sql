-- 0017_dispatch_limits: enforcement at lease time (issue 18 item 3): per-tenant rate limits
-- (token bucket), weighted fair share between tenants, concurrency keys. tenants.rate_per_s
-- (NULL: no limit) and tenants.burst (NULL: one second's worth) are 0016's.

-- What the claim keeps per tenant, written only inside a claim's transaction while it holds
-- the tenant's claim lock (claim_lock_tenants): the token bucket (its level `tokens` as of
-- `refilled_at`; NULL: full) and the fair share (`served`: starts divided by the tenant's
-- weight, decaying exponentially from `served_at`). A row of its own, not columns on tenants,
-- so claims never row-lock what the tenant API updates. No row: a full bucket, nothing served.
CREATE TABLE IF NOT EXISTS tenant_dispatch (
    tenant      text PRIMARY KEY,
    tokens      double precision,
    refilled_at timestamptz,
    served      double precision NOT NULL DEFAULT 0,
    served_at   timestamptz
);

-- The one token-bucket rule (the claim spends, claim_rate_wait reads): the bucket's level at
-- `at`, refilled at `rate` per second from `level` at `refilled_at`, capped at the bucket size
-- (burst, NULL: rate; at least 1, or no run could ever start). NULL rate: no limit (NULL).
-- A clock that went backwards refills nothing.
CREATE OR REPLACE FUNCTION cronwheel_bucket_tokens(rate double precision, burst double precision,
                                                   level double precision, refilled_at timestamptz,
                                                   at timestamptz) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN rate IS NULL THEN NULL
                WHEN level IS NULL OR refilled_at IS NULL THEN GREATEST(coalesce(burst, rate), 1)
                ELSE LEAST(GREATEST(coalesce(burst, rate), 1),
                           level + rate * GREATEST(0, extract(epoch FROM at - refilled_at)::float8)) END
$$;

-- Concurrency keys: at most concurrency_limit runs of the tenant with this key run at once.
-- Both NULL or both set (the API checks it; so does this constraint).
ALTER TABLE executions ADD COLUMN IF NOT EXISTS concurrency_key text;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS concurrency_limit integer;
ALTER TABLE executions ADD CONSTRAINT executions_concurrency_key_limit
    CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL) AND (concurrency_limit IS NULL OR concurrency_limit >= 1));
-- Running runs per (tenant, key): what the claim counts for each keyed candidate.
CREATE INDEX IF NOT EXISTS executions_running_by_key ON executions (tenant, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
