-- name: webhook_lock_owner
-- Serialize the creations of one owner's webhooks (a tenant, or '' for the cluster's own), so
-- that the cap below counts what is committed.
SELECT pg_advisory_xact_lock(hashtextextended('cronwheel.webhooks:' || coalesce(%(tenant)s::text, ''), 0));

-- name: webhook_insert
-- Create a webhook subscription, unless its owner (tenant, or NULL: the cluster's own) already
-- has `cap` of them: no row then.
INSERT INTO webhooks (id, tenant, url, secret, kinds, schedule_id, description, created_at, created_by)
SELECT %(id)s, %(tenant)s, %(url)s, %(secret)s, %(kinds)s, %(schedule_id)s, %(description)s, %(now)s, %(actor)s
 WHERE (SELECT count(*) FROM webhooks WHERE tenant IS NOT DISTINCT FROM %(tenant)s::text) < %(cap)s
RETURNING id, tenant, url, kinds, schedule_id, description, created_at, created_by;

-- name: webhook_get
-- One webhook (the caller checks the tenant), without its secret.
SELECT id, tenant, url, kinds, schedule_id, description, created_at, created_by
  FROM webhooks WHERE id = %(id)s;

-- name: webhook_list
-- A page of webhooks by ascending id after `after`, of one tenant (NULL: every webhook).
SELECT id, tenant, url, kinds, schedule_id, description, created_at, created_by
  FROM webhooks
 WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
   AND (%(after)s::uuid IS NULL OR id > %(after)s)
 ORDER BY id LIMIT %(limit)s;

-- name: webhook_delete
-- Delete a webhook and (cascade) its deliveries; returns the pending ones dropped.
WITH d AS (SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = %(id)s AND state = 'pending')
DELETE FROM webhooks WHERE id = %(id)s RETURNING (SELECT n FROM d);

-- name: fan_out_events
-- The webhook outbox (0022): take up to `limit` events not yet fanned out (oldest first; rows
-- another sender is fanning out are skipped), clear their flag and, in the same statement, add
-- one pending delivery per webhook that subscribes to the event's kind, tenant (the event's,
-- else its schedule's) and schedule. Returns (events taken, deliveries added).
WITH taken AS (
    UPDATE events e SET webhooks_pending = false
     WHERE e.id IN (SELECT id FROM events WHERE webhooks_pending ORDER BY id LIMIT %(limit)s
                       FOR UPDATE SKIP LOCKED)
    RETURNING e.id, e.at, e.kind, e.tenant, e.schedule_id
), added AS (
    INSERT INTO webhook_deliveries (id, webhook_id, event_id, state, attempts, next_attempt_at, created_at)
    SELECT gen_random_uuid(), w.id, e.id, 'pending', 0, e.at, e.at
      FROM taken e
      LEFT JOIN schedules s ON s.id = e.schedule_id
      JOIN webhooks w ON e.kind = ANY (w.kinds)
                     AND (w.tenant IS NULL OR w.tenant = coalesce(e.tenant, s.tenant))
                     AND (w.schedule_id IS NULL OR w.schedule_id = e.schedule_id)
    RETURNING 1
)
SELECT (SELECT count(*) FROM taken) AS events, (SELECT count(*) FROM added) AS deliveries;

-- name: claim_deliveries
-- A sender claims up to `limit` due deliveries, shared fairly between owners (a webhook's tenant,
-- '' for the cluster's own): round-robin, every owner's oldest due first, then every owner's
-- second, ..., and no owner past `per_owner` in flight on this sender (`busy_*`: what it has in
-- flight now). The ranking looks at the oldest `scan` due rows. A claim adds one to attempts (the
-- claim's token) and moves the row past a lease: due again only when the lease lapses. Returns
-- what the request needs. Rows another sender holds are skipped, not waited for.
WITH due AS (
    SELECT d.id, d.next_attempt_at, coalesce(w.tenant, '') AS owner
      FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
     WHERE d.state = 'pending' AND d.next_attempt_at <= %(now)s
     ORDER BY d.next_attempt_at LIMIT %(scan)s
), ranked AS (
    SELECT due.id, due.next_attempt_at,
           row_number() OVER (PARTITION BY due.owner ORDER BY due.next_attempt_at, due.id)
             + coalesce(b.n, 0) AS turn
      FROM due
      LEFT JOIN unnest(%(busy_owners)s::text[], %(busy_counts)s::int[]) AS b(owner, n) ON b.owner = due.owner
), fair AS (
    SELECT id FROM ranked WHERE turn <= %(per_owner)s ORDER BY turn, next_attempt_at LIMIT %(limit)s
), claimed AS (
    SELECT d.id, d.webhook_id, d.event_id FROM webhook_deliveries d
     WHERE d.id IN (SELECT id FROM fair) AND d.state = 'pending' AND d.next_attempt_at <= %(now)s
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1, claimed_by = %(node)s,
       next_attempt_at = %(now)s::timestamptz + make_interval(secs => %(lease_s)s)
  FROM claimed
  JOIN webhooks w ON w.id = claimed.webhook_id
  LEFT JOIN events e ON e.id = claimed.event_id
  LEFT JOIN schedules s ON s.id = e.schedule_id
 WHERE d.id = claimed.id
RETURNING d.id, d.attempts, d.created_at, w.id AS webhook_id, coalesce(w.tenant, '') AS owner, w.url, w.secret,
          e.id AS event_id, e.at, coalesce(e.tenant, s.tenant) AS tenant, e.kind, e.schedule_id,
          s.name AS schedule_name, e.execution_id, e.partition, e.actor, e.alert, e.data;

-- name: delivery_outcome
-- Record the outcome of the claim `attempts` (ignored when the row was claimed again since, or
-- is no longer pending): pending again at `next_attempt_at`, delivered, or failed (given up).
UPDATE webhook_deliveries
   SET state = %(state)s, next_attempt_at = coalesce(%(next_attempt_at)s, next_attempt_at),
       last_status = %(status)s, last_error = %(error)s,
       finished_at = CASE WHEN %(state)s = 'pending' THEN NULL ELSE %(now)s::timestamptz END
 WHERE id = %(id)s AND attempts = %(attempts)s AND state = 'pending';

-- name: delivery_list
-- A page of deliveries, newest first (by created_at, id) before the cursor, with their event's
-- kind; of one webhook, one event, one state, one tenant (NULL: any).
SELECT d.id, d.webhook_id, d.event_id, e.kind, d.state, d.attempts, d.next_attempt_at, d.claimed_by,
       d.last_status, d.last_error, d.created_at, d.finished_at
  FROM webhook_deliveries d
  JOIN webhooks w ON w.id = d.webhook_id
  LEFT JOIN events e ON e.id = d.event_id
 WHERE (%(tenant)s::text IS NULL OR w.tenant = %(tenant)s)
   AND (%(webhook_id)s::uuid IS NULL OR d.webhook_id = %(webhook_id)s)
   AND (%(event_id)s::bigint IS NULL OR d.event_id = %(event_id)s)
   AND (%(state)s::text IS NULL OR d.state = %(state)s)
   AND (%(before_at)s::timestamptz IS NULL OR (d.created_at, d.id) < (%(before_at)s, %(before_id)s::uuid))
 ORDER BY d.created_at DESC, d.id DESC LIMIT %(limit)s;

-- name: delivery_prune
-- Retention: drop up to `limit` finished deliveries older than the retention period.
DELETE FROM webhook_deliveries WHERE id IN (
    SELECT id FROM webhook_deliveries
     WHERE state <> 'pending' AND finished_at < %(now)s::timestamptz - make_interval(days => %(days)s)
     LIMIT %(limit)s);

-- name: webhook_secret_key_ids
-- The keys the stored webhook secrets are sealed with ('' : plaintext), with how many each sealed.
SELECT CASE WHEN starts_with(secret, %(prefix)s) THEN split_part(substr(secret, length(%(prefix)s) + 1), ':', 1)
            ELSE '' END AS key_id,
       count(*) AS n
  FROM webhooks GROUP BY 1 ORDER BY 1;

-- name: webhook_secrets_to_reseal
-- Up to `limit` webhook secrets the first key did not seal: plaintext, or an older key's.
SELECT id, secret FROM webhooks
 WHERE NOT starts_with(secret, %(sealed_by_primary)s)
 ORDER BY id LIMIT %(limit)s;

-- name: webhook_secret_reseal
-- Store one webhook secret re-sealed, only while it is still the value read: of several nodes
-- starting at once, one re-seals each secret and the others change nothing.
UPDATE webhooks SET secret = %(sealed)s WHERE id = %(id)s AND secret = %(read)s;
