-- 0007_drop_executions_queued: the claim reads queued work through executions_queued_by_tenant
-- (tenant, priority, run_at); the (priority, run_at) index served nothing else but queue-depth
-- counts, which the other partial index serves as well. Every fire and every requeue paid an
-- index entry for it.
DROP INDEX executions_queued;
