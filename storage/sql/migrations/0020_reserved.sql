-- 0020_reserved: a placeholder on branch h48secrets, whose migration is 0021 while 0020 belongs
-- to another branch of issue 48 (migrations must be 1..N without gaps). It changes nothing.
-- When merging: if another branch brings its own 0020, delete this file.
SELECT 1;
