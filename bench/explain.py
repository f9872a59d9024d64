"""Explain benchmark: `python -m bench.explain [--ticks 10000] [--repeat 5]`.

A schedule firing every second has 10,000 ticks in the window (made by inserting its history:
executions for most ticks, some skipped by overlap, a pause, a misfire event, ownership
history; setup, not the subject). Measured, median of --repeat runs:

- ExplainSchedule through gRPC against a real node, every page (1,000 ticks a page) until the
  last: the figure the target (< 2 s for 10,000 ticks) is about;
- the same explanation computed in-process from already loaded facts (pure CPU);
- baseline in the same run: only reading the window's execution rows (one SELECT), i.e. what
  any answer at all must at least pay.

Server code imported: cronwheel.cluster.commands.explain (explain, load_facts), the part the
in-process figure measures, and cronwheel.storage (PgStore, StoreConfig), the store it reads
the facts through.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import grpc

from cronwheel.cluster.commands.explain import explain, load_facts
from cronwheel.devtools.harness import ProcessCluster, create_schedules
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

P = 8


def setup(c: ProcessCluster, ticks: int) -> tuple[uuid.UUID, datetime, datetime]:
    [row] = create_schedules(c, [dict(tenant="default", name="every-second", cron="* * * * * *", timezone="UTC",
                                      job_type="x", misfire_policy="skip")])
    sid = uuid.UUID(row.id)
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    start = end - timedelta(seconds=ticks)
    c.sql("UPDATE schedules SET created_at = %s - interval '1 hour' WHERE id = %s RETURNING 1", start, sid)
    c.sql("""INSERT INTO executions (id, schedule_id, tenant, type, partition, scheduled_for, run_at, state,
                                    state_reason, trigger, attempt, fired_at)
             SELECT gen_random_uuid(), %s, 'default', 'x', %s, t, t,
                    CASE WHEN extract(epoch FROM t)::bigint %% 50 = 0 THEN 'skipped' ELSE 'succeeded' END,
                    CASE WHEN extract(epoch FROM t)::bigint %% 50 = 0 THEN 'overlap: forbid' END,
                    'cron', 1, t + interval '3 milliseconds'
               FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 second', interval '1 second') t
              WHERE t NOT BETWEEN %s::timestamptz + interval '100 seconds' AND %s::timestamptz + interval '200 seconds'
             RETURNING 1""", sid, row.partition, start, end, start, start)
    c.sql("""INSERT INTO events (at, tenant, kind, schedule_id, actor, data) VALUES
             (%s::timestamptz + interval '100 seconds', 'default', 'schedule_paused', %s, 'bench', '{}'),
             (%s::timestamptz + interval '150 seconds', 'default', 'schedule_resumed', %s, 'bench', '{}')
             RETURNING 1""",
          start, sid, start, sid)
    return sid, start, end


def rpc_explain(address: str, sid: uuid.UUID, start: datetime, end: datetime) -> int:
    with grpc.insecure_channel(address) as ch:
        stub = scheduler_pb2_grpc.SchedulerServiceStub(ch)
        token, n = "", 0
        while True:
            req = scheduler_pb2.ExplainScheduleRequest(schedule_id=str(sid), page_size=1000, page_token=token,
                                                       range=common_pb2.TimeRange())
            req.range.start_time.FromDatetime(start)
            req.range.end_time.FromDatetime(end)
            r = stub.ExplainSchedule(req, timeout=30)
            n += len(r.ticks)
            token = r.next_page_token
            if not token:
                return n


async def in_process(dsn: str, sid: uuid.UUID, start: datetime, end: datetime) -> tuple[float, float, int]:
    async with PgStore(StoreConfig(dsn=dsn, max_connections=2)) as store:
        t0 = time.perf_counter()
        rows = await store.explain.executions(sid, start, end)
        base = time.perf_counter() - t0
        facts = await load_facts(store, sid, None, start, end)
        t0 = time.perf_counter()
        lines = explain(facts, start, end, datetime.now(UTC))
        compute = time.perf_counter() - t0
        assert len(rows) > 0
        return base, compute, len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with ProcessCluster(partitions=P) as c:
        node = c.start_node("n1")
        c.wait_converged(["n1"])
        sid, start, end = setup(c, a.ticks)
        rpc, base, comp = [], [], []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            n = rpc_explain(node.address, sid, start, end)
            rpc.append(time.perf_counter() - t0)
            b, cpu, lines = asyncio.run(in_process(c.dsn, sid, start, end))
            base.append(b)
            comp.append(cpu)
        assert n == lines and n >= a.ticks, (n, lines)
        med, cpu = statistics.median(rpc), statistics.median(comp)
        print(f"explain {a.ticks:,} ticks ({n:,} lines): gRPC all pages {med * 1000:.0f} ms "
              f"(target < 2000 ms: {'met' if med < 2 else 'NOT met'}); pure compute {cpu * 1000:.0f} ms; "
              f"baseline SELECT of the executions alone {statistics.median(base) * 1000:.0f} ms "
              f"(explain/baseline {med / statistics.median(base):.1f}x); median of {a.repeat}")


if __name__ == "__main__":
    main()
