-- name: ensure_partitions
-- Create the P partition rows if they do not exist yet (idempotent).
INSERT INTO partitions (id)
SELECT g FROM generate_series(0, %(count)s - 1) AS g
ON CONFLICT (id) DO NOTHING;

-- name: record_epoch
-- Take the fencing record for a partition: succeeds only with a strictly greater epoch.
-- Conflicts with the fence's FOR SHARE lock (cronwheel_fence), so it waits for in-flight fenced writes.
UPDATE partitions
   SET epoch = %(epoch)s, owner = %(owner)s, acquired_at = now()
 WHERE id = %(partition)s AND epoch < %(epoch)s
RETURNING id, epoch;

-- name: check_fence
-- First statement of every fenced transaction: lock the partition row in share mode and
-- return it only while it still carries our epoch (cronwheel_fence). Held until commit.
SELECT epoch FROM cronwheel_fence(%(partition)s, %(epoch)s);

-- name: current_epoch
-- The epoch and owner recorded for a partition (diagnostics and StaleEpoch messages).
SELECT epoch, owner FROM partitions WHERE id = %(partition)s;

-- name: list_partitions
-- Every partition with its recorded epoch and owner.
SELECT id, epoch, owner, acquired_at FROM partitions ORDER BY id;

-- name: record_partition_history
-- Append an ownership change (acquired, released, lost) to the history.
INSERT INTO partition_history (partition, epoch, owner, kind)
VALUES (%(partition)s, %(epoch)s, %(owner)s, %(kind)s);

-- name: lock_unowned_report
-- First statement of a partition_unowned report: reports of the same partition (from every node
-- that saw the gap) run one after another, so the check below sees the one written before.
SELECT pg_advisory_xact_lock(hashtext('cronwheel.unowned'), %(partition)s);

-- name: insert_unowned_event
-- The alert "partition has no owner" once per gap: a gap is identified by the partition's last
-- recorded epoch (a new owner records a greater one, so the next gap is a new one). Nothing
-- when this gap was already reported.
INSERT INTO events (tenant, kind, partition, actor, alert, data, at)
SELECT NULL, 'partition_unowned', p.id, %(actor)s, true,
       jsonb_build_object('epoch', p.epoch, 'last_owner', p.owner, 'unowned_for_s', %(unowned_for_s)s::float8,
                          'threshold_s', %(threshold_s)s::float8),
       %(at)s
  FROM partitions p
 WHERE p.id = %(partition)s
   AND NOT EXISTS (SELECT 1 FROM events e
                    WHERE e.kind = 'partition_unowned' AND e.partition = p.id
                      AND (e.data ->> 'epoch')::bigint = p.epoch)
RETURNING id;
