-- Queries of the token API (TenantService) and of every node's token cache. Not fenced. The
-- secret is never stored: `sha256` is the hex SHA-256 of it.

-- name: token_insert
-- Create a token.
INSERT INTO tokens (id, name, tenant, admin, sha256, created_at, created_by, expires_at)
VALUES (%(id)s, %(name)s, %(tenant)s, %(admin)s, %(sha256)s, %(now)s, %(actor)s, %(expires_at)s)
RETURNING id, name, tenant, admin, created_at, created_by, expires_at, revoked_at;

-- name: token_list
-- A page of tokens by ascending id after `after`, of one tenant (NULL: every token), without
-- the revoked ones unless `include_revoked`.
SELECT id, name, tenant, admin, created_at, created_by, expires_at, revoked_at
  FROM tokens
 WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
   AND (%(include_revoked)s::boolean OR revoked_at IS NULL)
   AND (%(after)s::uuid IS NULL OR id > %(after)s)
 ORDER BY id LIMIT %(limit)s;

-- name: token_revoke
-- Revoke a token (the first revocation's time is kept); no row when it does not exist.
UPDATE tokens SET revoked_at = coalesce(revoked_at, %(now)s)
 WHERE id = %(id)s
RETURNING id, name, tenant, admin, created_at, created_by, expires_at, revoked_at;

-- name: token_live
-- Every token not revoked, with its hash (the node's in-memory cache; expiry is checked per call).
SELECT sha256, name, tenant, admin, expires_at FROM tokens WHERE revoked_at IS NULL;
