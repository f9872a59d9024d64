-- name: ensure_partitions
-- Create the P partition rows if they do not exist yet (idempotent).
INSERT INTO partitions (id)
SELECT g FROM generate_series(0, %(count)s - 1) AS g
ON CONFLICT (id) DO NOTHING;

-- name: record_epoch
-- Take the fencing record for a partition: succeeds only with a strictly greater epoch.
-- Conflicts with check_fence's FOR SHARE lock, so it waits for in-flight fenced writes.
UPDATE partitions
   SET epoch = %(epoch)s, owner = %(owner)s, acquired_at = now()
 WHERE id = %(partition)s AND epoch < %(epoch)s
RETURNING id, epoch;

-- name: check_fence
-- First statement of every fenced transaction: lock the partition row in share mode and
-- return it only while it still carries our epoch. Held until commit.
SELECT epoch FROM partitions
 WHERE id = %(partition)s AND epoch = %(epoch)s
   FOR SHARE;

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
