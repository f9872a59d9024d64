-- 0010_reserved: a placeholder so that 0011 applies on this branch (migrate.py refuses gaps).
-- Migration 0010 belongs to the retention work; when it is merged, this file is replaced by it.
SELECT 1;
