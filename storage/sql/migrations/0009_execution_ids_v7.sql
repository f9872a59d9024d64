-- 0009_execution_ids_v7: execution ids made in the database are UUIDv7 (RFC 9562), like those
-- made by the nodes (storage/ids.py). A random id lands on a random leaf of the primary key, so
-- a burst of fires dirties, splits and WAL-logs pages all over it; a v7 id begins with the Unix
-- time in milliseconds, so consecutive inserts append at the index's right edge. One
-- INSERT..SELECT of 1M executions on a 2-core machine: 17-19 s with gen_random_uuid(), 11.5-13 s
-- with this. PostgreSQL 18's built-in uuidv7() is not available on older servers, so the layout
-- is built here from gen_random_uuid(): its first 48 bits replaced by the milliseconds, its
-- version nibble turned from 4 into 7 (bits 52 and 53 of the bytea), the variant bits kept.
-- A plain SQL function, so the planner inlines it.
CREATE FUNCTION cronwheel_uuid7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
