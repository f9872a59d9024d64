-- name: insert_event
-- Append one audit or alert event (`at`: the caller's now, NULL for the database's time).
INSERT INTO events (tenant, kind, schedule_id, execution_id, partition, actor, alert, data, at)
VALUES (%(tenant)s, %(kind)s, %(schedule_id)s, %(execution_id)s, %(partition)s, %(actor)s,
        %(alert)s, %(data)s, coalesce(%(at)s::timestamptz, now()))
RETURNING id, at;

-- name: insert_partition_event
-- Append an event written on behalf of a partition owner (fenced).
INSERT INTO events (tenant, kind, schedule_id, execution_id, partition, actor, alert, data)
SELECT %(tenant)s, %(kind)s, %(schedule_id)s, %(execution_id)s, %(partition)s, %(actor)s,
       %(alert)s, %(data)s
 WHERE EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
RETURNING id, at;
