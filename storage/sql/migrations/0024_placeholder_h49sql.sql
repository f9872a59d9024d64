-- 0024_placeholder_h49sql: empty. Migration 0024 belongs to a branch worked on in parallel with
-- issue 49's SQL rules (0027); this placeholder only keeps the versions gapless on a branch without
-- it (migrate.py refuses gaps). Delete it when the real 0024 is merged (0027 does not depend on it).
SELECT 1;
