-- 0008_queued_tenants_view: the tenants that have queued work, by a loose index scan of
-- executions_queued_by_tenant (one index probe per tenant, however many runs are queued).
-- Both statements of a claim start from it.
CREATE VIEW queued_tenants AS
WITH RECURSIVE tq(tenant) AS (
    (SELECT tenant FROM executions WHERE state = 'queued' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant FROM executions e
             WHERE e.state = 'queued' AND e.tenant > tq.tenant ORDER BY e.tenant LIMIT 1)
      FROM tq WHERE tq.tenant IS NOT NULL
)
SELECT tenant FROM tq WHERE tenant IS NOT NULL;
