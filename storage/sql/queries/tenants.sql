-- Queries of the tenant API (TenantService): a tenant's limits and quotas. Not fenced (the API
-- writes on behalf of an admin, not of a partition owner).

-- name: tenant_insert
-- Create a tenant (AlreadyExists on tenants_pkey when it has a row).
INSERT INTO tenants (id, max_concurrency, rate_per_s, burst, weight, max_schedules, max_executions_per_day,
                     created_at, egress_rules)
VALUES (%(id)s, %(max_concurrency)s, %(rate_per_s)s, %(burst)s, %(weight)s, %(max_schedules)s,
        %(max_executions_per_day)s, %(now)s, %(egress_rules)s)
RETURNING id, max_concurrency, rate_per_s, burst, weight, max_schedules, max_executions_per_day, created_at, egress_rules;

-- name: tenant_get
-- One tenant's row.
SELECT id, max_concurrency, rate_per_s, burst, weight, max_schedules, max_executions_per_day, created_at, egress_rules
  FROM tenants WHERE id = %(id)s;

-- name: tenant_lock
-- One tenant's row, row-locked until the end of the transaction (an update reads, checks, writes).
SELECT id, max_concurrency, rate_per_s, burst, weight, max_schedules, max_executions_per_day, created_at, egress_rules
  FROM tenants WHERE id = %(id)s FOR UPDATE;

-- name: tenant_write
-- Write every settable field of a tenant.
UPDATE tenants
   SET max_concurrency = %(max_concurrency)s, rate_per_s = %(rate_per_s)s, burst = %(burst)s,
       weight = %(weight)s, max_schedules = %(max_schedules)s,
       max_executions_per_day = %(max_executions_per_day)s, egress_rules = %(egress_rules)s
 WHERE id = %(id)s
RETURNING id, max_concurrency, rate_per_s, burst, weight, max_schedules, max_executions_per_day, created_at, egress_rules;

-- name: tenant_list
-- A page of tenants by ascending id after `after`.
SELECT id, max_concurrency, rate_per_s, burst, weight, max_schedules, max_executions_per_day, created_at, egress_rules
  FROM tenants
 WHERE (%(after)s::text IS NULL OR id > %(after)s)
 ORDER BY id LIMIT %(limit)s;

-- name: tenant_queue_set
-- Set a queue's limits for a tenant (migration 0025, tenant_queues): at most max_concurrency of
-- its runs of the queue at once (NULL: none but the tenant's), `weight` among its queues. Answers
-- the values before (`old`: NULL when the queue had none set), for the audit event.
WITH old AS (
    SELECT max_concurrency, weight FROM tenant_queues WHERE tenant = %(tenant)s AND queue = %(queue)s FOR UPDATE
)
INSERT INTO tenant_queues AS x (tenant, queue, max_concurrency, weight)
VALUES (%(tenant)s, %(queue)s, %(max_concurrency)s, %(weight)s)
ON CONFLICT (tenant, queue) DO UPDATE SET max_concurrency = EXCLUDED.max_concurrency, weight = EXCLUDED.weight
RETURNING x.queue, x.max_concurrency, x.weight, (SELECT to_jsonb(old) FROM old) AS old;

-- name: tenant_queues
-- A tenant's queues with limits set, by name.
SELECT queue, max_concurrency, weight FROM tenant_queues WHERE tenant = %(tenant)s ORDER BY queue;
