-- 0012_schedule_listing_indexes: an admin's schedule list across tenants (the console's
-- Schedules page, `ListSchedules` without a tenant) pages in creation order or by name. The
-- schema indexed schedules only per tenant, so every such page sorted every live schedule
-- (139-258 ms a page at 100k schedules in bench.console; 12-23 ms with these). Partial: deleted
-- schedules are never listed. IF NOT EXISTS: on a large table an operator builds them first with
-- CREATE INDEX CONCURRENTLY (docs/operating.md).
CREATE INDEX IF NOT EXISTS schedules_live_by_created ON schedules (created_at, id) WHERE deleted_at IS NULL;
CREATE INDEX IF NOT EXISTS schedules_live_by_name ON schedules (name, id) WHERE deleted_at IS NULL;
