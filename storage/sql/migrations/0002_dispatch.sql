-- 0002_dispatch: indexes for fair claiming and tenant caps.
-- Tenants with queued work are found by a loose index scan over this index, then each
-- tenant's oldest work of a priority is read from it.
CREATE INDEX executions_queued_by_tenant ON executions (tenant, priority, run_at)
    WHERE state = 'queued';
-- Running work per tenant (concurrency caps).
CREATE INDEX executions_running_by_tenant ON executions (tenant)
    WHERE state = 'running';
-- Buffered cron runs (overlap buffer_*) waiting for the run ahead of them.
CREATE INDEX executions_buffered ON executions (schedule_id, scheduled_for)
    WHERE state = 'scheduled' AND state_reason = 'buffered';
