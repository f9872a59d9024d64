"""Failover benchmark: `python -m bench.failover [--trials 10] [--ttl 3] [--partitions 32]`.

Three real node processes on a real etcd and PostgreSQL. Each trial takes one node down and
measures the time until every partition it owned is owned again, in etcd AND recorded in the
PostgreSQL fencing record by a surviving node (only then can anything fire), then brings it back
and waits for the cluster to converge:

- SIGKILL: nobody releases anything; the survivors wait for the victim's etcd lease to expire
  (TTL), so the takeover time is bounded below by the TTL. The baseline printed next to it is
  the configured TTL itself (ratio = takeover / TTL).
- SIGTERM (deploy): the victim releases its partitions and revokes its lease; target < 1 s.

Medians and maxima over the trials (the machine is small and noisy).
"""

from __future__ import annotations

import argparse
import signal
import statistics

from cronwheel.devtools.harness import ProcessCluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--ttl", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=32)
    a = ap.parse_args()
    names = ["n1", "n2", "n3"]
    results: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    rejoin: list[float] = []
    with ProcessCluster(partitions=a.partitions, lease_ttl_s=a.ttl) as c:
        for n in names:
            c.start_node(n)
        c.wait_converged(names)
        for i in range(a.trials):
            for kind in ("SIGKILL", "SIGTERM"):
                victim = names[i % 3]
                if kind == "SIGKILL":
                    c.kill_node(victim)
                else:
                    c.nodes[victim].signal(signal.SIGTERM)
                # wait_owned_without measures from now: the signal was just sent
                took = c.wait_owned_without(victim, timeout=a.ttl * 4 + 10, poll_s=0.005)
                results[kind].append(took)
                c.nodes[victim].proc.wait(30)
                c.start_node(victim)
                rejoin.append(c.wait_converged(names, timeout=60))
                print(f"trial {i + 1:2d} {kind}: {took * 1000:7.0f} ms", flush=True)
    print(f"\nfailover over {a.trials} trials each, 3 nodes, {a.partitions} partitions, lease TTL {a.ttl} s:")
    for kind, xs in results.items():
        med, mx = statistics.median(xs), max(xs)
        target = "< TTL + 1 s" if kind == "SIGKILL" else "< 1 s"
        ok = mx < (a.ttl + 1 if kind == "SIGKILL" else 1.0)
        print(f"  {kind}: median {med * 1000:.0f} ms, max {mx * 1000:.0f} ms; takeover/TTL {med / a.ttl:.2f}x "
              f"(target {target} at max: {'met' if ok else 'NOT met'})")
    print(f"  rejoin (node back, ownership converged): median {statistics.median(rejoin) * 1000:.0f} ms, "
          f"max {max(rejoin) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
