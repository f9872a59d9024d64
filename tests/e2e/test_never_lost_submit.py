"""Issue 47 items 4 and 5 against two node processes (PostgreSQL, etcd, `cronwheel node` x2),
driven through the Client.

- The daily execution quota counts what was created, not what is left: a schedule firing every
  second with keep_last=0 (every finished run pruned at once) in a tenant with
  max_executions_per_day=5 runs at most 5 ticks that day (before the fix: one run per second, since
  each pruned run gave its room back).
- SubmitJobs calls holding the same idempotency keys in opposite orders, on two nodes at once,
  never deadlock: none fails (before the fix, a third of them failed with `deadlock detected`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from cronwheel.client import Client, JobSpec
from cronwheel.client.errors import ResourceExhausted
from cronwheel.devtools.harness import ProcessCluster

from .helpers import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NODE_ARGS = ("--retention-pause", "0.01", "--retention-idle", "0.2")
AUDIT = """
CREATE TABLE test_inserted (schedule_id uuid, tenant text, state text, state_reason text);
CREATE FUNCTION test_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO test_inserted VALUES (NEW.schedule_id, NEW.tenant, NEW.state, NEW.state_reason);
RETURN NEW; END $$;
CREATE TRIGGER test_audit AFTER INSERT ON executions FOR EACH ROW EXECUTE FUNCTION test_audit();
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    workdir: Path = tmp_path_factory.mktemp("never-lost") / "cluster"
    with ProcessCluster(partitions=8, lease_ttl_s=3, workdir=workdir) as c:
        with psycopg.connect(c.dsn, autocommit=True) as conn:
            conn.execute(AUDIT)
        c.start_node("n1", *NODE_ARGS)
        c.start_node("n2", *NODE_ARGS)
        c.wait_converged(["n1", "n2"])
        yield c


def test_keep_last_0_under_a_daily_quota_of_5_runs_at_most_5_ticks_that_day(cluster: ProcessCluster) -> None:
    c = cluster
    c.start_worker("quota-worker", "tests.e2e.jobs_module")
    with Client(c.addresses()) as client:
        client.create_tenant("q5", max_executions_per_day=5)
        s = client.create_schedule("q5-every-second", "* * * * * *", "ok", timezone="UTC", misfire_policy="skip",
                                   tenant="q5", keep_last=0)

    def inserted(state_filter: str) -> int:
        return int(c.sql(f"SELECT count(*) FROM test_inserted WHERE schedule_id = %s AND {state_filter}", s.id)[0][0])

    def pruned() -> int:
        got = c.sql("SELECT pruned FROM execution_pruned WHERE schedule_id = %s", s.id)
        return int(got[0][0]) if got else 0

    # 5 runs, finished and pruned (the room they took is not given back), then 15 more ticks.
    wait_until(lambda: pruned() >= 5, 60, "the first 5 runs to finish and be pruned", interval_s=0.1)
    wait_until(lambda: inserted("true") >= 20, 60, "15 more ticks", interval_s=0.1)
    ran = inserted("state_reason IS DISTINCT FROM 'quota: max_executions_per_day 5 used up (UTC day)'")
    refused = inserted("state = 'skipped' AND state_reason LIKE 'quota:%%'")
    print(f"keep_last=0, quota 5: {ran} ticks ran, {refused} skipped for the quota")
    assert ran <= 5, f"{ran} ticks ran under a daily quota of 5"
    assert refused >= 15
    # Submits are refused too: the tenant's day is used up although none of its rows are left.
    with Client(c.addresses()) as client, pytest.raises(ResourceExhausted):
        client.submit("ok", {}, tenant="q5")
    assert c.sql("SELECT count(*) FROM executions WHERE tenant = 'q5' AND schedule_id IS NULL") == [(0,)]


def test_submit_jobs_with_the_same_26_keys_in_opposite_orders_on_two_nodes_never_fail(
        cluster: ProcessCluster) -> None:
    """Rounds of 60 SubmitJobs calls at once, all holding the same 26 new keys: 30 send them
    forwards to n1, 30 backwards to n2, so that transactions insert the same keys in opposite
    orders. Every call answers, with the same execution for each key."""
    c = cluster
    n1, n2 = (c.nodes[n].address for n in ("n1", "n2"))
    calls, rounds = 60, 20
    errors: list[BaseException] = []
    with Client([n1]) as c1, Client([n2]) as c2, ThreadPoolExecutor(calls) as pool:
        for r in range(rounds):
            keys = [f"opp-{r}-{chr(ord('a') + i)}" for i in range(26)]
            start = threading.Barrier(calls)

            def call(client: Client, ks: list[str], start: threading.Barrier = start) -> dict[str, str]:
                jobs = [JobSpec("opp", {"k": k}, idempotency_key=k, delay=timedelta(hours=1)) for k in ks]
                start.wait(30)
                return {k: j.execution_id for k, j in zip(ks, client.submit_many(jobs), strict=True)}

            futs = [pool.submit(call, c1, keys) if i % 2 else pool.submit(call, c2, keys[::-1])
                    for i in range(calls)]
            answers = []
            for f in futs:
                try:
                    answers.append(f.result(60))
                except Exception as exc:  # noqa: BLE001 - counted and reported below
                    errors.append(exc)
            assert all(a == answers[0] for a in answers), f"round {r}: calls disagree on the keys' executions"
    assert not errors, f"{len(errors)} of {calls * rounds} calls failed: {errors[:3]}"
    assert c.sql("SELECT count(*) FROM executions WHERE idempotency_key LIKE 'opp-%%'") == [(26 * rounds,)]


def test_submit_jobs_of_many_chunks_with_the_same_keys_in_opposite_orders_never_fail(cluster: ProcessCluster) -> None:
    """A call of more than 250 jobs is written 250 at a time (each chunk's insert sent while the
    next is validated): its chunks are cut in key order, so two calls holding the same 1,000 keys
    in opposite orders take them in one order across their chunks too."""
    c = cluster
    n1, n2 = (c.nodes[n].address for n in ("n1", "n2"))
    calls, rounds = 8, 10
    errors: list[BaseException] = []
    with Client([n1]) as c1, Client([n2]) as c2, ThreadPoolExecutor(calls) as pool:
        for r in range(rounds):
            keys = [f"chunked-{r}-{i:04d}" for i in range(1000)]
            start = threading.Barrier(calls)

            def call(client: Client, ks: list[str], start: threading.Barrier = start) -> dict[str, str]:
                jobs = [JobSpec("opp", {"k": k}, idempotency_key=k, delay=timedelta(hours=1)) for k in ks]
                start.wait(30)
                return {k: j.execution_id for k, j in zip(ks, client.submit_many(jobs), strict=True)}

            futs = [pool.submit(call, c1, keys) if i % 2 else pool.submit(call, c2, keys[::-1])
                    for i in range(calls)]
            answers = []
            for f in futs:
                try:
                    answers.append(f.result(120))
                except Exception as exc:  # noqa: BLE001 - counted and reported below
                    errors.append(exc)
            assert all(a == answers[0] for a in answers), f"round {r}: calls disagree on the keys' executions"
    assert not errors, f"{len(errors)} of {calls * rounds} calls failed: {errors[:3]}"
    assert c.sql("SELECT count(*) FROM executions WHERE idempotency_key LIKE 'chunked-%%'") == [(1000 * rounds,)]
