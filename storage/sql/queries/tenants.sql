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
