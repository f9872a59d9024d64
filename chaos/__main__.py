"""`python -m chaos`: the fault-injection suite.

    python -m chaos run [--scenario NAME|all] [--seed N] [--duration S] [--nodes N] [--workers M]
                        [--out DIR] [--keep] [--include-known-bugs] [--generate [--herd N]]
    python -m chaos check RUN_DIR          judge a kept history.json again (exit 1 on a violation)
    python -m chaos list                   scenarios and failpoints
    python -m chaos plan --seed N          the fault timeline a seed injects

Exit codes: 0 every invariant held, 1 an invariant was violated, 2 bad usage, 3 the run itself
broke (a process did not start, ...). A run that does not pass keeps its history and logs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from chaos.scenarios import SCENARIOS, plan, without_known_bugs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m chaos", description="cronwheel fault-injection suite")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a scenario and check its history")
    r.add_argument("--scenario", default="all", choices=sorted(SCENARIOS),
                   help="scenario (default all: every failpoint on one timeline)")
    r.add_argument("--seed", type=int, default=1, help="seed of the fault timeline and the traffic (default 1)")
    r.add_argument("--duration", type=float, default=60.0, help="seconds of fault injection (default 60)")
    r.add_argument("--nodes", type=int, default=3, help="scheduler nodes (default 3)")
    r.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    r.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "cronwheel-chaos",
                   help="where runs keep reports, history and logs (default $TMPDIR/cronwheel-chaos)")
    r.add_argument("--keep", action="store_true", help="keep the logs of a passing run too")
    r.add_argument("--json", action="store_true", help="print the report as JSON instead of the summary")
    r.add_argument("--generate", action="store_true",
                   help="draw schedules from the whole policy space and API operations at random instants "
                        "(chaos.generate), checked against the reference model (chaos.model)")
    r.add_argument("--herd", type=int, default=200,
                   help="--generate: how many allow schedules share one instant every 10 s (default 200)")
    r.add_argument("--include-known-bugs", action="store_true",
                   help="`all` only: also inject what triggers the known bugs (chaos.scenarios.KNOWN_BUGS)")
    c = sub.add_parser("check", help="judge a kept run again from its history.json")
    c.add_argument("run_dir", type=Path)
    sub.add_parser("list", help="scenarios and their failpoints")
    pl = sub.add_parser("plan", help="print the fault timeline of a scenario and seed")
    pl.add_argument("--scenario", default="all", choices=sorted(SCENARIOS))
    pl.add_argument("--seed", type=int, default=1)
    pl.add_argument("--steps", type=int, default=16)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        for s in SCENARIOS.values():
            print(f"{s.name:<22} {s.description}\n{'':<22} failpoints: {', '.join(s.failpoints)}")
        return 0
    if args.command == "plan":
        scenario, notes = without_known_bugs(SCENARIOS[args.scenario])
        for n in notes:
            print(f"note: {n}")
        for step in plan(scenario, args.seed)[:args.steps]:
            print(f"{step.index:3d}  {step.failpoint:<17} rng seed {step.seed:<11} then {step.gap_s}s quiet")
        return 0
    if args.command == "check":
        return _check(args.run_dir)
    if args.duration <= 0:
        print("python -m chaos: error: --duration must be positive", file=sys.stderr)
        return 2
    if not 0 <= args.herd <= 5000:
        print(f"python -m chaos: error: --herd must be 0..5000, got {args.herd}", file=sys.stderr)
        return 2
    from chaos.cluster import ClusterSpec
    from chaos.runner import RunConfig, run

    try:
        ClusterSpec(nodes=args.nodes, workers=args.workers).validate()
    except ValueError as exc:
        print(f"python -m chaos: error: {exc}", file=sys.stderr)
        return 2
    code, rep = run(RunConfig(SCENARIOS[args.scenario], args.seed, args.duration, args.out, args.nodes,
                              args.workers, args.keep, args.include_known_bugs, args.generate, args.herd))
    from chaos.report import summary

    print(json.dumps(rep, indent=1, default=str) if args.json else summary(rep), flush=True)
    return code


def _check(run_dir: Path) -> int:
    from dataclasses import replace

    from chaos.checker import check, passed
    from chaos.collect import process_names, read_log_events
    from chaos.history import load_history

    h = load_history(run_dir / "history.json")
    if (logs := run_dir / "cluster").is_dir():  # the logs are kept: read their events as a new run would
        h = replace(h, log_events=read_log_events(logs, process_names(logs)))
    results = check(h)
    for r in results:
        counts = {k: v for k, v in r.counts.items() if k != "takeovers"}
        print(f"{'PASS' if r.ok else 'FAIL'} {r.name:<26} {json.dumps(counts)}")
        for v in r.violations[:20]:
            print(f"     - {v}")
    return 0 if passed(results) else 1


if __name__ == "__main__":
    sys.exit(main())
