"""cronwheel.cluster.retention: finished executions are pruned, so a cluster can run for months.

What is kept. A finished run (succeeded, failed, dead, cancelled, skipped) is pruned when it is
older than its window, or when its schedule has `keep_last` N and N newer finished runs of the
schedule exist (Kubernetes' history limits). The window of a run is, by precedence: its
schedule's own (`keep_succeeded_for_s` for succeeded, skipped and cancelled runs,
`keep_failed_for_s` for failed and dead ones), else its job type's (node config), else the
cluster default (7 days and 30 days). Age is counted from `finished_at` (a skipped record,
which has none: from `created_at`, when it was recorded; never from its tick, which may be long
past). Runs not yet finished are never touched.

Who prunes. The `Pruner` of the node that owns a partition, inside `fenced(partition, epoch)`,
one short transaction per batch of at most `batch_rows` rows, with `pause_s` between batches,
round-robin over the owned partitions: a partition that moves mid-pass is refused (StaleEpoch)
and its new owner starts its own pass. Time is the node's injected Clock (`now`), so a FakeClock
test drives "seven days later".

Invariants.
- Pruning never makes a tick fire again: what has fired is the schedule's due cursor
  (`schedule_due.next_run_at`, moved only by compare-and-set), not the execution row; a new
  owner, a restarted node or a catch-up starts from the cursor.
- An idempotency key is remembered exactly as long as its execution is kept (the key lives on
  the row): a submit repeating a key whose run was pruned creates a new run.
- explain says PRUNED_BY_RETENTION for a tick whose execution was pruned: each batch records the
  ticks it removed (`execution_pruned_ticks`, migration 0020), so a tick that never had one still
  reads MISSED; `execution_pruned` keeps the latest pruned tick and the count per schedule.

How it fails. PostgreSQL away: the pass stops and resumes next round (Unavailable). A lost
partition: StaleEpoch, nothing deleted, the partition is skipped. Any other error of a batch is
logged (`event=prune_failed`) and counted, and the loop goes on: pruning is never worth a node.
"""
