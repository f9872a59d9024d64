-- 0006_alerting_index: the reaper's dead man's switch runs every second for every owned
-- partition; with no index it read every schedule of the partition (a sequential scan of the
-- whole table once the due index moved to schedule_due). Only schedules with an alert window
-- are indexed, and no column a success or an alert updates is in the index, so those updates
-- stay HOT.
CREATE INDEX schedules_alerting ON schedules (partition) WHERE alert_if_no_success_within_s IS NOT NULL;
