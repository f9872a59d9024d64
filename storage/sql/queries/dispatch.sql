-- name: claim_lock_tenants
-- First statement of a claim's transaction: lock (transaction-scoped, in tenant order, so no two
-- claimers can deadlock) every tenant with queued work that the claim may take from, and record
-- them in the transaction's setting `cronwheel.claim_tenants` (a text[] literal): the `claim`
-- that follows takes from these tenants only (one that got queued work after this read waits for
-- the next claim). The claim reads the tenants there, not from this statement's answer, so a
-- busy node sends it right behind this statement, in the same round trip (with the answer read
-- in between, a claim took two: 1.5-7 ms of a 250-run claim's 17 ms in a 1,000-run herd went to
-- the first; an idle node still reads it first, see Dispatcher._claim_once). Claims for the same
-- tenant then run one after another, and the `claim` statement takes its snapshot after the
-- previous claim committed: its counts of running work, its buckets and fair-share counts are
-- exact across nodes. JIT is off on the claim connection as on every node connection
-- (storage/db.py SESSION_SETTINGS: on a large backlog the claim's estimated cost passed
-- jit_above_cost and compiling took 120-140 ms of a 2-10 ms statement). The claim connection
-- plans the claim once, not per call, with sequential scans priced out (storage/db.py
-- CLAIM_SESSION_SETTINGS): a plan kept by the connection was made for the table as it was then,
-- and made on an empty table with sequential scans allowed it read the whole queue once per
-- leased run (stop 29: 650 ms for 250 runs out of 20,000 queued).
-- A worker with queue slots (`slot_worker`, else NULL) is locked first, the same way: its
-- claims, on any node and for any tenant, then run one after another, so the claim's count of
-- the runs it holds per queue is exact (a lock per transaction, always before the tenants': no
-- deadlock).
WITH w AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtext('cronwheel.worker'), hashtext(%(slot_worker)s::text))
     WHERE %(slot_worker)s::text IS NOT NULL
)
SELECT set_config('cronwheel.claim_tenants', coalesce(array_agg(l.tenant), '{}')::text, true)
  FROM (SELECT t.tenant, pg_advisory_xact_lock(hashtext('cronwheel.claim'), hashtext(t.tenant))::text
          FROM (SELECT tenant FROM queued_tenants
                 WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s) AND (SELECT count(*) FROM w) >= 0
                 ORDER BY tenant) t) l;

-- name: queued_tenant_names
-- The tenants with queued work (a loose index scan, no lock): read for a wake of waiting calls
-- whose last claim found no queued work for their tenants (Dispatcher.wake), one read for all of
-- them instead of a claim each ahead of the calls that have work.
SELECT tenant FROM queued_tenants;

-- name: claim
-- Lease up to `limit` queued runs (past the first, only while their payloads and checkpoints
-- add up to at most `max_bytes`; NULL: no cap) in one statement, after `claim_lock_tenants`
-- (so every count and bucket read here is exact: no other claim of these tenants is in flight). Per tenant it
-- locked (`locked`: the transaction's `cronwheel.claim_tenants`; none when it is not set, so a
-- claim sent without its lock statement takes nothing):
--   cap    = min(free concurrency, whole tokens in its bucket): the token bucket
--            (cronwheel_bucket_tokens, refilled from the claim's `now`) is spent below, in this
--            statement, so a claim takes at most floor(tokens) runs of a rate-limited tenant;
--   served = its starts divided by its weight, decayed by exp(-age / fair_tau_s): the fair share.
-- Per tenant and priority, the oldest ready runs are read (no row lock: no other claim takes
-- from these tenants now; a run changed since, e.g. cancelled, is left out by the UPDATE's
-- `state = 'queued'`, re-checked on the row's latest version); a keyed run whose key already has
-- concurrency_limit runs running is passed over in that scan (so a full key does not hide the
-- tenant's other runs), and within the claim a key takes at most its free slots; likewise a
-- rate-limited key (0023, an HTTP target's rate_per_s: key_rate_per_s) whose bucket in
-- key_dispatch holds no whole token is passed over, takes at most its whole tokens, and spends
-- them below (key_spent). The pick goes by the given priority order (the caller draws it by weight), then by
-- weighted fair queueing within a priority: the k-th run of a tenant is tagged
-- served + (k - 1) / weight and the smallest tags go first, so backlogged tenants' starts
-- converge to their weights' ratio. The tenants' buckets and counts are written in the same
-- statement, from the runs actually leased. Leasing is one more attempt, a new fencing token and
-- a lease deadline; only the leased rows are locked. The UPDATE finds the picked runs by primary
-- key (`id = ANY`; `(e.state || '')` keeps the queued index out, as in complete_batch): joined to
-- them, with statistics saying the table is mostly queue, PostgreSQL hashed every queued run
-- (4.7 ms of a 9.1 ms claim of 250 out of 20,000 queued). Ids, payloads and checkpoints come
-- back as text and times as epoch seconds: the caller only forwards them.
-- Queues and capabilities (0025): runs are read per lane (cronwheel_claim_lanes: the worker's
-- `queues` times the capability sets its `capabilities` cover), one probe of
-- executions_queued_by_lane per (tenant, lane, priority), so runs no worker of this call can
-- take are never read. A tenant's queue with a limit (tenant_queues.max_concurrency) takes at
-- most its free slots, and a queue the worker holds slots for (`slot_queues`, `slot_counts`)
-- at most the worker's free ones (its runs of the queue counted under its lock, see
-- claim_lock_tenants); within a tenant and priority, queues go by weighted fair queueing
-- (tenant_queues.weight), the k-th run of a queue tagged (k - 1) / weight.
WITH locked AS MATERIALIZED (
    SELECT coalesce(nullif(current_setting('cronwheel.claim_tenants', true), ''), '{}')::text[] AS tenants
), lanes AS MATERIALIZED (
    SELECT queue, caps FROM cronwheel_claim_lanes(%(queues)s::text[], %(capabilities)s::text[])
), qroom AS MATERIALIZED (  -- per locked tenant and queue of the worker: free slots (NULL: no limit), weight
    SELECT tq.tenant, q.queue, coalesce(x.weight, 1)::float8 AS qweight,
           CASE WHEN x.max_concurrency IS NOT NULL THEN x.max_concurrency
                - (SELECT count(*) FROM executions r
                    WHERE r.tenant = tq.tenant AND r.queue = q.queue AND r.state = 'running') END AS free
      FROM unnest((SELECT tenants FROM locked)) AS tq(tenant)
     CROSS JOIN unnest(%(queues)s::text[]) AS q(queue)
      LEFT JOIN tenant_queues x ON x.tenant = tq.tenant AND x.queue = q.queue
), wslots AS MATERIALIZED (  -- the worker's free slots per queue it caps (its runs of every tenant it may take from)
    SELECT s.queue, s.n - (SELECT count(*) FROM executions r
                            WHERE r.queue = s.queue AND r.state = 'running' AND r.lease_owner = %(worker)s
                              AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s)) AS free
      FROM unnest(%(slot_queues)s::text[], %(slot_counts)s::int[]) AS s(queue, n)
), room AS MATERIALIZED (  -- counted once per tenant (inlined, the count ran once per candidate)
    SELECT tq.tenant,
           coalesce(t.max_concurrency, 1000)
             - (SELECT count(*) FROM executions r WHERE r.tenant = tq.tenant AND r.state = 'running') AS free,
           coalesce(t.weight, 1)::float8 AS weight,
           cronwheel_bucket_tokens(t.rate_per_s, t.burst, d.tokens, d.refilled_at, %(now)s) AS tokens,
           coalesce(d.served * exp(-GREATEST(0, extract(epoch FROM %(now)s - d.served_at)::float8)
                                   / %(fair_tau_s)s::float8), 0) AS served
      FROM unnest((SELECT tenants FROM locked)) AS tq(tenant)
      LEFT JOIN tenants t ON t.id = tq.tenant
      LEFT JOIN tenant_dispatch d ON d.tenant = tq.tenant
), key_running AS MATERIALIZED (  -- running runs per concurrency key of the locked tenants, counted once
    SELECT k.tenant, k.concurrency_key AS ckey, count(*) AS n FROM executions k
     WHERE k.tenant = ANY((SELECT tenants FROM locked)::text[]) AND k.state = 'running' AND k.concurrency_key IS NOT NULL
     GROUP BY k.tenant, k.concurrency_key
), elig AS MATERIALIZED (
    SELECT tenant, weight, tokens, served,
           LEAST(free, coalesce(floor(tokens + 1e-9)::bigint, free)) AS cap
      FROM room
), virt AS (  -- the tags each tenant's runs would get if it had enough ready work
    SELECT elig.tenant, elig.served + (k - 1) / elig.weight AS tag
      FROM elig CROSS JOIN LATERAL generate_series(1, LEAST(elig.cap, 2 * %(limit)s)) AS k
     WHERE elig.cap > 0
), quota AS MATERIALIZED (  -- how many of its runs of a priority after the first each tenant
    -- reads: its place among the smallest 2 * limit tags, and at least its weight's part of
    -- `limit` (so a tenant with nothing of these types cannot take the whole read), never more
    -- than its cap or `limit`. The first priority (drawn by weight) is read in full, so its runs
    -- of every tenant go before any of the next.
    SELECT elig.tenant, elig.cap, elig.weight, elig.served,
           LEAST(elig.cap, %(limit)s,
                 GREATEST(coalesce(v.n, 0), ceil(%(limit)s * elig.weight / w.total)::bigint)) AS q
      FROM elig
     CROSS JOIN (SELECT sum(weight) AS total FROM elig WHERE cap > 0) w
      LEFT JOIN (SELECT tenant, count(*) AS n
                   FROM (SELECT tenant FROM virt ORDER BY tag, tenant LIMIT 2 * %(limit)s) x
                  GROUP BY tenant) v USING (tenant)
     WHERE elig.cap > 0
), cand AS (
    SELECT c.id, c.run_at, c.ckey, c.klimit, c.krate, c.kburst, c.ktokens, c.bytes, p.rank, elig.tenant, elig.cap,
           elig.weight, elig.served, l.queue, qr.free AS qfree, qr.qweight, ws.free AS wfree
      FROM quota elig
     CROSS JOIN unnest(%(priorities)s::text[]) WITH ORDINALITY AS p(priority, rank)
     CROSS JOIN lanes l
      JOIN qroom qr ON qr.tenant = elig.tenant AND qr.queue = l.queue
      LEFT JOIN wslots ws ON ws.queue = l.queue
     CROSS JOIN LATERAL (
          SELECT e.id, e.run_at, e.concurrency_key AS ckey, e.concurrency_limit AS klimit,
                 e.key_rate_per_s AS krate, e.key_burst AS kburst, kb.tokens AS ktokens,
                 octet_length(e.payload::text) + coalesce(octet_length(e.checkpoint::text), 0)
                   + coalesce(octet_length(e.target::text), 0) AS bytes
            FROM executions e
            LEFT JOIN LATERAL (  -- a rate-limited key's token bucket (0023: HTTP targets' rate_per_s)
                 SELECT coalesce((SELECT cronwheel_bucket_tokens(e.key_rate_per_s, e.key_burst, kd.tokens,
                                                                 kd.refilled_at, %(now)s)
                                    FROM key_dispatch kd WHERE kd.tenant = e.tenant AND kd.ckey = e.concurrency_key),
                                 cronwheel_bucket_tokens(e.key_rate_per_s, e.key_burst, NULL, NULL, %(now)s)) AS tokens
                  WHERE e.key_rate_per_s IS NOT NULL) kb ON true
           WHERE e.tenant = elig.tenant AND e.state = 'queued' AND e.queue = l.queue
             AND e.required_capabilities = l.caps AND e.priority = p.priority
             AND e.run_at <= %(now)s  -- this node's clock: off PostgreSQL's by at most --max-clock-skew,
                                      -- or the node claims nothing (cluster/coordination/clock_skew.py)
             AND (%(types)s::text[] IS NULL OR e.type = ANY(%(types)s::text[]))
             AND (e.concurrency_key IS NULL
                  OR coalesce((SELECT kr.n FROM key_running kr
                                WHERE kr.tenant = e.tenant AND kr.ckey = e.concurrency_key), 0)
                     < e.concurrency_limit)
             AND (e.key_rate_per_s IS NULL OR kb.tokens >= 1 - 1e-9)  -- an empty bucket's runs are passed over
           ORDER BY e.run_at
           LIMIT CASE WHEN qr.free <= 0 OR ws.free <= 0 THEN 0
                      WHEN p.rank = 1 THEN LEAST(elig.cap, %(limit)s) ELSE elig.q END
      ) c
), keyed AS (  -- a key, a tenant's queue and the worker's queue slots take at most their free
    -- slots within this claim too
    SELECT cand.*,
           (ckey IS NULL OR row_number() OVER (PARTITION BY tenant, ckey ORDER BY rank, run_at)
             + coalesce((SELECT kr.n FROM key_running kr WHERE kr.tenant = cand.tenant AND kr.ckey = cand.ckey), 0)
             <= klimit
           AND (krate IS NULL  -- and at most its bucket's whole tokens
                OR row_number() OVER (PARTITION BY tenant, ckey ORDER BY rank, run_at) <= floor(ktokens + 1e-9)))
           AND (qfree IS NULL OR row_number() OVER (PARTITION BY tenant, queue ORDER BY rank, run_at) <= qfree)
           AND (wfree IS NULL OR row_number() OVER (PARTITION BY queue ORDER BY rank, run_at, tenant) <= wfree) AS fits,
           row_number() OVER (PARTITION BY tenant, rank, queue ORDER BY run_at) AS qn
      FROM cand
), fitting AS (
    SELECT id, tenant, rank, cap, weight, served, bytes, ckey, krate, kburst, ktokens,
           row_number() OVER (PARTITION BY tenant ORDER BY rank, (qn - 1) / qweight, run_at) AS rt
      FROM keyed WHERE fits
), picked AS MATERIALIZED (  -- in pick order, and past the first only while the payloads and
    -- checkpoints add up to at most max_bytes (cronwheel.limits.ANSWER_ROWS_BYTES): the answer fits
    SELECT id, tenant, ckey, krate, kburst, ktokens FROM (
        SELECT id, tenant, ckey, krate, kburst, ktokens, row_number() OVER w AS n, sum(bytes) OVER w AS upto
          FROM (SELECT * FROM fitting WHERE rt <= cap
                 ORDER BY rank, served + (rt - 1) / weight, tenant, rt
                 LIMIT %(limit)s) f
        WINDOW w AS (ORDER BY rank, served + (rt - 1) / weight, tenant, rt ROWS UNBOUNDED PRECEDING)
    ) s WHERE n = 1 OR %(max_bytes)s::bigint IS NULL OR upto <= %(max_bytes)s
), leased AS (
    UPDATE executions e
       SET state = 'running', attempt = e.attempt + 1, fencing_token = e.fencing_token + 1,
           lease_owner = %(worker)s, lease_expires = %(now)s + make_interval(secs => %(lease_s)s),
           started_at = %(now)s, heartbeat_at = %(now)s, error = NULL, error_type = NULL
     WHERE e.id = ANY(ARRAY(SELECT id FROM picked)) AND (e.state || '') = 'queued'
    RETURNING e.id::text, e.schedule_id::text, e.tenant, e.type, e.payload::text,
              extract(epoch FROM e.scheduled_for)::float8 AS scheduled_for, extract(epoch FROM e.run_at)::float8 AS run_at,
              e.attempt, e.max_attempts, e.fencing_token, e.checkpoint::text,
              extract(epoch FROM e.lease_expires)::float8 AS lease_expires, e.timeout_s, e.priority, e.trigger,
              extract(epoch FROM e.started_at)::float8 AS started_at, e.trace_context, e.target::text
), key_spent AS (  -- spend the rate-limited keys' tokens, under the same locks (keys are per tenant)
    INSERT INTO key_dispatch AS d (tenant, ckey, tokens, refilled_at, rate_per_s, burst)
    SELECT p.tenant, p.ckey, min(p.ktokens) - count(*), %(now)s, min(p.krate), min(p.kburst)
      FROM picked p JOIN leased l ON l.id = p.id::text
     WHERE p.krate IS NOT NULL
     GROUP BY p.tenant, p.ckey
    ON CONFLICT (tenant, ckey) DO UPDATE
       SET tokens = EXCLUDED.tokens, refilled_at = GREATEST(d.refilled_at, EXCLUDED.refilled_at),
           rate_per_s = EXCLUDED.rate_per_s,
           burst = EXCLUDED.burst
), spent AS (  -- spend the tokens, count the starts: still under the tenants' claim locks
    INSERT INTO tenant_dispatch AS d (tenant, tokens, refilled_at, served, served_at)
    SELECT elig.tenant, elig.tokens - n.n, %(now)s, elig.served + n.n / elig.weight, %(now)s
      FROM (SELECT tenant, count(*) AS n FROM leased GROUP BY tenant) n JOIN elig USING (tenant)
    ON CONFLICT (tenant) DO UPDATE
       SET tokens = EXCLUDED.tokens, refilled_at = GREATEST(d.refilled_at, EXCLUDED.refilled_at),
           served = EXCLUDED.served, served_at = GREATEST(d.served_at, EXCLUDED.served_at)
)
SELECT * FROM leased;

-- name: claim_wait
-- Seconds until queued work of the queued tenants (of `tenant` only, unless NULL) may be
-- claimable that is not now: the soonest rate-limited tenant's next whole token, or the soonest
-- `run_at` of a run queued ahead of it (a delayed one-off job is queued up to
-- FiringConfig.oneoff_ahead_s early; the claim takes a run only from its run_at); NULL when
-- neither. A claim that came back empty waits at most this long before it tries again (instead
-- of the fallback poll). The queued tenants are read once (a loose index scan); the run_at is
-- found per tenant, lane of the worker (as in `claim`) and priority, one probe each of
-- executions_queued_by_lane (`priorities`: every priority), not by reading the queue.
WITH tq AS MATERIALIZED (
    SELECT tenant FROM queued_tenants WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
), lanes AS MATERIALIZED (  -- what the worker may take (as in `claim`)
    SELECT queue, caps FROM cronwheel_claim_lanes(%(queues)s::text[], %(capabilities)s::text[])
)
SELECT LEAST(
    (SELECT min((1 - cronwheel_bucket_tokens(kd.rate_per_s, kd.burst, kd.tokens, kd.refilled_at, %(now)s))
                / kd.rate_per_s)  -- a rate-limited key's next whole token (0023)
       FROM tq JOIN key_dispatch kd ON kd.tenant = tq.tenant
      WHERE cronwheel_bucket_tokens(kd.rate_per_s, kd.burst, kd.tokens, kd.refilled_at, %(now)s) < 1),
    (SELECT min((1 - b.tokens) / b.rate) FROM (
        SELECT t.rate_per_s AS rate,
               cronwheel_bucket_tokens(t.rate_per_s, t.burst, d.tokens, d.refilled_at, %(now)s) AS tokens
          FROM tq
          JOIN tenants t ON t.id = tq.tenant
          LEFT JOIN tenant_dispatch d ON d.tenant = tq.tenant
         WHERE t.rate_per_s IS NOT NULL
    ) b WHERE b.tokens < 1),
    (SELECT extract(epoch FROM min(x.run_at) - %(now)s)::float8
       FROM tq
      CROSS JOIN unnest(%(priorities)s::text[]) AS p(priority)
      CROSS JOIN lanes l
      CROSS JOIN LATERAL (
           SELECT e.run_at FROM executions e
            WHERE e.tenant = tq.tenant AND e.state = 'queued' AND e.queue = l.queue
              AND e.required_capabilities = l.caps AND e.priority = p.priority
              AND e.run_at > %(now)s
            ORDER BY e.run_at LIMIT 1) x));


-- name: heartbeat
-- Extend a lease held with the current token; answers whether cancellation was requested.
UPDATE executions
   SET lease_expires = %(now)s + make_interval(secs => %(lease_s)s), heartbeat_at = %(now)s
 WHERE id = %(id)s AND fencing_token = %(token)s AND lease_owner = %(worker)s AND state = 'running'
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
RETURNING lease_expires, cancel_requested;

-- name: checkpoint
-- Save progress of a run held with the current token.
UPDATE executions
   SET checkpoint = %(checkpoint)s, heartbeat_at = %(now)s
 WHERE id = %(id)s AND fencing_token = %(token)s AND lease_owner = %(worker)s AND state = 'running'
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
RETURNING cancel_requested;

-- name: lock_running
-- Lock a run held with the current token before finishing it.
SELECT id, schedule_id, tenant, partition, attempt, max_attempts, retry_initial_s, retry_multiplier,
       retry_max_s, cancel_requested, state, type
  FROM executions
 WHERE id = %(id)s AND fencing_token = %(token)s AND lease_owner = %(worker)s AND state = 'running'
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
   FOR UPDATE;

-- name: finish
-- Record the outcome of a run (succeeded, failed, dead, cancelled, retry_scheduled, queued) as
-- the caller's retry policy decided it: `finished_at` (NULL unless terminal) and the retry's
-- `run_at` (NULL unless retry_scheduled) are computed by the caller.
UPDATE executions
   SET state = %(state)s, state_reason = %(reason)s, result = %(result)s, error = %(error)s,
       error_type = %(error_type)s, finished_at = %(finished_at)s,
       run_at = coalesce(%(run_at)s, run_at),
       attempt = CASE WHEN %(state)s = 'queued' THEN attempt - 1 ELSE attempt END,
       queued_at = CASE WHEN %(state)s = 'queued' THEN %(now)s ELSE queued_at END,
       lease_owner = NULL, lease_expires = NULL
 WHERE id = %(id)s
RETURNING state, run_at, attempt, max_attempts;

-- name: execution_token_state
-- Why a token-checked call matched nothing: the run's current token, owner and state (another
-- tenant's run is not found).
SELECT fencing_token, lease_owner, state, result, error, type FROM executions
 WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s);

-- name: mark_success
-- A schedule's dead man's switch is fed by its runs' successes. Answers whether the schedule has
-- live children (`release_children` has work), through the schedules_children index: a single
-- completion sends release_children only then, not a round trip more on every success.
UPDATE schedules SET last_success_at = %(now)s, success_alert_at = NULL WHERE id = %(schedule_id)s
RETURNING EXISTS (SELECT 1 FROM schedules c
                   WHERE c.parent_schedule_id = %(schedule_id)s AND c.deleted_at IS NULL AND NOT c.paused);

-- name: queue_depths
-- Queued executions due now per priority and the oldest run_at among them (metrics and
-- ClusterStatus): what waits for a worker, not the runs queued ahead of their run_at (a delayed
-- one-off job submitted within QUEUED_AT_SUBMIT_WITHIN of it, or queued by its owner a second
-- ahead), which no worker may take yet.
SELECT priority, count(*) AS queued, min(run_at) AS oldest_run_at
  FROM executions
 WHERE state = 'queued' AND run_at <= now()
 GROUP BY priority;

-- name: reap_due_partitions
-- Not fenced, read only: which of `partitions` have reaper work as of `now` (a running run past
-- its lease or timeout, a retry whose backoff passed, a dead man's switch to raise): the reaper
-- opens a fenced transaction only for those. One statement for every owned partition instead
-- of 64 fenced transactions of three statements each per second with nothing to do. A row that
-- becomes due after this read is found by the next round, as before. The rules are the
-- functions of migration 0014, shared with the fenced statements below; the plain state and
-- alert tests next to them only let the planner pick the partial indexes.
SELECT partition FROM executions
 WHERE partition = ANY(%(partitions)s::int[]) AND state = 'running'
   AND cronwheel_run_overdue(state, lease_expires, timeout_s, started_at, %(now)s)
UNION
SELECT partition FROM executions
 WHERE partition = ANY(%(partitions)s::int[]) AND state = 'retry_scheduled'
   AND cronwheel_retry_due(state, run_at, %(now)s)
UNION
SELECT partition FROM schedules
 WHERE partition = ANY(%(partitions)s::int[]) AND alert_if_no_success_within_s IS NOT NULL
   AND cronwheel_success_overdue(alert_if_no_success_within_s, success_alert_at, deleted_at, paused,
                                 last_success_at, created_at, %(now)s);

-- name: reap_candidates
-- Fenced: the partition's running executions whose lease lapsed without heartbeat ('expired')
-- or that ran past their per-job timeout ('timed_out'), locked for the reaper to decide each
-- one's next state with the retry policy (in Python; `reap_apply` writes it). A run a worker is
-- finishing right now is skipped (SKIP LOCKED): its outcome wins. Lapsed leases come first
-- (a lapsed lease is requeued without backoff, as it always was). Bounded per round.
SELECT e.id, CASE WHEN e.lease_expires < %(now)s THEN 'expired' ELSE 'timed_out' END AS kind,
       e.attempt, e.max_attempts, e.cancel_requested, e.timeout_s, e.retry_initial_s, e.retry_multiplier,
       e.retry_max_s, e.schedule_id, e.tenant
  FROM executions e
 WHERE e.partition = %(partition)s AND e.state = 'running'
   AND cronwheel_run_overdue(e.state, e.lease_expires, e.timeout_s, e.started_at, %(now)s)
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
 ORDER BY e.lease_expires
 LIMIT %(limit)s
   FOR UPDATE OF e SKIP LOCKED;

-- name: reap_apply
-- Fenced: write the state the retry policy decided for one reaped run (still running, still in
-- the partition). Times come from the caller: `queued_at` only when it goes back to the queue,
-- `finished_at` only when terminal, `run_at` only for a retry.
UPDATE executions
   SET state = %(state)s, state_reason = %(reason)s, error = %(error)s, error_type = %(error_type)s,
       lease_owner = NULL, lease_expires = NULL,
       run_at = coalesce(%(run_at)s, run_at),
       queued_at = coalesce(%(queued_at)s, queued_at),
       finished_at = %(finished_at)s
 WHERE id = %(id)s AND partition = %(partition)s AND state = 'running'
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
RETURNING id, state, schedule_id, tenant, priority, type;

-- name: requeue_retries
-- Fenced: retries whose backoff has passed become claimable.
UPDATE executions
   SET state = 'queued', queued_at = %(now)s
 WHERE partition = %(partition)s AND state = 'retry_scheduled'
   AND cronwheel_retry_due(state, run_at, %(now)s)
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
RETURNING id, priority, type;

-- name: finished_outcome
-- The recorded outcome of a run, to answer a repeated Complete/Fail with the same token.
SELECT fencing_token, state, run_at, attempt, max_attempts FROM executions
 WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s);

-- name: dead_mans_switch
-- Fenced: schedules of the partition with no success within their alert window raise the
-- alert once (until the next success clears it).
UPDATE schedules
   SET success_alert_at = %(now)s
 WHERE partition = %(partition)s AND alert_if_no_success_within_s IS NOT NULL
   AND cronwheel_success_overdue(alert_if_no_success_within_s, success_alert_at, deleted_at, paused,
                                 last_success_at, created_at, %(now)s)
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
RETURNING id, tenant, last_success_at, alert_if_no_success_within_s;

-- name: overdue_success_alerts
-- Schedules whose dead man's switch is raised now (for the metric; schedules_alerting).
SELECT count(*) FROM schedules
 WHERE alert_if_no_success_within_s IS NOT NULL AND success_alert_at IS NOT NULL AND deleted_at IS NULL;

-- name: executions_by_state
-- Live executions per state (metrics, every 15 s on each node), each counted through its partial
-- index. Finished states are not counted: that table only grows, and a full count on every node
-- competed with firing (cronwheel_fired_total, failures, retries and dead letters count outcomes).
-- (queued is counted by queue_depths, per priority).
SELECT 'running' AS state, count(*) AS n FROM executions WHERE state = 'running'
UNION ALL SELECT 'scheduled', count(*) FROM executions WHERE state = 'scheduled'
UNION ALL SELECT 'retry_scheduled', count(*) FROM executions WHERE state = 'retry_scheduled';

-- name: stuck_executions
-- Runs still `running` past their lease plus a grace: the reaper should have taken them.
SELECT count(*) FROM executions
 WHERE state = 'running' AND lease_expires < %(now)s - make_interval(secs => %(grace_s)s);

-- name: complete_batch
-- Succeed every listed run still held by the worker with its token, feed the schedules' dead
-- man's switches, in one statement; returns the runs it succeeded.
-- The runs are found by `id = ANY`, each one's token and result by its place in the lists, with
-- no join: joined to the lists, a run held by the worker was compared with every listed run, and
-- with no statistics yet (a new or truncated table) PostgreSQL read every running run of the
-- worker through a partial running index for it (a batch of 250 beside ~2,000 held runs: 85 ms
-- of its 97). `(e.state || '')` keeps that index out of the plan, so a batch reads its own runs
-- by primary key, however many runs the worker holds (tests/integration/test_dispatch_pipelined.py).
-- Sent after `set_config('enable_seqscan', 'off', true)` (storage/dispatch.py complete_batch): the
-- plan PostgreSQL keeps for it may have been made on a nearly empty table.
WITH done AS (
    UPDATE executions AS e
       SET state = 'succeeded', state_reason = NULL,
           result = (%(results)s::jsonb[])[array_position(%(ids)s::uuid[], e.id)], error = NULL, error_type = NULL,
           finished_at = %(now)s, lease_owner = NULL, lease_expires = NULL
     WHERE e.id = ANY(%(ids)s::uuid[])
       AND e.fencing_token = (%(tokens)s::bigint[])[array_position(%(ids)s::uuid[], e.id)]
       AND e.lease_owner = %(worker)s AND (e.state || '') = 'running'
       AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s)
    RETURNING e.id, e.schedule_id, e.type, e.tenant
), fed AS (
    UPDATE schedules SET last_success_at = %(now)s, success_alert_at = NULL
     WHERE id IN (SELECT schedule_id FROM done WHERE schedule_id IS NOT NULL)
    RETURNING 1
)
SELECT id, schedule_id, (SELECT count(*) FROM fed) AS fed, type, tenant FROM done;

-- name: release_buffered_many
-- Overlap buffer_*: for each listed schedule whose run ahead finished, queue its oldest
-- buffered run, and wake the dispatchers (as `notify_queued` with payload 'buffered',
-- delivered at commit; one notification however many runs) if there was one: in the statement,
-- so the caller need not read its result before it commits. Answers the job type of each run
-- released (the state counters), which the caller reads once committed. The one release
-- statement: storage/api.py `release_buffered` runs it for one schedule. Each schedule's oldest
-- buffered run is locked FOR UPDATE SKIP LOCKED: one a cancel is changing right now is passed
-- over. Waiting for it instead, the UPDATE (which rechecks only `id IN (...)` on the row's latest
-- version) queued the run the cancel had just cancelled.
WITH released AS (
    UPDATE executions
       SET state = 'queued', state_reason = NULL, queued_at = %(now)s
     WHERE id IN (SELECT b.id FROM unnest(%(schedule_ids)s::uuid[]) AS s(schedule_id)
                   CROSS JOIN LATERAL (
                        SELECT e.id FROM executions e
                         WHERE e.schedule_id = s.schedule_id AND e.state = 'scheduled' AND e.state_reason = 'buffered'
                         ORDER BY e.scheduled_for LIMIT 1 FOR UPDATE SKIP LOCKED) AS b)
    RETURNING type
), woke AS MATERIALIZED (
    SELECT pg_notify('cronwheel_queued', 'buffered') FROM (SELECT 1 FROM released LIMIT 1) r
)
SELECT type, (SELECT count(*) FROM woke) AS woke FROM released;

-- name: release_children
-- Child schedules: for each of `ids` that succeeded and belongs to a schedule with live, unpaused
-- children, one queued run of each child with the parent run's scheduled time (trigger 'parent'),
-- in the parent's completion transaction (so a completion that does not commit creates none), at
-- most once per (child, scheduled time) by the executions_schedule_tick index (so a retried or
-- repeated completion creates none again), waking the dispatchers at commit if one was created.
-- Not fenced by the child's partition epoch: its owner never writes a child's runs (the child
-- has no tick of its own), and the unique index is the wall. Answers each run's job type.
WITH born AS (
    INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at, priority,
                            state, state_reason, trigger, max_attempts, retry_initial_s, retry_multiplier,
                            retry_max_s, timeout_s, queued_at, created_at, fired_at, queue, required_capabilities)
    SELECT cronwheel_uuid7(), c.id, c.tenant, c.job_type, c.payload, c.partition, p.scheduled_for, %(now)s,
           c.priority, 'queued', 'after parent run ' || p.id::text, 'parent', c.max_attempts, c.retry_initial_s,
           c.retry_multiplier, c.retry_max_s, c.timeout_s, %(now)s, %(now)s, %(now)s, c.queue, c.required_capabilities
      FROM executions p JOIN schedules c ON c.parent_schedule_id = p.schedule_id
     WHERE p.id = ANY(%(ids)s::uuid[]) AND p.schedule_id IS NOT NULL AND (p.state || '') = 'succeeded'
       AND c.parent_schedule_id IS NOT NULL AND c.deleted_at IS NULL AND NOT c.paused
     ORDER BY c.id, p.scheduled_for
    ON CONFLICT (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL DO NOTHING
    RETURNING type
), woke AS MATERIALIZED (
    SELECT pg_notify('cronwheel_queued', 'parent') FROM (SELECT 1 FROM born LIMIT 1) r
)
SELECT type, (SELECT count(*) FROM woke) AS woke FROM born;
