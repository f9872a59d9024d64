"""Firing: preload each owned partition's due index into the timing wheel and fire from memory.

`Firer` executes the decisions of `cronwheel.cron` (next tick, misfire, overlap); every write is
one fenced batch through the storage port, and a schedule's due cursor only ever moves past a
tick that was recorded in the same transaction (compare-and-set on `next_run_at`).
`schedule_cache` keeps the parsed schedules of owned partitions.
"""
