-- 0025_queues_capabilities: queues and worker capabilities (issue 52 items 2 and 3).
--
-- A run names its queue (default 'default') and the capabilities it requires, as one canonical
-- text ('' for none; else 'key=value' items sorted and joined by ','): a worker leases only runs
-- of the queues it names whose required capabilities are all among the ones it advertises.
-- The claim matches them without reading runs no worker can take: it reads the known
-- capability sets (capability_sets, one row per distinct set ever required, not per run), keeps
-- those the worker has, and probes executions_queued_by_lane once per (tenant, queue, set,
-- priority) it may take: a run in any other lane is never read.
ALTER TABLE executions ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS required_capabilities text NOT NULL DEFAULT '';
-- A schedule's runs get its queue and required capabilities when they are made.
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default';
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS required_capabilities text NOT NULL DEFAULT '';

-- Every capability set a run may require, registered before the first run requiring it is
-- stored (cluster/commands/lanes.py): `caps` is the same set as an array, for the claim's `<@`.
CREATE TABLE IF NOT EXISTS capability_sets (
    capabilities text PRIMARY KEY,
    caps         text[] NOT NULL
);
INSERT INTO capability_sets (capabilities, caps) VALUES ('', '{}') ON CONFLICT DO NOTHING;

-- A queue's limits per tenant, the shape of the tenant's own: at most max_concurrency of the
-- tenant's runs of the queue run at once (NULL: only the tenant's cap), and `weight` orders the
-- queues of one tenant within a claim (a queue of weight 3 gets three picks for one of weight 1
-- while both have ready runs). No row: no limit, weight 1.
CREATE TABLE IF NOT EXISTS tenant_queues (
    tenant          text NOT NULL,
    queue           text NOT NULL,
    max_concurrency integer CHECK (max_concurrency > 0),
    weight          integer NOT NULL DEFAULT 1 CHECK (weight > 0),
    PRIMARY KEY (tenant, queue)
);

-- The claim's lanes: queued runs per tenant, queue, capability set and priority, oldest first.
-- Replaces executions_queued_by_tenant (tenant, priority, run_at): queued_tenants still walks
-- its leading tenant column.
DROP INDEX IF EXISTS executions_queued_by_tenant;
CREATE INDEX IF NOT EXISTS executions_queued_by_lane ON executions (tenant, queue, required_capabilities, priority, run_at)
    WHERE state = 'queued';
-- Running runs per tenant and queue (the tenant's cap counts its leading column, a queue's
-- limit and a worker's queue slots the pair). Replaces executions_running_by_tenant (tenant).
DROP INDEX IF EXISTS executions_running_by_tenant;
CREATE INDEX IF NOT EXISTS executions_running_by_queue ON executions (tenant, queue)
    WHERE state = 'running';

-- The (queue, capability set) lanes a worker may take from: its queues times the known sets it
-- has every capability of. Read by the claim and claim_wait (storage/sql/queries/dispatch.sql),
-- so the two agree on what a worker can run. Inlined by the planner (one SELECT, SQL, STABLE).
CREATE OR REPLACE FUNCTION cronwheel_claim_lanes(queues text[], have text[])
RETURNS TABLE (queue text, caps text)
LANGUAGE sql STABLE AS $$
    SELECT q.queue, c.capabilities FROM unnest(queues) AS q(queue) CROSS JOIN capability_sets c
     WHERE c.caps <@ have
$$;
