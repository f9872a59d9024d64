-- name: due_oneoffs
-- The one-off half of the due index for one partition: run_at in (after, horizon].
-- Buffered cron runs (overlap buffer_*) also wait in `scheduled` but are released by the
-- completion of the run ahead of them, not by time.
SELECT id, run_at FROM executions
 WHERE partition = %(partition)s AND state = 'scheduled'
   AND cronwheel_in_window(run_at, %(after)s::timestamptz, %(horizon)s::timestamptz)
   AND state_reason IS DISTINCT FROM 'buffered'
 ORDER BY run_at;

-- name: extend_due_partitions
-- Not fenced, read only: which of `partitions` (each with its own `after`, the end of what is
-- already in the wheel) have anything due in (after, horizon]: the horizon extender loads only
-- those, instead of two streamed reads per owned partition every extend_every_s. A superset of
-- what the loads find (paused, deleted and buffered rows count here): at worst a load that
-- finds nothing, never a row left out, since both use the same window.
SELECT w.partition FROM unnest(%(partitions)s::int[], %(afters)s::timestamptz[]) AS w(partition, after)
 WHERE EXISTS (SELECT 1 FROM schedule_due d
                WHERE d.partition = w.partition AND d.next_run_at IS NOT NULL
                  AND cronwheel_in_window(d.next_run_at, w.after, %(horizon)s::timestamptz))
    OR EXISTS (SELECT 1 FROM executions e
                WHERE e.partition = w.partition AND e.state = 'scheduled'
                  AND cronwheel_in_window(e.run_at, w.after, %(horizon)s::timestamptz));

-- name: oneoff_for_fire
-- One one-off execution as the firing path sees it (after a change notification); same columns
-- as due_oneoffs.
SELECT id, run_at FROM executions
 WHERE id = %(id)s AND state = 'scheduled' AND state_reason IS DISTINCT FROM 'buffered';

-- name: lock_buffers
-- Transaction-scoped advisory locks, one per schedule (by hash, in hash order so two transactions
-- never wait on each other in a cycle): serialise a buffer_* fire's count of the schedule's
-- unfinished runs (`active_counts`) with the end of a run and its release of the buffered one
-- (`release_buffered_many`, storage/api.py `release_buffered`). Run in its own statement before the count or the
-- release, so that their snapshot is taken after the lock (READ COMMITTED): either the end commits
-- first and the fire counts the run as ended, or the fire's buffered row commits first and the
-- release queues it. Unserialised, a buffered row could commit just after the only release that
-- would have seen it (issue 47, generative chaos seeds 1 and 3).
SELECT pg_advisory_xact_lock(hashtext('cronwheel.buffer'), h)
  FROM (SELECT DISTINCT hashtext(s::text) AS h FROM unnest(%(schedule_ids)s::uuid[]) AS s ORDER BY 1) AS l;

-- name: active_counts
-- Fenced read for overlap decisions: runs of each schedule in flight and buffered.
SELECT schedule_id,
       count(*) FILTER (WHERE state IN ('queued', 'running', 'retry_scheduled')) AS running,
       count(*) FILTER (WHERE state = 'scheduled' AND state_reason = 'buffered') AS buffered
  FROM executions
 WHERE partition = %(partition)s AND schedule_id = ANY(%(ids)s::uuid[])
   AND state IN ('queued', 'running', 'retry_scheduled', 'scheduled')
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
 GROUP BY schedule_id;

-- name: replace_active
-- Fenced: overlap `replace`: cancel queued runs now, ask running ones to stop. Answers each run
-- touched with the state it is in now ('cancelled', or 'running' asked to stop) and its job type
-- (the state counters count the cancelled ones).
UPDATE executions
   SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
       state_reason = CASE WHEN state = 'running' THEN state_reason ELSE 'replaced by a newer run' END,
       finished_at = CASE WHEN state = 'running' THEN finished_at ELSE coalesce(%(now)s::timestamptz, now()) END,
       cancel_requested = true
 WHERE partition = %(partition)s AND schedule_id = ANY(%(ids)s::uuid[])
   AND state IN ('queued', 'running', 'retry_scheduled')
   AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
RETURNING state, type;

-- fragment: daily_quota_over
-- The daily quota of the fire statements (fire_executions, fire_ticks_fenced), written once: of the
-- statement's `quota_in (id, tenant, tick)` (the rows that would run), those past their tenant's
-- max_executions_per_day (cronwheel_daily_room at the statement's `now`; a tenant's rows counted in
-- tick order) as `over (id, reason)`, recorded skipped with `reason`. Empty without quotas: the
-- room is never computed then (it cost 40 ms a statement). A fragment, not a function: a function
-- would take the rows as arrays built for every statement, quotas or not.
quota_tenants AS MATERIALIZED (  -- the few tenants with a quota that have ticks here; NULL: none
    SELECT array_agg(t.id) AS ids FROM tenants t
     WHERE t.max_executions_per_day IS NOT NULL AND EXISTS (SELECT 1 FROM quota_in a WHERE a.tenant = t.id)
), over AS MATERIALIZED (
    SELECT r.id, 'quota: max_executions_per_day ' || r.quota || ' used up (UTC day)' AS reason FROM (
        SELECT c.id, q.quota, q.room, row_number() OVER (PARTITION BY c.tenant ORDER BY c.tick, c.id) AS k
          FROM quota_tenants qt  -- no quota tenant: the room is never computed
         CROSS JOIN LATERAL cronwheel_daily_room(qt.ids, coalesce(%(now)s::timestamptz, now())) AS q
          JOIN quota_in AS c ON c.tenant = q.tenant
         WHERE qt.ids IS NOT NULL) AS r
     WHERE r.k > r.room
)

-- name: fire_executions
-- Fenced: insert the executions (or skip records) of fired cron ticks, each only while its
-- schedule passes the fire guard (cronwheel_fire_guard, as `advance_schedules` and
-- `fire_ticks_fenced`: still at the version it was loaded with, not paused or deleted, and its
-- cursor `next_run_at` still at the tick this decision was made from); a tick already fired is
-- left alone. `fired_at` is the database's commit-time evidence (clock_timestamp(), not the
-- node's clock): the chaos checker compares it with the ownership history the database keeps.
-- Daily quota: a tick that would run (queued, or scheduled: buffered / replacing) of a tenant
-- whose max_executions_per_day is used up (cronwheel_daily_room, ticks of one tenant counted in
-- tick order) is recorded as skipped with state_reason 'quota: max_executions_per_day ...' (the
-- fragment daily_quota_over, fire_ticks_fenced's too).
WITH g AS (  -- the schedule row share-locked, as in fire_ticks_fenced (`live`): its payload is inserted
    SELECT v.*, s.tenant, s.job_type, s.payload, s.partition, s.priority, s.max_attempts, s.retry_initial_s,
           s.retry_multiplier, s.retry_max_s, s.timeout_s, s.queue, s.required_capabilities
      FROM unnest(%(ids)s::uuid[], %(schedule_ids)s::uuid[], %(scheduled_fors)s::timestamptz[],
                  %(run_ats)s::timestamptz[], %(states)s::text[], %(state_reasons)s::text[],
                  %(triggers)s::text[], %(versions)s::bigint[], %(cursors)s::timestamptz[])
           AS v(id, schedule_id, scheduled_for, run_at, state, state_reason, trigger, version, cursor)
      JOIN schedules AS s ON s.id = v.schedule_id AND s.partition = %(partition)s
      JOIN schedule_due AS d ON d.schedule_id = v.schedule_id
     WHERE cronwheel_fire_guard(s.version, v.version, s.paused, s.deleted_at, d.next_run_at, v.cursor)
       AND EXISTS (SELECT 1 FROM cronwheel_fence(%(partition)s, %(epoch)s))
       FOR KEY SHARE OF s
), quota_in AS NOT MATERIALIZED (  -- what the daily quota counts: the ticks that would run
    SELECT g.id, g.tenant, g.scheduled_for AS tick FROM g WHERE g.state <> 'skipped'
),
-- include: daily_quota_over
INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at,
                        priority, state, state_reason, trigger, max_attempts, retry_initial_s,
                        retry_multiplier, retry_max_s, timeout_s, fired_epoch, fired_at, queued_at,
                        queue, required_capabilities)
SELECT g.id, g.schedule_id, g.tenant, g.job_type, g.payload, g.partition, g.scheduled_for, g.run_at,
       g.priority, CASE WHEN o.id IS NULL THEN g.state ELSE 'skipped' END,
       CASE WHEN o.id IS NULL THEN g.state_reason
            ELSE o.reason END,
       g.trigger, g.max_attempts, g.retry_initial_s,
       g.retry_multiplier, g.retry_max_s, g.timeout_s, %(epoch)s, clock_timestamp(),
       CASE WHEN g.state = 'queued' AND o.id IS NULL THEN coalesce(%(now)s::timestamptz, now()) END,
       g.queue, g.required_capabilities
  FROM g
  LEFT JOIN over AS o ON o.id = g.id
ON CONFLICT (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL DO NOTHING
RETURNING id, schedule_id, scheduled_for, run_at, state, priority, type, tenant;

-- name: notify_queued
-- Wake dispatchers: work of this priority was queued (delivered at commit).
SELECT pg_notify('cronwheel_queued', %(payload)s);

-- name: fire_ticks_fenced
-- Fenced fast path, ONE statement for the plain cron ticks and due one-off jobs of many
-- partitions (storage/firing.py fire_plain_many). A tick advances its schedule if the fire guard
-- passes (version as loaded, not paused or deleted, cursor AT this tick) and gets its execution;
-- a one-off still `scheduled` is queued (the one statement that does so). Each row joins ITS
-- partition's `fence` row (cronwheel_fence: share-locked while it carries the caller's epoch): a
-- stale partition writes nothing. Answer per fenced partition: advanced, entered [state, type, count]..., queued
-- one-offs [id, schedule_id, scheduled_for, run_at (Unix us), state, priority, type, tenant]....
-- Quota-skipped ticks: see fire_executions. Keep this under 1 KB: pg_stat_activity cuts there.
WITH fence AS (
    SELECT p.id, p.epoch
      FROM unnest(%(partitions)s::integer[], %(epochs)s::bigint[]) AS f(id, epoch)
     CROSS JOIN LATERAL cronwheel_fence(f.id, f.epoch) AS p
), v AS (
    SELECT * FROM unnest(%(tick_partitions)s::integer[], %(schedule_ids)s::uuid[], %(ticks)s::float8[],
                         %(run_ats)s::float8[], %(nexts)s::float8[], %(versions)s::bigint[])
           AS v(partition, schedule_id, tick, run_at, next_ts, version)
), live AS MATERIALIZED (  -- the guard, on the schedule row share-locked as the API's lock_schedule
    -- would find it: a pause or edit that locked first is seen (READ COMMITTED rechecks the row's
    -- latest version after the wait), one that locks later waits for this commit and then takes
    -- back the tick queued here (api_unfire_ahead); the payload inserted is the version locked.
    SELECT s.id, s.tenant, s.job_type, s.payload, s.priority, s.max_attempts, s.retry_initial_s,
           s.retry_multiplier, s.retry_max_s, s.timeout_s, s.queue, s.required_capabilities, v.tick, v.run_at, v.next_ts, v.partition, fence.epoch
      FROM v JOIN fence ON fence.id = v.partition JOIN schedules AS s ON s.id = v.schedule_id
      JOIN schedule_due AS d ON d.schedule_id = v.schedule_id AND d.partition = v.partition
     WHERE cronwheel_fire_guard(s.version, v.version, s.paused, s.deleted_at, d.next_run_at, to_timestamp(v.tick))
       FOR KEY SHARE OF s
), adv AS (  -- the cursor's compare-and-set, rechecked on the due row's latest version
    UPDATE schedule_due AS d
       SET next_run_at = to_timestamp(live.next_ts), last_scheduled_for = to_timestamp(live.tick)
      FROM live
     WHERE d.schedule_id = live.id AND d.partition = live.partition AND d.next_run_at = to_timestamp(live.tick)
    RETURNING live.*
), quota_in AS NOT MATERIALIZED (  -- what the daily quota counts (daily_quota_over): every advanced tick
    SELECT adv.id, adv.tenant, adv.tick FROM adv
),
-- include: daily_quota_over
, ins AS (
    INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at,
                            priority, state, state_reason, trigger, max_attempts, retry_initial_s,
                            retry_multiplier, retry_max_s, timeout_s, fired_epoch, fired_at, queued_at,
                            queue, required_capabilities)
    SELECT cronwheel_uuid7(), adv.id, adv.tenant, adv.job_type, adv.payload, adv.partition,
           to_timestamp(adv.tick), to_timestamp(adv.run_at), adv.priority,
           CASE WHEN o.id IS NULL THEN 'queued' ELSE 'skipped' END,
           o.reason,
           'cron', adv.max_attempts, adv.retry_initial_s, adv.retry_multiplier, adv.retry_max_s, adv.timeout_s,
           adv.epoch, clock_timestamp(), CASE WHEN o.id IS NULL THEN coalesce(%(now)s::timestamptz, now()) END,
           adv.queue, adv.required_capabilities
      FROM adv LEFT JOIN over AS o ON o.id = adv.id
    ON CONFLICT (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL DO NOTHING
    RETURNING partition, state, type
), entered AS (  -- what entered which state, by job type: the state counters (metrics)
    SELECT partition, state, type, count(*) AS n FROM ins GROUP BY partition, state, type
), oq AS (  -- due one-off jobs: scheduled -> queued (fired_at: database time, see fire_executions).
    -- Found by id: `e.partition + 0` keeps the planner off the partial due index (partition,
    -- run_at), which it chose without statistics and which read every scheduled job of the
    -- partition for each job (20,000 due at once: 3.6M index entries, fired 0.6 s late).
    UPDATE executions AS e
       SET state = 'queued', queued_at = coalesce(%(now)s::timestamptz, now()), fired_at = clock_timestamp(),
           fired_epoch = fence.epoch
      FROM unnest(%(oneoff_partitions)s::integer[], %(oneoff_ids)s::uuid[]) AS w(partition, id)
      JOIN fence ON fence.id = w.partition
     WHERE e.id = w.id AND e.partition + 0 = w.partition AND e.state = 'scheduled'  -- + 0: see oq above
    RETURNING e.partition, e.id, e.schedule_id, e.scheduled_for, e.run_at, e.state, e.priority, e.type, e.tenant
)
SELECT fence.id, coalesce(a.n, 0) AS advanced, coalesce(i.entered, '[]'::json) AS entered,
       coalesce(o.queued, '[]'::json) AS queued
  FROM fence
  LEFT JOIN (SELECT partition, count(*) AS n FROM adv GROUP BY partition) AS a ON a.partition = fence.id
  LEFT JOIN (SELECT partition, json_agg(json_build_array(state, type, n)) AS entered
               FROM entered GROUP BY partition) AS i ON i.partition = fence.id
  LEFT JOIN (SELECT partition, json_agg(json_build_array(
                        id, schedule_id, (extract(epoch FROM scheduled_for) * 1000000)::bigint,
                        (extract(epoch FROM run_at) * 1000000)::bigint, state, priority, type, tenant))
                    AS queued
               FROM oq GROUP BY partition) AS o ON o.partition = fence.id;

-- name: set_tick_trace_contexts
-- Tracing only (cronwheel/tracing.py): store the traceparent of each just-fired cron tick's fire
-- span, by (schedule_id, scheduled_for as Unix seconds converted as fire_ticks_fenced does). A
-- tick that already holds one is left alone. Never run while tracing is off.
UPDATE executions e
   SET trace_context = v.trace_context
  FROM unnest(%(schedule_ids)s::uuid[], %(ticks)s::float8[], %(trace_contexts)s::text[])
       AS v(schedule_id, tick, trace_context)
 WHERE e.schedule_id = v.schedule_id AND e.scheduled_for = to_timestamp(v.tick) AND e.trace_context IS NULL;

-- name: insert_submitted_many
-- Many one-off jobs from SubmitJobs or one SubmitJob group, ONE statement. `jobs` is one JSON
-- array with one array per job: [id, tenant, type, payload (JSON text), partition, run_at (Unix
-- microseconds), priority, state, max_attempts, retry_initial_s, retry_multiplier, retry_max_s,
-- timeout_s, idempotency_key, trace_context, concurrency_key, concurrency_limit, unique_key (hex),
-- unique_states, target (an HTTP target's JSON text), queue, required_capabilities]
-- (unique_key and unique_states only for a unique job, or as nulls before a target or a queue;
-- target only for a target's job, or as null before a queue; queue and required_capabilities
-- only when not the defaults: absent, they read as NULL, NULL, 'default' and '') (one text
-- parameter: psycopg adapts fourteen Python lists of a thousand items four times slower than
-- json.dumps writes this). A (tenant, idempotency_key)
-- already taken, by a committed row or by an earlier job of the array, inserts nothing for that
-- job: the caller reads the existing row back (`api_by_idempotency_keys`). A group holding a unique
-- job runs this statement with a bare ON CONFLICT DO NOTHING (storage/executions.py), so a taken
-- unique key (executions_unique) also inserts nothing (`api_by_unique_keys`), and its rows in
-- unique-key order; a group without one reads NULL constants for the two unique columns instead of
-- items 15 and 16. RETURNING order is not
-- the input order. `unless_quota`: insert nothing at all if any of the tenants has a daily quota
-- (the caller then takes the locked, counted path instead). SubmitJobs runs it brief
-- (storage/executions.py `_insert_query`): as `WITH ins AS (<this> RETURNING id)`, answering no row
-- when every job was inserted and otherwise one, the ids inserted; the node builds the rows from
-- the jobs it sent (every returned column would be a value it sent). Rows go in key order
-- ((tenant, idempotency_key) in byte order, keyless jobs last): a taken key is waited for in that
-- order, so two groups holding the same keys in different item orders (two SubmitJobs calls on two
-- nodes) wait for each other in one direction only and never deadlock (issue 47 item 5); among
-- jobs with one key the earliest item is first. SubmitJobs' chunks are cut in the same order
-- (cluster/api/scheduler_service.py).
INSERT INTO executions (id, schedule_id, tenant, type, payload, partition, scheduled_for, run_at,
                        priority, state, trigger, max_attempts, retry_initial_s,
                        retry_multiplier, retry_max_s, timeout_s, idempotency_key, queued_at, created_at,
                        trace_context, concurrency_key, concurrency_limit, unique_key, unique_states, target,
                        queue, required_capabilities)
SELECT v.id, NULL, v.tenant, v.type, v.payload, v.partition, v.run_at, v.run_at, v.priority, v.state,
       'submit', v.max_attempts, v.retry_initial_s, v.retry_multiplier, v.retry_max_s, v.timeout_s,
       v.idempotency_key, CASE WHEN v.state = 'queued' THEN %(now)s::timestamptz END, %(now)s, v.trace_context,
       v.concurrency_key, v.concurrency_limit, v.unique_key, v.unique_states, v.target, v.queue,
       v.required_capabilities
  FROM (SELECT (j->>0)::uuid AS id, j->>1 AS tenant, j->>2 AS type, (j->>3)::jsonb AS payload,
               (j->>4)::int AS partition,
               timestamptz 'epoch' + (j->>5)::bigint * interval '1 microsecond' AS run_at,
               j->>6 AS priority, j->>7 AS state, (j->>8)::int AS max_attempts,
               (j->>9)::float8 AS retry_initial_s, (j->>10)::float8 AS retry_multiplier,
               (j->>11)::float8 AS retry_max_s, (j->>12)::float8 AS timeout_s, j->>13 AS idempotency_key,
               j->>14 AS trace_context, j->>15 AS concurrency_key, (j->>16)::int AS concurrency_limit,
               decode(j->>17, 'hex') AS unique_key, (j->>18)::smallint AS unique_states,
               (j->>19)::jsonb AS target,
               coalesce(j->>20, 'default') AS queue, coalesce(j->>21, '') AS required_capabilities,
               ord
          FROM jsonb_array_elements(%(jobs)s::jsonb) WITH ORDINALITY AS e(j, ord)) AS v
 WHERE NOT (%(unless_quota)s::boolean AND EXISTS (
           SELECT 1 FROM tenants t WHERE t.id = ANY(%(tenants)s::text[]) AND t.max_executions_per_day IS NOT NULL))
 ORDER BY v.tenant COLLATE "C", v.idempotency_key COLLATE "C", v.ord
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: api_by_idempotency_keys
-- The executions that (tenant, idempotency_key) pairs name (parallel arrays), if any.
SELECT e.* FROM executions e
  JOIN unnest(%(tenants)s::text[], %(idempotency_keys)s::text[]) AS k(tenant, idempotency_key)
    ON e.tenant = k.tenant AND e.idempotency_key = k.idempotency_key;

-- name: api_by_unique_keys
-- The executions that hold the given unique keys now (in their unique states): the partial unique
-- index executions_unique, whose predicate this repeats so the planner uses it.
SELECT e.* FROM executions e
 WHERE e.unique_key = ANY(%(unique_keys)s::bytea[])
   AND e.unique_key IS NOT NULL AND cronwheel_unique_holds(e.unique_states, e.state);

-- name: api_daily_quotas
-- The tenants among `tenants` that have a daily execution quota, and the quota. No lock.
SELECT id AS tenant, max_executions_per_day FROM tenants
 WHERE id = ANY(%(tenants)s::text[]) AND max_executions_per_day IS NOT NULL;

-- name: api_lock_quotas
-- Transaction-scoped advisory locks, one per tenant (by hash, in hash order so two groups never
-- wait on each other in a cycle): serialises the daily-quota check of these tenants' submit
-- groups until commit, without touching the tenants rows. Run before `api_used_today`, in its
-- own statement, so that count's snapshot is taken after the lock (READ COMMITTED).
SELECT pg_advisory_xact_lock(hashtext('cronwheel.quota'), h)
  FROM (SELECT DISTINCT hashtext(t) AS h FROM unnest(%(tenants)s::text[]) AS t ORDER BY 1) AS l;

-- name: api_used_today
-- Executions each of `tenants` with a daily quota created on the UTC day of `at`: the day's counter
-- (cronwheel_daily_room, the fire path's rule), not the rows retention has left.
SELECT r.tenant, r.quota - r.room AS used FROM cronwheel_daily_room(%(tenants)s::text[], %(at)s::timestamptz) AS r;

-- name: notify_due_many
-- One coalesced change notification per payload (a group's one-off jobs, see
-- storage/notifications.py), delivered at commit.
SELECT pg_notify('cronwheel_due', p) FROM unnest(%(payloads)s::text[]) AS p;

-- name: notify_queued_many
-- Wake dispatchers once per priority that was queued (delivered at commit).
SELECT pg_notify('cronwheel_queued', p) FROM unnest(%(payloads)s::text[]) AS p;

-- name: register_capability_sets
-- The capability sets runs about to be written require (`sets`: canonical texts, `items`: each
-- one's capabilities as a text[] literal), known to the claim from now on (capability_sets,
-- migration 0025). Committed before the runs are: a claim that sees a run sees its set.
INSERT INTO capability_sets (capabilities, caps)
SELECT s.c, s.i::text[] FROM unnest(%(sets)s::text[], %(items)s::text[]) AS s(c, i)
ON CONFLICT (capabilities) DO NOTHING;
