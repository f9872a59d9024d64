-- name: get_meta
-- One cluster-wide setting.
SELECT value FROM cluster_meta WHERE key = %(key)s;

-- name: put_meta_if_absent
-- Set a cluster-wide setting unless it is already set; returns the stored value.
WITH ins AS (
    INSERT INTO cluster_meta (key, value) VALUES (%(key)s, %(value)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING value
)
SELECT value FROM ins
UNION ALL
SELECT value FROM cluster_meta WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM ins);
