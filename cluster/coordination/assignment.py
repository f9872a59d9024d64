"""Partition assignment: rendezvous hashing with bounded loads. Pure: a function of its inputs.

Every node computes the same assignment from the same member set. Each (node, partition) pair
has a score from a stable hash; a partition prefers nodes in descending score order (plain
rendezvous hashing, so a membership change moves few partitions). Plain rendezvous is only
balanced on average (with P=64 and N=3 a node can get 15 or 28), so loads are bounded: each
node takes at most floor(P/N) partitions in a first pass, and the P mod N left over go, one
each, to their highest-scoring nodes that have no extra yet. Every node ends with floor(P/N) or
ceil(P/N) partitions, and adding or removing one node moves about P/N of them (measured in the
tests and by `python -m bench.failover`).

Partitions are visited in a fixed order derived from the hash too (not 0..P-1), so which
partitions overflow to their second choice is spread evenly over the key space.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping


def score(node: str, partition: int) -> int:
    h = hashlib.blake2b(f"{node}\x00{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big")


def _visit_order(partitions: int) -> list[int]:
    return sorted(range(partitions), key=lambda p: score("\x01order", p))


def assign(members: Iterable[str], partitions: int) -> dict[int, str]:
    """partition -> node for the live `members`; empty when there are none."""
    nodes = sorted(set(members))
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if not nodes:
        return {}
    n = len(nodes)
    base, extra = divmod(partitions, n)
    load = dict.fromkeys(nodes, 0)
    out: dict[int, str] = {}
    prefs = {p: sorted(nodes, key=lambda nd: (score(nd, p), nd), reverse=True) for p in range(partitions)}
    leftover = []
    for p in _visit_order(partitions):
        for nd in prefs[p]:
            if load[nd] < base:
                load[nd] += 1
                out[p] = nd
                break
        else:
            leftover.append(p)
    got_extra: set[str] = set()
    for p in leftover:
        for nd in prefs[p]:
            if nd not in got_extra:
                got_extra.add(nd)
                out[p] = nd
                break
    assert len(got_extra) <= extra
    return out


def owned_by(assignment: Mapping[int, str], node: str) -> frozenset[int]:
    return frozenset(p for p, nd in assignment.items() if nd == node)


def moved(before: Mapping[int, str], after: Mapping[int, str]) -> int:
    """How many partitions change owner between two assignments."""
    return sum(1 for p in set(before) | set(after) if before.get(p) != after.get(p))
