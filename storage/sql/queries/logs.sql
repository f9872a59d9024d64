-- Execution logs (issue 53): what handlers logged, per attempt, in `execution_logs` (migration
-- 0026), apart from the executions row. Appends come from workers (DispatchService.AppendLogs),
-- reads from the API; retention deletes them with their execution (cronwheel_prune_delete).

-- name: append_logs
-- Append worker lines to the attempts they belong to, each run fenced as a heartbeat is (current
-- token, lease owner, running; the caller's tenant) but without writing the executions row: the
-- check is a primary-key read, the attempt number is the row's. Lines of a run that fails the
-- check are not stored; a line already stored (a retried append) is skipped. Answers the runs
-- that passed the check. `ids` / `tokens` name the runs, the line arrays carry each line's run.
WITH run AS MATERIALIZED (
    SELECT e.id, e.attempt
      FROM executions e
     WHERE e.id = ANY(%(ids)s::uuid[])
       AND e.fencing_token = (%(tokens)s::bigint[])[array_position(%(ids)s::uuid[], e.id)]
       AND e.lease_owner = %(worker)s AND e.state = 'running'
       AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s)
), added AS (
    INSERT INTO execution_logs (execution_id, attempt, seq, at, level, logger, message)
    SELECT r.id, r.attempt, l.seq, l.at, l.level, l.logger, l.message
      FROM unnest(%(line_ids)s::uuid[], %(seqs)s::int[], %(ats)s::timestamptz[], %(levels)s::text[],
                  %(loggers)s::text[], %(messages)s::text[]) AS l(id, seq, at, level, logger, message)
      JOIN run r ON r.id = l.id
    ON CONFLICT (execution_id, attempt, seq) DO NOTHING
    RETURNING 1
)
SELECT id FROM run;

-- name: execution_logs_page
-- A page of an execution's log lines after the cursor (attempt, seq), in order; `attempt` NULL:
-- every attempt. Reads the primary key's range.
SELECT attempt, seq, at, level, logger, message
  FROM execution_logs
 WHERE execution_id = %(id)s
   AND (%(attempt)s::int IS NULL OR attempt = %(attempt)s)
   AND (attempt, seq) > (%(after_attempt)s::int, %(after_seq)s::int)
 ORDER BY attempt, seq
 LIMIT %(limit)s;
