-- 0014_reserved_for_tenants: a placeholder in the unique-jobs worktree only (migration versions must be 1..N
-- without gaps). The lead replaces it with the other branch's migration of this number at merge.
SELECT 1;
