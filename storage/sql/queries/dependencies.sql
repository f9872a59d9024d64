-- Dependencies (job B after job A, migration 0024). A dependent's submit runs these in its own
-- transaction (cluster/commands/dependencies.py); the release itself is the trigger
-- executions_release_dependents (schema.sql), in the transaction that finishes the upstream.
-- None is fenced by a partition epoch: a one-off job's submit never was, and a waiting job is
-- written by no partition owner (docs/semantics.md "Dependencies").

-- name: deps_lock_upstreams
-- The named upstreams of one tenant (by execution id or idempotency key), row-locked and marked
-- as having dependents, with their latest state: an upstream finishing concurrently either
-- committed first (its state here is finished: the submit resolves the edge) or waits for this
-- transaction and then sees the mark and the edges (its trigger resolves them).
UPDATE executions SET has_dependents = true
 WHERE tenant = %(tenant)s
   AND (id = ANY(%(ids)s::uuid[]) OR idempotency_key = ANY(%(keys)s::text[]))
RETURNING id, idempotency_key, state;

-- name: deps_upstream_heights
-- The longest chain of upstreams above each of `ids` (0: it waits for nothing), counted up to
-- `limit` + 1 (the depth limit is all a submit needs to know), through execution_deps' primary key.
WITH RECURSIVE up(root, id, d) AS (
    SELECT u, u, 0 FROM unnest(%(ids)s::uuid[]) AS u
    UNION
    SELECT up.root, e.upstream_id, up.d + 1
      FROM up JOIN execution_deps e ON e.execution_id = up.id
     WHERE up.d <= %(limit)s
)
SELECT root, max(d) AS height FROM up GROUP BY root;

-- name: deps_insert_edges
-- The edges of the dependents a submit inserted: `edges` is a JSON array of [dependent id,
-- upstream id] (distinct pairs).
INSERT INTO execution_deps (execution_id, upstream_id)
SELECT (e->>0)::uuid, (e->>1)::uuid FROM jsonb_array_elements(%(edges)s::jsonb) AS e;

-- name: deps_mark_jobs
-- One statement per submit, each row once: a dependent's number of upstreams and its policy, and
-- an upstream of the same call marked as having dependents. `jobs` is a JSON array of
-- [id, waiting_for or null, dependency_policy or null, is an upstream].
UPDATE executions w
   SET waiting_for = coalesce(c.n, w.waiting_for),
       dependency_policy = coalesce(c.policy, w.dependency_policy),
       has_dependents = w.has_dependents OR c.up
  FROM (SELECT (j->>0)::uuid AS id, (j->>1)::int AS n, j->>2 AS policy, (j->>3)::boolean AS up
          FROM jsonb_array_elements(%(jobs)s::jsonb) AS j) c
 WHERE w.id = c.id;

-- name: deps_resolve_finished
-- Upstreams already finished when their dependents were submitted: resolve their edges now, as
-- the trigger would have (cronwheel_resolve_dependents: released, or cancelled naming them).
SELECT cronwheel_resolve_dependents(u.id, u.state, %(now)s)
  FROM executions u
 WHERE u.id = ANY(%(ids)s::uuid[]) AND u.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped')
 ORDER BY u.id;

-- name: deps_upstreams_of
-- What an execution waits for (exec get, explain, the console): each upstream, its state now
-- (NULL: pruned) and the outcome its edge resolved with (NULL: not yet).
SELECT d.upstream_id, u.state, u.type, u.idempotency_key, d.outcome, d.resolved_at
  FROM execution_deps d LEFT JOIN executions u ON u.id = d.upstream_id
 WHERE d.execution_id = %(id)s
 ORDER BY d.upstream_id;

-- name: deps_dependents_of
-- The executions that wait (or waited) for an execution, and their states.
SELECT d.execution_id, w.state, d.outcome
  FROM execution_deps d JOIN executions w ON w.id = d.execution_id
 WHERE d.upstream_id = %(id)s
 ORDER BY d.execution_id;
