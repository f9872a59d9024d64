"""One bucket of the timing wheel: parallel arrays, not per-timer objects.

A bucket stores its entries as three parallel sequences: ``ds`` (deadlines, ``array('d')``, 8
bytes each, no float objects kept), ``ss`` (insertion sequence numbers, ``array('q')``, 8 bytes
each, no int objects kept) and ``xs`` (the caller's items, a list of references). Entries
``[lo:]`` are stored; ``[:lo]`` is an already-expired prefix whose item references were dropped.

Invariants (relied on by ``TimingWheel`` for exact ordering):

- Entries with equal deadlines are stored in insertion (``seq``) order: entries are only ever
  appended in ``seq`` order, and sorting is stable.
- ``ordered`` is True only if ``ds[lo:]`` is non-decreasing.
- ``mn`` is never greater than the smallest stored deadline (it is exact for an ordered bucket
  and for one whose minimum was not cancelled).
- ``dead`` holds the ``seq`` of every cancelled entry still stored in ``[lo:]``, and only those.

Not task-safe; owned by one ``TimingWheel``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from itertools import repeat
from math import inf
from operator import itemgetter
from typing import Any

#: An expired prefix is trimmed away once it is this long and at least half the bucket.
_TRIM_AT = 4096
#: Cancelled entries are compacted away once at least this many make up half the bucket.
COMPACT_AT = 64

#: What an expiry hands back: deadlines, items, and whether the deadlines are non-decreasing.
Piece = tuple[Sequence[float], list[Any], bool]


class Bucket:
    """Parallel arrays of (deadline, seq, item). See the module docstring for invariants."""

    __slots__ = ("owner", "ds", "ss", "xs", "lo", "ordered", "last", "mn", "dead")

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.ds = array("d")
        self.ss = array("q")
        self.xs: list[Any] = []
        self.lo = 0
        self.ordered = True
        self.last = -inf
        self.mn = inf
        self.dead: set[int] = set()

    def __repr__(self) -> str:
        return f"Bucket(stored={len(self.ds) - self.lo}, live={self.live()}, ordered={self.ordered})"

    def live(self) -> int:
        """Number of stored entries that are not cancelled."""
        return len(self.ds) - self.lo - len(self.dead)

    def clear(self) -> None:
        """Forget every entry (the bucket object may still be referenced by stale handles)."""
        self.ds = array("d")
        self.ss = array("q")
        self.xs = []
        self.lo = 0
        self.ordered = True
        self.last = -inf
        self.mn = inf
        self.dead = set()

    def _rebuild(self, keep: Sequence[int]) -> None:
        """Keep only the entries at indices ``keep`` (in that order); drops tombstones."""
        ds, ss, xs = self.ds, self.ss, self.xs
        if len(keep) > 1:  # itemgetter gathers in C; with one index it returns a bare item
            pick = itemgetter(*keep)
            self.ds = nds = array("d", pick(ds))
            self.ss = array("q", pick(ss))
            self.xs = list(pick(xs))
        else:
            self.ds = nds = array("d", [ds[i] for i in keep])
            self.ss = array("q", [ss[i] for i in keep])
            self.xs = [xs[i] for i in keep]
        self.lo = 0
        self.dead = set()
        if nds:
            self.mn = nds[0] if self.ordered else min(nds)
            self.last = nds[-1] if self.ordered else max(nds)
        else:
            self.mn, self.last, self.ordered = inf, -inf, True

    def sort(self) -> None:
        """Sort stored entries by deadline (stable, so ties stay in seq order); purge cancelled."""
        ds, ss, dead = self.ds, self.ss, self.dead
        keys = ds.tolist()  # float objects once, instead of once per comparison
        keep = sorted(range(self.lo, len(ds)), key=keys.__getitem__)
        if dead:
            keep = [i for i in keep if ss[i] not in dead]
        self.ordered = True
        self._rebuild(keep)

    def compact(self) -> None:
        """Drop cancelled entries, keeping order. O(stored), paid for by the cancels."""
        ss, dead = self.ss, self.dead
        if dead:
            self._rebuild([i for i in range(self.lo, len(ss)) if ss[i] not in dead])

    def head(self) -> float:
        """A lower bound on the earliest live deadline; exact unless unordered with a dead min.

        For an ordered bucket, cancelled entries at the front are purged first (amortised O(1):
        each one is purged once).
        """
        dead = self.dead
        if self.ordered and dead:
            ds, ss, xs, lo, n = self.ds, self.ss, self.xs, self.lo, len(self.ds)
            while lo < n and ss[lo] in dead:
                dead.discard(ss[lo])
                xs[lo] = None
                lo += 1
            self.lo = lo
            self.mn = ds[lo] if lo < n else inf
        return self.mn

    def take_all(self) -> Piece:
        """Remove and return every live entry (in storage order) and whether it is ordered."""
        lo, ds, xs, ordered, dead = self.lo, self.ds, self.xs, self.ordered, self.dead
        if dead:
            ss = self.ss
            keep = [i for i in range(lo, len(ss)) if ss[i] not in dead]
            ds = array("d", map(ds.__getitem__, keep))
            xs = list(map(xs.__getitem__, keep))
        elif lo:
            ds, xs = ds[lo:], xs[lo:]
        self.clear()
        return ds, xs, ordered

    def take_until(self, now: float) -> Piece | None:
        """Remove and return the live entries with deadline <= ``now``, in order, or None."""
        if self.mn > now:
            return None
        if not self.ordered:
            self.sort()
        ds, lo = self.ds, self.lo
        hi = bisect_right(ds, now, lo)
        n = len(ds)
        if hi == n:
            return self.take_all()
        xs, dead = self.xs, self.dead
        d_out: Sequence[float] = ds[lo:hi]
        x_out = xs[lo:hi]
        if dead:
            seqs = self.ss[lo:hi]
            keep = [i for i, s in enumerate(seqs) if s not in dead]
            if len(keep) < hi - lo:
                d_out = array("d", map(d_out.__getitem__, keep))
                x_out = list(map(x_out.__getitem__, keep))
                dead.difference_update(seqs)
        # Drop our references to the returned items; the arrays keep plain numbers only.
        xs[lo:hi] = repeat(None, hi - lo)
        self.lo = lo = hi
        self.mn = ds[lo]
        if lo >= _TRIM_AT and 2 * lo >= n:
            del ds[:lo], self.ss[:lo], xs[:lo]
            self.lo = 0
        return d_out, x_out, True
