"""cronwheel.cluster: the scheduler node, seven rooms and the node that wires them.

    coordination/  etcd membership, partition keys and leases, epochs recorded in PostgreSQL,
                   the local trust window (when to stop acting without hearing from etcd)
    firing/        the due index preloaded into the timing wheel, fenced fire batches
    dispatch/      workers: claim, heartbeat, complete; the reaper; the one retry policy
    api/           the gRPC edge: SchedulerService, AdminService, auth, the one error table
    commands/      what the API asks of schedules and executions: validation, then storage
    webhooks/      push alerts: the per-node sender of signed deliveries, their body, subscriptions
    retention/     the pruner of finished executions past their window or a schedule's keep_last
    node.py        one process, one TaskGroup: builds the rooms and hands each what it needs
    metrics.py     Prometheus metrics; notifications.py: LISTEN/NOTIFY from PostgreSQL

Dependencies inside point one way: api -> commands -> storage; node -> every room; the rooms
never import node. No module here runs SQL or imports psycopg: storage/ is the port.
"""
