-- 0024_reserved: a placeholder on branch h52q, whose migration is 0025 while 0024 belongs to
-- another branch (migrations must be 1..N without gaps). It changes nothing.
-- When merging: if another branch brings its own 0024, delete this file.
SELECT 1;
