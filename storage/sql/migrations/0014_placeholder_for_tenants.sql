-- 0014_placeholder_for_tenants: empty. Migration 0014 belongs to the tenants work of issue 18;
-- this placeholder only keeps the versions gapless on a branch without it (migrate.py refuses
-- gaps). Delete it when the real 0014 is merged (0015 does not depend on it).
SELECT 1;
