"""Firing: preload each owned partition's due index into the timing wheel and fire from memory.

`Firer` executes the decisions of `cronwheel.cron` (next tick, misfire, overlap); every write is
fenced through the storage port (the plain ticks of many partitions due at one instant share one
statement, each tick fenced by its own partition's epoch), and a schedule's due cursor only ever moves past a
tick that was recorded in the same transaction (compare-and-set on `next_run_at`).
`firer.Firer` is a thin shell over one module per concept: `planning` (pure: herd grouping, a
chunk's FireBatchParams, misfire records), `loading` (preload, horizon, reload, misfires),
`writing` (the three write outcomes, stale epochs), `announcing` (stats, lag metrics, traces,
NOTIFY) and `state` (the partitions, the wheel, arming); `config` holds `FiringConfig`.
`schedule_cache` keeps the parsed schedules of owned partitions; `overlap` applies the overlap
policy to a fire batch (misfire records bypass it).
"""
