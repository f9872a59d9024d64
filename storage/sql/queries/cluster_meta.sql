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

-- name: end_overrun_transactions
-- PostgreSQL < 17: end the sessions whose transaction outlived the limit tagged in their application_name (SessionLimits).
SELECT a.pid, pg_terminate_backend(a.pid) AS ended
FROM pg_stat_activity a
CROSS JOIN LATERAL (SELECT substring(a.application_name FROM %(pattern)s)::bigint AS limit_ms) l
WHERE a.pid <> pg_backend_pid()
  AND a.xact_start IS NOT NULL
  AND l.limit_ms IS NOT NULL
  AND a.xact_start < clock_timestamp() - l.limit_ms * interval '1 millisecond'
  AND (pg_has_role(a.usesysid, 'MEMBER') OR pg_has_role('pg_signal_backend', 'MEMBER'));
