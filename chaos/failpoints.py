"""Failpoints: the faults a scenario injects, each a small object with `name`, `available(cluster)`
and `inject(cluster, rng) -> InjectionRecord`.

`inject` chooses its target and durations from `rng` only (seeded per step) and from the
cluster's roster (which failpoints change deterministically), so one seed injects the same faults
on the same targets every time. It leaves the cluster as it found it (a killed node is started
again, a paused one continued, a partition healed) even when something fails half-way; the
runner checks health before and after. Times in records are the runner's wall clock, which is
the same host clock PostgreSQL stamps history with.

    kill-node          SIGKILL a node; start it again once its partitions are taken over
    pause-node         SIGSTOP a node for 2 x TTL (it becomes a zombie), then SIGCONT
    deploy-node        SIGTERM a node (it hands its partitions over and exits), start it again
    scale-out          start one more node (up to max_nodes)
    scale-in           SIGTERM a node that scale-out added
    kill-etcd-leader   SIGKILL the etcd leader (found by /v3/maintenance/status); restart it
    restart-postgres   fast shutdown and start of PostgreSQL (at a seeded instant of the second)
    kill-worker        SIGKILL a worker while it holds a lease; start it again
    pause-worker       SIGSTOP a worker holding a lease for its lease + 1.5 s, then SIGCONT
    skew-node-clock    restart a node with its wall clock 0.3-1.0 s ahead or behind, then without
    partition-node     drop every packet to and from one node (network namespaces) for 2 x TTL
    long-retry-history jobs at attempt 600..1000 with multiplier 100 fail and time out (hole 2)
    late-keepalive     answer one keepalive of a node 0.6-0.9 s after its trust window closed,
                       before the watchdog drops anything (test-only hook, coordination/faults.py)
    refuse-commits     PostgreSQL refuses at COMMIT, for 1-2 s, every transaction that leases,
                       heartbeats or completes a run (a deferred constraint trigger)
    stall-completion   the node completing a run of the overlap-replace schedule stops in the
                       middle of that transaction (its rows locked) for 2.5-3 x TTL: the next
                       tick's replace must not wait for it (test-only hook, dispatch/faults.py)
    kill-mid-upstream-completion
                       SIGKILL the node stalled in the middle of completing a job that another
                       waits for: the dependent stays waiting, and is released once by the retry
"""

from __future__ import annotations

import json
import random
import signal
import time
from typing import Any, Protocol

from chaos.cluster import ChaosCluster
from chaos.history import InjectionRecord


class Failpoint(Protocol):
    name: str

    def available(self, cluster: ChaosCluster) -> bool: ...

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord: ...


def unavailable_reason(fp: Failpoint, cluster: ChaosCluster) -> str:
    reason = getattr(fp, "reason", None)
    return str(reason(cluster)) if callable(reason) else "not available in this cluster state"


def _record(name: str, target: str, t0: float, details: dict[str, Any], error: str | None = None) -> InjectionRecord:
    return InjectionRecord(name, target, t0, time.time(), error is None, error, details)


class KillNode:
    name = "kill-node"

    def available(self, cluster: ChaosCluster) -> bool:
        return len(cluster.roster) >= 2

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        victim = rng.choice(sorted(cluster.roster))
        down_s = round(rng.uniform(0.5, 2.0), 2)
        t0 = time.time()
        cluster.kill_node(victim)
        took = cluster.wait_owned_without(victim, cluster.spec.lease_ttl_s + 10)
        time.sleep(down_s)
        cluster.start_node(victim)
        err = None if took is not None else "partitions not taken over within TTL + 10 s"
        return _record(self.name, victim, t0, {"signal_at": t0, "takeover_polled_s": took, "down_s": down_s}, err)


class PauseNode:
    name = "pause-node"

    def available(self, cluster: ChaosCluster) -> bool:
        return len(cluster.roster) >= 2

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        victim = rng.choice(sorted(cluster.roster))
        hold = 2.0 * cluster.spec.lease_ttl_s
        t0 = time.time()
        cluster.signal(victim, signal.SIGSTOP)
        try:
            took = cluster.wait_owned_without(victim, hold)
            time.sleep(max(0.0, t0 + hold - time.time()))
        finally:
            cluster.signal(victim, signal.SIGCONT)
        err = None if took is not None else f"partitions not taken over while paused {hold}s"
        return _record(self.name, victim, t0, {"signal_at": t0, "paused_s": hold, "takeover_polled_s": took}, err)


class DeployNode:
    name = "deploy-node"

    def available(self, cluster: ChaosCluster) -> bool:
        return len(cluster.roster) >= 2

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        victim = rng.choice(sorted(cluster.roster))
        t0 = time.time()
        cluster.signal(victim, signal.SIGTERM)
        took = cluster.wait_owned_without(victim, 10)
        code = cluster.await_exit(victim)
        cluster.start_node(victim)
        err = None if code == 0 else f"exit code {code} after SIGTERM"
        return _record(self.name, victim, t0, {"signal_at": t0, "handover_polled_s": took, "exit_code": code}, err)


class ScaleOut:
    name = "scale-out"

    def available(self, cluster: ChaosCluster) -> bool:
        return len(cluster.roster) < cluster.spec.max_nodes

    def reason(self, cluster: ChaosCluster) -> str:
        return f"already {len(cluster.roster)} nodes (max {cluster.spec.max_nodes})"

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        taken = set(cluster.base_nodes) | set(cluster.extras)
        name = next(f"n{i}" for i in range(1, 100) if f"n{i}" not in taken)
        t0 = time.time()
        cluster.extras.append(name)
        cluster.start_node(name)
        converge = cluster.pc.wait_converged(cluster.roster, timeout=30)
        return _record(self.name, name, t0, {"converged_s": round(converge, 3), "nodes": len(cluster.roster)})


class ScaleIn:
    name = "scale-in"

    def available(self, cluster: ChaosCluster) -> bool:
        return any(n in cluster.roster for n in cluster.extras)

    def reason(self, cluster: ChaosCluster) -> str:
        return "no node added by scale-out is running"

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        victim = rng.choice(sorted(n for n in cluster.extras if n in cluster.roster))
        t0 = time.time()
        cluster.signal(victim, signal.SIGTERM)
        took = cluster.wait_owned_without(victim, 10)
        code = cluster.await_exit(victim)
        cluster.extras.remove(victim)
        err = None if code == 0 else f"exit code {code} after SIGTERM"
        return _record(self.name, victim, t0, {"signal_at": t0, "handover_polled_s": took, "exit_code": code,
                                               "nodes": len(cluster.roster)}, err)


class KillEtcdLeader:
    name = "kill-etcd-leader"

    def available(self, cluster: ChaosCluster) -> bool:
        return len(cluster.pc.etcd.members) >= 3

    def reason(self, cluster: ChaosCluster) -> str:
        return "etcd has fewer than 3 members"

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        down_s = round(rng.uniform(1.0, 3.0), 2)
        leader = cluster.etcd_leader()
        if leader is None:
            return _record(self.name, "etcd", time.time(), {}, "no etcd member reports being the leader")
        t0 = time.time()
        cluster.pc.etcd.kill_member(leader)
        elected = None
        try:
            while time.time() - t0 < 10:
                new = cluster.etcd_leader()
                if new is not None and new != leader:
                    elected = time.time() - t0
                    break
                time.sleep(0.05)
            time.sleep(max(0.0, t0 + down_s - time.time()))
        finally:
            cluster.pc.etcd.restart_member(leader)
        err = None if elected is not None else "no new leader within 10 s"
        return _record(self.name, f"etcd{leader}", t0, {"elected_s": elected, "down_s": down_s}, err)


class RestartPostgres:
    """Fast shutdown and start, `times` times one second apart (a crash-looping server). The
    instant within the second is drawn from rng (ticks fire on whole seconds, so it decides what is
    in flight), or fixed by `phase_s` for a regression scenario."""

    def __init__(self, name: str = "restart-postgres", phase_s: float | None = None, times: int = 1) -> None:
        self.name = name
        self.phase_s = phase_s
        self.times = times

    def available(self, cluster: ChaosCluster) -> bool:
        return True

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        phase = self.phase_s if self.phase_s is not None else round(rng.random(), 2)
        time.sleep((phase - time.time() % 1.0) % 1.0)
        t0 = time.time()
        took = []
        for i in range(self.times):
            if i:
                time.sleep((phase - time.time() % 1.0) % 1.0 or 1.0)
            t = time.time()
            cluster.pc.pg.restart()
            took.append(round(time.time() - t, 3))
        return _record(self.name, "postgres", t0, {"phase_s": phase, "restart_s": took})


def _wait_busy(cluster: ChaosCluster, worker: str, timeout_s: float = 8.0) -> list[tuple[str, str]]:
    """Runs the worker holds a lease on; waits (bounded) for one, preferring a long job."""
    t0 = time.time()
    busy: list[tuple[str, str]] = []
    while time.time() - t0 < timeout_s:
        busy = cluster.busy_executions(worker)
        if any(t == "long" for _, t in busy) or (busy and time.time() - t0 > timeout_s / 2):
            break
        time.sleep(0.05)
    return busy


class KillWorker:
    name = "kill-worker"

    def available(self, cluster: ChaosCluster) -> bool:
        return bool(cluster.workers)

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        w = rng.choice(sorted(cluster.workers))
        down_s = round(rng.uniform(0.5, 2.0), 2)
        busy = _wait_busy(cluster, w)
        t0 = time.time()
        cluster.kill_worker(w)
        time.sleep(down_s)
        cluster.start_worker(w)
        return _record(self.name, w, t0, {"running": [e for e, _ in busy], "types": sorted({t for _, t in busy}),
                                          "down_s": down_s})


class PauseWorker:
    name = "pause-worker"

    def available(self, cluster: ChaosCluster) -> bool:
        return bool(cluster.workers)

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        w = rng.choice(sorted(cluster.workers))
        hold = cluster.spec.worker_lease_s + 1.5
        busy = _wait_busy(cluster, w)
        t0 = time.time()
        cluster.signal(w, signal.SIGSTOP)
        try:
            time.sleep(hold)
        finally:
            cluster.signal(w, signal.SIGCONT)
        return _record(self.name, w, t0, {"running": [e for e, _ in busy], "types": sorted({t for _, t in busy}),
                                          "paused_s": hold})


class SkewNodeClock:
    name = "skew-node-clock"

    def available(self, cluster: ChaosCluster) -> bool:
        return any(n in cluster.roster for n in cluster.base_nodes)

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        victim = rng.choice(sorted(n for n in cluster.base_nodes if n in cluster.roster))
        skew = round(rng.choice((-1.0, 1.0)) * rng.uniform(0.3, 1.0), 2)
        hold = round(rng.uniform(4.0, 6.0), 2)
        t0 = time.time()
        codes = [cluster.stop_node(victim)]
        try:
            cluster.start_node(victim, skew_s=skew)
            cluster.pc.wait_converged(cluster.roster, timeout=30)
            time.sleep(hold)
        finally:
            if victim in cluster.roster:
                codes.append(cluster.stop_node(victim))
            cluster.start_node(victim)
        err = None if all(c == 0 for c in codes) else f"exit codes {codes} after SIGTERM"
        return _record(self.name, victim, t0, {"skew_s": skew, "held_s": hold}, err)


class PartitionNode:
    """Cut a node off for `ttls` x TTL. Long cuts let TCP's retransmission backoff grow, so a write
    sent into the cut is delivered seconds after it heals (after the node has rejoined)."""

    def __init__(self, name: str = "partition-node", ttls: float = 2.0) -> None:
        self.name = name
        self.ttls = ttls

    def available(self, cluster: ChaosCluster) -> bool:
        return cluster.netns is not None and len(cluster.roster) >= 2

    def reason(self, cluster: ChaosCluster) -> str:
        if cluster.netns is None:
            return "nodes do not run in network namespaces here (see `chaos.netns.available()`)"
        return "fewer than 2 nodes"

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        assert cluster.netns is not None
        victim = rng.choice(sorted(cluster.roster))
        hold = self.ttls * cluster.spec.lease_ttl_s
        t0 = time.time()
        cluster.netns.partition(victim)
        try:
            took = cluster.wait_owned_without(victim, hold)
            time.sleep(max(0.0, t0 + hold - time.time()))
        finally:
            cluster.netns.heal(victim)
        err = None if took is not None else f"partitions not taken over while cut off {hold}s"
        return _record(self.name, victim, t0, {"signal_at": t0, "cut_s": hold, "takeover_polled_s": took}, err)


class LateKeepalive:
    """A keepalive answered after the trust window but before the drop (issue 14, hole 1): the
    node's partitions are untrusted for `late` seconds, then trusted again without ever having
    been dropped, so a firing path that treats "not trusted now" as "not ours" loses the ticks
    due meanwhile. Through the node's test-only hook (cluster/coordination/faults.py): the
    control file is consumed at the node's next keepalive (every TTL/3)."""

    name = "late-keepalive"

    def available(self, cluster: ChaosCluster) -> bool:
        return bool(cluster.roster)

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        victim = rng.choice(sorted(cluster.roster))
        # Up to the ~0.95 s the reply's own window allows (TTL 3 s: renewed 1 s apart, 0.6 s margin),
        # so the lapse usually spans a whole second, when the every-second schedules tick.
        late = round(rng.uniform(0.6, 0.9), 2)
        path = cluster.keepalive_fault_file(victim)
        before = len(cluster.pc.nodes[victim].log_events("test_fault_keepalive_delayed"))
        t0 = time.time()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"count": 1, "after_lapse_s": late}))
        tmp.replace(path)  # atomic: the node never reads half a file
        deadline = t0 + 3 * cluster.spec.lease_ttl_s
        while path.exists() and time.time() < deadline:
            time.sleep(0.05)
        consumed = not path.exists()
        path.unlink(missing_ok=True)
        time.sleep(cluster.spec.lease_ttl_s)  # the delayed reply lands within one TTL of its request
        delayed = len(cluster.pc.nodes[victim].log_events("test_fault_keepalive_delayed")) - before
        err = None if consumed and delayed == 1 else f"fault not applied (consumed={consumed}, delayed={delayed})"
        return _record(self.name, victim, t0, {"after_lapse_s": late, "consumed": consumed}, err)


class StallCompletion:
    """A node stopped in the middle of a transaction that holds row locks another node needs
    (chaos seed 4, stop 41: a completion batch's first round trip reached PostgreSQL just before
    the node was cut off; the run's row stayed locked for the seven seconds of the cut, and the
    owner's next fire of that overlap-`replace` schedule, which stops the schedule's active runs,
    waited on it and fired 2.02 s late). Through the nodes' test-only hook (cluster/dispatch/
    faults.py): the completion of the replace schedule's next run stalls after its first round
    trip for 2.5-3 x TTL, past that schedule's next tick (every 5 s). The session's
    transaction limit (the lease TTL, storage/db.py SessionLimits) must end it first, so that
    tick fires on time (fire_lag_bounded does not excuse this fault): PostgreSQL 17+ by its
    transaction_timeout, 15 and 16 by the nodes' sweep of sessions past the limit they carry
    (`Database.end_overrun_transactions`, since stop 43: before, this failpoint was not available
    there, and the stall held its rows as long as it lasted)."""

    name = "stall-completion"

    def available(self, cluster: ChaosCluster) -> bool:
        return self.reason(cluster) == ""

    def reason(self, cluster: ChaosCluster) -> str:
        if not cluster.workers or not cluster.roster:
            return "no worker or no node"
        if not self._schedule(cluster):
            return "no overlap-replace schedule every 5 s without jitter (traffic without overlap schedules)"
        return ""

    @staticmethod
    def _schedule(cluster: ChaosCluster) -> str:
        # Every 5 s without jitter (the stall, ended by the TTL, must end before the next tick), the
        # latest to complete a run first: under --generate the first by name may have every tick
        # skipped for its tenant's quota (seed 1: "fault not applied"), or tick every 3 s, so the
        # stall's end came after the next tick (seed 3: fire_lag_bounded). None such: not available.
        rows = cluster.pc.sql("SELECT id::text FROM schedules s WHERE overlap_policy = 'replace' AND NOT paused"
                              " AND deleted_at IS NULL AND cron = '*/5 * * * * *' AND jitter_s = 0"
                              " ORDER BY (SELECT max(finished_at) FROM executions e WHERE e.schedule_id = s.id"
                              " AND e.state = 'succeeded') DESC NULLS LAST, name LIMIT 1")
        return str(rows[0][0]) if rows else ""

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        ttl = cluster.spec.lease_ttl_s
        stall = round(rng.uniform(2.5, 3.0) * ttl, 2)
        schedule = self._schedule(cluster)
        path = cluster.stall_fault_file()
        before = {n: len(cluster.pc.nodes[n].log_events("test_fault_completion_stalled")) for n in cluster.roster}
        t0 = time.time()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schedule_id": schedule, "stall_s": stall}))
        tmp.replace(path)  # atomic: no node reads half a file
        while path.exists() and time.time() < t0 + 4 * 5.0:  # the schedule ticks every 5 s
            time.sleep(0.05)
        consumed = not path.exists()
        path.unlink(missing_ok=True)
        time.sleep(stall + 1.0 if consumed else 0.0)  # the stall (and its transaction) ends inside the record
        for taken in path.parent.glob(f"{path.name}.taken.*"):
            taken.unlink(missing_ok=True)
        stalled = [n for n in cluster.roster
                   if len(cluster.pc.nodes[n].log_events("test_fault_completion_stalled")) > before.get(n, 0)]
        target = stalled[0] if len(stalled) == 1 else "dispatch"
        err = None if consumed and len(stalled) == 1 else f"fault not applied (consumed={consumed}, nodes={stalled})"
        return _record(self.name, target, t0, {"schedule_id": schedule, "stall_s": stall, "consumed": consumed}, err)


FAILPOINTS: dict[str, Failpoint] = {fp.name: fp for fp in (
    KillNode(), PauseNode(), DeployNode(), ScaleOut(), ScaleIn(), KillEtcdLeader(), RestartPostgres(),
    KillWorker(), PauseWorker(), SkewNodeClock(), PartitionNode(),
    # Regressions: just after the nodes' fire batches of a second, so nothing flushes their pools'
    # dead connections before the change listener reconnects and resyncs; and three in a row.
    RestartPostgres("restart-postgres-after-tick", phase_s=0.05),
    RestartPostgres("restart-postgres-burst", phase_s=0.05, times=3),
    PartitionNode("partition-node-long", ttls=3.0),
    LateKeepalive(), StallCompletion(),
)}


class LongRetryHistory:
    """Jobs with a history of hundreds of failed attempts under multiplier 100 (issue 14, hole 2):
    the retry policy must decide their next attempt on both paths without overflowing, and no node
    may crash on them. Submitted through the API's command with run_at a few seconds ahead (so no
    worker takes them first: queued by the submit, claimable only from their run_at); their
    attempt counters are then set as a long history leaves them:

        doomed   `doomed` handler (always fails, retryable), attempt 994 of 1000, multiplier 100:
                 six more FailExecution calls at attempts 995..1000, then `dead`
        stalled  a `tick` job shown as running on a vanished worker at attempt 600 of 1000,
                 multiplier 100, past its 1 s timeout: the reaper retries it (the old SQL
                 backoff overflowed float8 here and took the partition owner down, then the next
                 owner), a worker runs it, it `succeeded`

    The record's details carry `expected` (execution id -> terminal state) for the checker
    (`chaos.checker.check_long_retry_history`); waits (bounded) for both to get there."""

    name = "long-retry-history"
    POLICY = {"initial_s": 0.05, "multiplier": 100.0, "max_s": 0.3, "max_attempts": 1000}
    # Not taken by any worker yet: scheduled, or queued ahead of its run_at (a job due within
    # QUEUED_AT_SUBMIT_WITHIN of its submission), which no claim takes before then.
    UNTAKEN = "state IN ('scheduled', 'queued') AND run_at > now()"

    def available(self, cluster: ChaosCluster) -> bool:
        return bool(cluster.workers)

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        from datetime import timedelta

        from cronwheel.client import Client, RetryPolicy

        t0 = time.time()
        tag = f"{int(t0 * 1000)}-{rng.randrange(10**6)}"
        p = self.POLICY
        policy = RetryPolicy(initial_backoff=timedelta(seconds=p["initial_s"]), backoff_multiplier=p["multiplier"],
                             max_backoff=timedelta(seconds=p["max_s"]), max_attempts=int(p["max_attempts"]))
        with Client(cluster.pc.addresses()) as cw:  # the public door, as the traffic
            doomed, stalled = (cw.submit(job_type, {"failpoint": self.name, "kind": kind}, delay=timedelta(seconds=3),
                                         retry_policy=policy, idempotency_key=f"{self.name}-{kind}-{tag}",
                                         tenant="chaos-a").id
                               for kind, job_type in (("doomed", "doomed"), ("stalled", "tick")))
        # The history a long run of failures leaves (set before the jobs are due, so no worker saw them).
        marked = cluster.pc.sql(
            f"UPDATE executions SET attempt = 994, fencing_token = 994 WHERE id = %s AND {self.UNTAKEN} RETURNING id",
            doomed)
        marked += cluster.pc.sql(
            "UPDATE executions SET state = 'running', attempt = 600, fencing_token = 600, timeout_s = 1,"
            " lease_owner = 'vanished-worker', lease_expires = now() + interval '1 hour',"
            " started_at = now() - interval '1 minute', heartbeat_at = now() - interval '1 minute'"
            f" WHERE id = %s AND {self.UNTAKEN} RETURNING id", stalled)
        if len(marked) != 2:
            return _record(self.name, "dispatch", t0, {"doomed": doomed, "stalled": stalled},
                           f"could not give the jobs their history ({len(marked)} of 2 rows still not due)")
        expected = {doomed: "dead", stalled: "succeeded"}
        reached: dict[str, str] = {}
        while time.time() - t0 < 40:
            rows = cluster.pc.sql("SELECT id::text, state, attempt FROM executions WHERE id = ANY(%s::uuid[])",
                                  list(expected))
            reached = {str(r[0]): f"{r[1]}@{r[2]}" for r in rows}
            if all(reached.get(i, "").split("@")[0] == s for i, s in expected.items()):
                break
            time.sleep(0.2)
        dead_nodes = [n for n in cluster.roster if not cluster.pc.nodes[n].alive()]
        err = None
        if dead_nodes:
            err = f"nodes crashed: {dead_nodes}"
        elif any(reached.get(i, "").split("@")[0] != s for i, s in expected.items()):
            err = f"jobs did not reach {expected} within 40 s: {reached}"
        return _record(self.name, "dispatch", t0, {"expected": expected, "reached": reached}, err)


FAILPOINTS[LongRetryHistory.name] = LongRetryHistory()


class RefuseCommits:
    """PostgreSQL refuses, at COMMIT, every transaction that sets a run `running` or `succeeded`
    (claims, heartbeats, completions) for 1-2 s, then accepts them again: a deferred constraint
    trigger on executions, dropped at the end. The claim and the completion batch are pipelined
    transactions, whose COMMIT error psycopg 3.3 mis-read (IndexError, or a connection left busy:
    storage.db.pipelined_transaction, stop 31). A refused claim must hand out no run, a refused
    completion is retried by its worker and lands once the refusal ends, and no node may crash.
    The record's details say how many COMMITs were refused (a sequence the trigger counts on:
    sequences are not rolled back)."""

    name = "refuse-commits"

    def available(self, cluster: ChaosCluster) -> bool:
        return bool(cluster.workers)

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        import psycopg

        hold = round(rng.uniform(1.0, 2.0), 2)
        t0 = time.time()
        with psycopg.connect(cluster.pc.dsn, autocommit=True) as c:
            c.execute("DROP SEQUENCE IF EXISTS chaos_refused_commits")
            c.execute("CREATE SEQUENCE chaos_refused_commits")
            c.execute("CREATE OR REPLACE FUNCTION chaos_refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
                      "BEGIN PERFORM nextval('chaos_refused_commits'); "
                      "RAISE EXCEPTION 'commit refused (chaos failpoint refuse-commits)'; END $$")
            try:
                c.execute("CREATE CONSTRAINT TRIGGER chaos_refuse_commit AFTER UPDATE ON executions "
                          "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.state IN ('running', 'succeeded')) "
                          "EXECUTE FUNCTION chaos_refuse_commit()")
                time.sleep(hold)
            finally:
                c.execute("DROP TRIGGER IF EXISTS chaos_refuse_commit ON executions")
            row = c.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM chaos_refused_commits"
                            ).fetchone()
        refused = int(row[0]) if row else 0
        dead_nodes = [n for n in cluster.roster if not cluster.pc.nodes[n].alive()]
        err = f"nodes crashed: {dead_nodes}" if dead_nodes else None
        return _record(self.name, "postgres", t0, {"hold_s": hold, "refused_commits": refused}, err)


FAILPOINTS[RefuseCommits.name] = RefuseCommits()


class KillMidUpstreamCompletion:
    """A node killed in the middle of the transaction that completes an upstream (issue 52): a
    one-off `tick` job A and a job B that waits for it are submitted; the completion of A stalls
    after its first round trip (A's row is succeeded in that transaction, and its trigger has
    queued B in it) through the nodes' test-only hook (cluster/dispatch/faults.py, by execution
    id), and the stalled node is SIGKILLed and started again. The transaction never commits:
    B must still be waiting, and A running. The worker's retried completion (or, if its lease
    lapsed, A's next attempt) then releases B exactly once: both end succeeded, B at attempt 1.
    The record's details carry `expected` (execution id -> terminal state) and what was seen
    while the node was down."""

    name = "kill-mid-upstream-completion"

    def available(self, cluster: ChaosCluster) -> bool:
        return bool(cluster.workers) and len(cluster.roster) >= 2

    def inject(self, cluster: ChaosCluster, rng: random.Random) -> InjectionRecord:
        from datetime import timedelta

        from cronwheel.client import Client

        t0 = time.time()
        tag = f"{int(t0 * 1000)}-{rng.randrange(10**6)}"
        path = cluster.stall_fault_file()
        before = {n: len(cluster.pc.nodes[n].log_events("test_fault_completion_stalled")) for n in cluster.roster}
        with Client(cluster.pc.addresses()) as cw:  # A is claimable from its run_at: the fault file is set first
            a = cw.submit("tick", {"failpoint": self.name}, delay=timedelta(seconds=2), tenant="chaos-a",
                          idempotency_key=f"{self.name}-a-{tag}").id
            b = cw.submit("tick", {"failpoint": self.name}, tenant="chaos-a", depends_on=[a],
                          idempotency_key=f"{self.name}-b-{tag}").id
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"execution_id": a, "stall_s": 60.0}))
        tmp.replace(path)
        while path.exists() and time.time() < t0 + 20:
            time.sleep(0.05)
        consumed = not path.exists()
        path.unlink(missing_ok=True)
        stalled: list[str] = []
        while consumed and not stalled and time.time() < t0 + 25:
            stalled = [n for n in cluster.roster
                       if len(cluster.pc.nodes[n].log_events("test_fault_completion_stalled")) > before.get(n, 0)]
            time.sleep(0.05)
        for taken in path.parent.glob(f"{path.name}.taken.*"):
            taken.unlink(missing_ok=True)
        details: dict[str, Any] = {"upstream": a, "dependent": b, "consumed": consumed, "stalled": stalled}
        if len(stalled) != 1:
            return _record(self.name, "dispatch", t0, details, f"fault not applied (consumed={consumed}, "
                                                               f"nodes={stalled})")
        victim = stalled[0]
        details["signal_at"] = time.time()  # the takeover is timed from the kill (checker_fencing)
        cluster.kill_node(victim)  # mid-transaction: PostgreSQL rolls it back when the socket closes
        down = cluster.pc.sql("SELECT id::text, state FROM executions WHERE id = ANY(%s::uuid[])", [a, b])
        details["while_down"] = {str(r[0]): r[1] for r in down}
        cluster.wait_owned_without(victim, cluster.spec.lease_ttl_s + 10)
        cluster.start_node(victim)
        expected = {a: "succeeded", b: "succeeded"}
        reached: dict[str, str] = {}
        while time.time() - t0 < 60:
            rows = cluster.pc.sql("SELECT id::text, state, attempt, waiting_for FROM executions"
                                  " WHERE id = ANY(%s::uuid[])", [a, b])
            reached = {str(r[0]): f"{r[1]}@{r[2]}" for r in rows}
            if all(reached.get(i, "").split("@")[0] == s for i, s in expected.items()):
                break
            time.sleep(0.2)
        details.update(expected=expected, reached=reached)
        err = None
        if details["while_down"].get(b) != "waiting":
            err = f"the dependent left waiting before its upstream's completion committed: {details['while_down']}"
        elif any(reached.get(i, "").split("@")[0] != s for i, s in expected.items()):
            err = f"jobs did not reach {expected} within 60 s: {reached}"
        elif reached.get(b, "") != "succeeded@1":
            err = f"the dependent ran more than once: {reached}"
        return _record(self.name, victim, t0, details, err)


FAILPOINTS[KillMidUpstreamCompletion.name] = KillMidUpstreamCompletion()
