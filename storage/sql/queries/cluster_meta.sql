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
-- PostgreSQL < 17: end the sessions whose transaction outlived the limit tagged in their application_name
-- (SessionLimits), and count the tagged sessions this one cannot police. One row: the pids ended, the count.
-- Policed: PostgreSQL's own checks (measured on 15 and 18). Another role's session shows its application_name to
-- anyone but its xact_start only to a holder of that role's privileges or of pg_read_all_stats; pg_terminate_backend
-- needs that role's privileges or pg_signal_backend, and a superuser's session a superuser (else an ERROR, failing
-- the whole statement). pg_has_role 'USAGE' is the server's has_privs_of_role ('MEMBER' also holds for a grant
-- WITH INHERIT FALSE or a NOINHERIT role, which gives none of the role's privileges).
WITH tagged AS MATERIALIZED (
    SELECT a.pid, a.xact_start, l.limit_ms,
           coalesce((pg_has_role(a.usesysid, 'USAGE')
                     OR (pg_has_role('pg_read_all_stats', 'USAGE') AND pg_has_role('pg_signal_backend', 'USAGE')))
                    AND (NOT r.rolsuper OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)),
                    false) AS policed
    FROM pg_stat_activity a
    CROSS JOIN LATERAL (SELECT substring(a.application_name FROM %(pattern)s)::bigint AS limit_ms) l
    LEFT JOIN pg_roles r ON r.oid = a.usesysid
    WHERE a.pid <> pg_backend_pid()
      AND l.limit_ms IS NOT NULL
), overrun AS MATERIALIZED (  -- pg_terminate_backend in the select list: called only for the rows the WHERE kept
    SELECT pid, pg_terminate_backend(pid) AS ended
    FROM tagged
    WHERE policed
      AND xact_start < clock_timestamp() - limit_ms * interval '1 millisecond'
)
SELECT ARRAY(SELECT pid FROM overrun WHERE ended ORDER BY pid) AS ended,
       (SELECT count(*) FROM tagged WHERE NOT policed) AS unpoliced;

-- name: database_ts
-- PostgreSQL's wall clock as Unix seconds, read when the statement runs: each node measures its
-- own clock against it (cluster/coordination/clock_skew.py).
SELECT extract(epoch FROM clock_timestamp())::float8;
