"""The chaos suite: history + model, not "did it crash" (etcd's robustness tests, STYLE.md 11).

    python -m chaos run --scenario all --seed 7 --duration 60
    python -m chaos run --scenario all --generate --seed 7 --duration 60   # the generative workload

A run starts real processes on loopback (a 3-member etcd, PostgreSQL, N `cronwheel node`s, M
`cronwheel worker`s), loads a workload (cron schedules every second and every minute in several
zones, delayed one-off jobs, jobs that fail once, long checkpointing jobs), walks a seeded
timeline of faults, drains, and judges what happened from the records alone:

    scenarios.py   {cluster, traffic, failpoints, checker}; the seeded timeline; known bugs
    failpoints.py  the faults: kill / pause / deploy / partition a node, scale out and in, kill the
                   etcd leader, restart PostgreSQL, kill / pause a worker, skew a node's clock
    cluster.py     the cluster the failpoints act on (roster, fixed ports, namespaces, health)
    netns.py       network namespaces and the forwarder that make a node partitionable
    skewed.py      a node with a skewed wall clock
    workload.py    schedules and the one-off traffic; workload_jobs.py the handlers (JSONL)
    generate.py    --generate: schedules drawn from the whole policy space, a herd due at one
                   instant, and API operations (pause, resume, update, trigger, backfill, delete,
                   cancel) at random instants, each recorded as [sent, answered]
    model.py       the reference model of docs/semantics.md (pure; imports nothing of the product)
    checker_model.py  every tick (from recorded PreviewSchedule answers), row and explain answer
                   judged against the model; the share of ticks an operation made ambiguous
    runner.py      one run, end to end; collect.py reads the history; history.py its records
    checker.py     the invariants (pure functions of a History); checker_fencing.py the ownership ones
    report.py      report.json and the summary

Invariants (each reported with counts; any violation fails the run and keeps its logs):
every cron tick in the window has exactly one execution or the record its misfire policy
defines; no tick has two executions; every one-off job ran and ended terminal; no write landed
with a stale epoch (fired_at inside its epoch's ownership interval, from partition_history and
commit timestamps) or a stale token; a job ran twice only after a failure or a fault on its
worker's path, and the database saw every run; takeovers within TTL + 1 s; nothing stuck
running; epochs only increase; healthy before and after every fault; nothing fired early.

How it fails: a run that cannot even start (a server, a node) exits 3 with its logs kept; a
violated invariant exits 1 with history.json, report.json and every log kept under --out, and
`python -m chaos check DIR` judges the same history again. The same seed injects the same
faults on the same targets (scenarios.plan is pure); timings are real and vary.

Chaos drives the product only through the Client, the CLI and processes, and imports no server
code (cronwheel.cluster, .storage, .cron, .wheel): the harness (cronwheel.devtools) migrates through `cronwheel
migrate` and reads etcd through its JSON gateway, the test-only hooks are named by
cronwheel.failpoints, and the checkers, the model and the history import nothing of cronwheel but
the shared leaves; the nodes' own settings the checkers judge by (queue-ahead, --max-clock-skew)
come from their node_started log lines. tests/unit/test_architecture.py holds this.
"""

# Before anything here imports gRPC: the runner starts and restarts nodes, workers and servers
# while its own clients are busy, so gRPC's fork handlers must be off (cronwheel.devtools.localservers).
import cronwheel.devtools.localservers  # noqa: F401, E402
