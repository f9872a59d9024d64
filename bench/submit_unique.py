"""What unique jobs cost the submit path: `python -m bench.submit_unique [--repeat 3] [--baseline DIR]`.

Measures the submit path below gRPC (cluster.commands.runs + storage, one process, one embedded
PostgreSQL with fsync on for the whole run, a fresh database per measurement, 8 partitions), the
part the unique options change:

- bulk: SubmitJobs as the node runs it (`runs.submit_jobs`, brief answers), 10 calls of 1,000 jobs
  one after the other: jobs/s.
- single: SubmitJob as the node runs it (one `SubmitBatcher`, group commit, default window), 64
  concurrent callers, 3,000 jobs: jobs/s.

Each once with plain jobs (an idempotency key each, as the Client sends) and once with unique jobs
(`unique` by args, every payload distinct, so each creates an execution: the cost of computing
and checking the key, not of finding duplicates). `--baseline DIR`: a checkout of the code before
unique jobs (e.g. `git archive 8b1cfa2 | tar -x -C DIR`); its plain figures are measured in the
same run, alternating with this tree's, and the ratios printed.
Medians of `--repeat` runs. `--statement N` (with `--baseline`) first times the insert statement
alone in one process, the baseline's and this tree's alternating (`statement_ab`): what a plain
job pays in PostgreSQL, with the machine's drift cancelled.

Server code imported, the part it measures: cronwheel.cluster.commands.runs,
cronwheel.cluster.commands.submit_batcher and cronwheel.cluster.commands.unique over
cronwheel.storage (PgStore, StoreConfig; cronwheel.storage.migrate for each fresh database); and
for the statement timing, the insert statement itself: cronwheel.storage.executions and
cronwheel.storage.queries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BULK_CALLS, BULK_SIZE = 10, 1000
SINGLE_JOBS, SINGLE_CALLERS = 3000, 64
PACKAGES = {"v1": "proto/cronwheel/v1", "wheel": "wheel", "cron": "cron", "storage": "storage",
            "cluster": "cluster", "client": "client"}


async def measure(unique: bool, dsn: str) -> dict[str, float]:
    """Both figures on the empty database `dsn`, migrated here by this process's code."""
    from cronwheel.clock import SystemClock
    from cronwheel.cluster.commands import runs
    from cronwheel.cluster.commands.submit_batcher import SubmitBatcher
    from cronwheel.storage import PgStore, StoreConfig, migrate

    spec_kw: dict[str, object] = {}
    if unique:
        from cronwheel.cluster.commands.unique import UniqueSpec
        spec_kw["unique"] = UniqueSpec(by_args=True)
    n = 0

    def spec() -> runs.JobSpec:
        nonlocal n
        n += 1
        return runs.JobSpec(tenant="acme", type="t", payload={"customer": n}, idempotency_key=f"k{n}",
                            **spec_kw)  # type: ignore[arg-type]

    out: dict[str, float] = {}
    migrate(dsn, partitions=8)
    store = PgStore(StoreConfig(dsn=dsn, min_connections=4, max_connections=8))
    await store.open()
    try:
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        for _ in range(BULK_CALLS):
            jobs = [runs.prepare_job(spec(), now, 8) for _ in range(BULK_SIZE)]
            await runs.submit_jobs(store, jobs, now, brief=True)
        out["bulk_jobs_per_s"] = BULK_CALLS * BULK_SIZE / (time.perf_counter() - t0)
        batcher = SubmitBatcher(store, SystemClock())
        queue = list(range(SINGLE_JOBS))

        async def caller() -> None:
            while queue:
                queue.pop()
                await batcher.submit(runs.prepare_job(spec(), datetime.now(UTC), 8))

        t0 = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(SINGLE_CALLERS)))
        out["single_jobs_per_s"] = SINGLE_JOBS / (time.perf_counter() - t0)
        await batcher.close()
    finally:
        await store.close()
    return out


def _child(tree: str | None, unique: bool, dsn: str) -> dict[str, float]:
    """One measurement in a process of its own, importing cronwheel from `tree` (None: installed)."""
    code = "import asyncio, json, sys\n"
    if tree:
        code += ("sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]\n"
                 f"sys.path.insert(0, {tree!r})\n")
    here = str(Path(__file__).resolve())
    code += ("import importlib.util\n"  # this file by path: its tree's cronwheel/ must not shadow `tree`
             f"spec = importlib.util.spec_from_file_location('bench_submit_unique', {here!r})\n"
             "mod = importlib.util.module_from_spec(spec)\n"
             "spec.loader.exec_module(mod)\n"
             f"print(json.dumps(asyncio.run(mod.measure({unique!r}, {dsn!r}))))\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"measurement failed:\n{got.stderr}")
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def statement_ab(base_src: Path, rounds: int, size: int = 1000) -> dict[str, list[float]]:
    """The insert statement alone, plain jobs, in ONE process against one server, alternating:
    the baseline's `insert_submitted_many` on a database migrated by the baseline's migrations
    (no unique column or index), and this tree's on a database migrated by this tree (both arbiter
    forms: plain groups keep the idempotency key's, unique groups use the bare one). Same jobs,
    same JSON document; ms per 1,000-row statement (commit included). Since stop 45 this tree's
    brief statement answers nothing when every job went in (the node builds the rows), while the
    baseline's returns seven columns a row: against a baseline before that, "plain" includes that
    saving too, and only "plain" against "bare arbiter" is the unique arbiter's cost alone."""
    import psycopg

    from cronwheel.cluster.commands import runs
    from cronwheel.devtools.localservers import LocalPostgres
    from cronwheel.storage import migrate
    from cronwheel.storage.executions import BRIEF_COLUMNS, ExecutionsPort, _insert_query
    from cronwheel.storage.queries import parse

    old_sql = parse((base_src / "storage/sql/queries/executions.sql").read_text())["insert_submitted_many"]
    old_sql = old_sql.replace("RETURNING *", "RETURNING " + BRIEF_COLUMNS)  # as the node runs it (brief)
    variants = {"baseline": old_sql, "plain": _insert_query(True, False), "bare arbiter": _insert_query(True, True)}
    out: dict[str, list[float]] = {k: [] for k in variants}
    with LocalPostgres() as pg:
        dsns = {k: pg.create_database(f"bench_stmt_{i}") for i, k in enumerate(variants)}
        for name, dsn in dsns.items():
            if name == "baseline":
                with psycopg.connect(dsn, autocommit=True) as c:
                    for f in sorted((base_src / "storage/sql/migrations").glob("*.sql")):
                        c.execute(f.read_text())  # type: ignore[call-overload]
            else:
                migrate(dsn, partitions=8)
        conns = {k: psycopg.connect(dsn) for k, dsn in dsns.items()}
        now = datetime.now(UTC)
        n = 0
        try:
            for r in range(rounds):
                jobs = []
                for _ in range(size):
                    n += 1
                    jobs.append(runs.prepare_job(runs.JobSpec(tenant="acme", type="t", payload={"customer": n},
                                                              idempotency_key=f"k{n}"), now, 8))
                params = {**ExecutionsPort._many(jobs, now), "unless_quota": False}
                order = list(variants)[r % 3:] + list(variants)[:r % 3]
                for name in order:
                    t0 = time.perf_counter()
                    conns[name].execute(variants[name], params).fetchall()  # type: ignore[call-overload]
                    conns[name].commit()
                    out[name].append((time.perf_counter() - t0) * 1000)
        finally:
            for c in conns.values():
                c.close()
    return out


def _package_tree(src: Path) -> str:
    """A directory whose `cronwheel` package is the checkout `src` laid out as pyproject maps it."""
    pkg = src / "cronwheel"
    for name, rel in PACKAGES.items():
        link = pkg / name
        if not link.exists():
            os.symlink(src / rel, link)
    return str(src)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of the code before unique jobs")
    ap.add_argument("--statement", type=int, default=0, metavar="ROUNDS",
                    help="with --baseline: also time the insert statement alone, ROUNDS rounds (see statement_ab)")
    args = ap.parse_args()
    base = _package_tree(args.baseline.resolve()) if args.baseline else None
    if base and args.statement:
        ab = statement_ab(args.baseline.resolve(), args.statement)
        ref = statistics.median(ab["baseline"])
        print(f"insert statement, 1,000 plain jobs, medians of {args.statement} alternating rounds:")
        for k, v in ab.items():
            print(f"  {k:<13} {statistics.median(v):7.1f} ms  ratio {statistics.median(v) / ref:.2f}")
    runs_: dict[str, list[dict[str, float]]] = {"baseline plain": [], "plain": [], "unique": []}
    plan: list[tuple[str, str | None, bool]] = [("plain", None, False), ("unique", None, True)]
    if base:
        plan.insert(0, ("baseline plain", base, False))
    from cronwheel.devtools.localservers import LocalPostgres

    with LocalPostgres() as pg:  # one server for the run, a fresh database per measurement
        for r in range(args.repeat):
            for name, tree, unique in plan[r % len(plan):] + plan[:r % len(plan)]:  # rotated: none always first
                got = _child(tree, unique, pg.create_database(f"bench_unique_{r}_{name.replace(' ', '_')}"))
                runs_[name].append(got)
                print(f"repeat {r + 1}: {name:<15} SubmitJobs {got['bulk_jobs_per_s']:>8,.0f} jobs/s   "
                      f"SubmitJob {got['single_jobs_per_s']:>7,.0f} jobs/s", file=sys.stderr)
    if not args.repeat:
        return
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("bulk_jobs_per_s", "single_jobs_per_s")}
           for k, v in runs_.items() if v}
    ref = med.get("baseline plain", med["plain"])
    print(f"{'variant':<16} {'SubmitJobs jobs/s':>18} {'ratio':>6} {'SubmitJob jobs/s':>17} {'ratio':>6}")
    for k, v in med.items():
        print(f"{k:<16} {v['bulk_jobs_per_s']:>18,.0f} {v['bulk_jobs_per_s'] / ref['bulk_jobs_per_s']:>6.2f} "
              f"{v['single_jobs_per_s']:>17,.0f} {v['single_jobs_per_s'] / ref['single_jobs_per_s']:>6.2f}")
    if base:  # each repeat's variants ran back to back: their ratio drifts less than the figures
        print("median of the per-repeat ratios to the baseline:")
        for k in ("plain", "unique"):
            r = {m: statistics.median(x[m] / b[m] for x, b in zip(runs_[k], runs_["baseline plain"], strict=True))
                 for m in ("bulk_jobs_per_s", "single_jobs_per_s")}
            print(f"  {k:<14} SubmitJobs {r['bulk_jobs_per_s']:.2f}   SubmitJob {r['single_jobs_per_s']:.2f}")
    print(f"(medians of {args.repeat}; the variants alternate in a rotated order, each in a fresh process and "
          "database)")


if __name__ == "__main__":
    main()
