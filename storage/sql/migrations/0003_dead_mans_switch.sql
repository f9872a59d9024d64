-- 0003_dead_mans_switch: when a schedule's "no success within" alert was raised (NULL: not
-- raised since its last success). Cleared by the next success.
ALTER TABLE schedules ADD COLUMN success_alert_at timestamptz;
