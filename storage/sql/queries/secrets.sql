-- name: secret_put
-- Store a named secret (sealed by the caller), replacing the value of that name (now: NULL, the server's).
INSERT INTO secrets (tenant, name, value, created_at, updated_at)
VALUES (%(tenant)s, %(name)s, %(value)s, coalesce(%(now)s, now()), coalesce(%(now)s, now()))
ON CONFLICT (tenant, name) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;

-- name: secret_get
-- A named secret's stored (sealed) value.
SELECT value AS secret FROM secrets WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: secret_delete
-- Forget a named secret.
DELETE FROM secrets WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: secret_key_ids
-- The keys the named secrets are sealed with ('' : plaintext), with how many each sealed.
SELECT CASE WHEN starts_with(value, %(prefix)s) THEN split_part(substr(value, length(%(prefix)s) + 1), ':', 1)
            ELSE '' END AS key_id,
       count(*) AS n
  FROM secrets GROUP BY 1 ORDER BY 1;

-- name: secrets_to_reseal
-- Up to `limit` named secrets the first key did not seal: plaintext, or an older key's.
SELECT tenant, name, value AS secret FROM secrets
 WHERE NOT starts_with(value, %(sealed_by_primary)s)
 ORDER BY tenant, name LIMIT %(limit)s;

-- name: secret_reseal
-- Store one named secret re-sealed, only while it is still the value read.
UPDATE secrets SET value = %(sealed)s WHERE tenant = %(tenant)s AND name = %(name)s AND value = %(read)s;
