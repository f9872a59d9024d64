"""Hierarchical timing wheel: fire millions of timers to the tick, from memory.

The node preloads the next few minutes of due work and fires it from a ``TimingWheel``
(Varghese & Lauck's hierarchical wheel, as in Kafka's purgatory). It is a pure data structure:
no I/O, no threads, no clock reads -- time is an argument (float Unix seconds)::

    w: TimingWheel[str] = TimingWheel(start=clock.now_ts())   # tick 10 ms, 256 slots per level
    h = w.insert(deadline, "job-1")       # O(1), returns a Handle
    w.cancel(h)                           # O(1), True only if it removed a live entry
    due = w.advance(clock.now_ts())       # every item with deadline <= now, in order
    await clock.sleep_until_ts(w.next_deadline())   # never busy-polls

Concurrency contract: not task-safe. Call advance() from the firing task only, and insert()
and cancel() from that same task (or under the same lock).

Time and ticks
--------------
A deadline ``d`` belongs to tick ``k(d) = int((d - start) / tick)``. ``k`` is monotone in ``d``
(subtraction and division are correctly rounded), so ``k(d) < k(now)`` implies ``d <= now`` and
``k(d) > k(now)`` implies ``d > now``: whole buckets can be judged by their tick, and only the
bucket of ``k(now)`` needs its deadlines compared with ``now``. That is what makes "never early"
exact despite float deadlines.

Level ``L`` has ``slots`` buckets of ``slots**L`` ticks each. Its window is the ``slots``
consecutive blocks starting at the block holding the current tick ``cur``; a deadline goes to
the lowest level whose window holds its tick, in slot ``(k // slots**L) % slots``. Levels above
0 are created lazily, when a deadline first needs one. The bucket of ``cur``'s own block at a
level >= 1 (its *run*) receives no inserts: those ticks fall inside a lower level's window.
Entries inserted at or before the last advance go to a *pending* bucket and are returned by
the next advance.

Buckets store three parallel arrays -- deadlines (``array('d')``), sequence numbers
(``array('q')``) and items (a list) -- so a timer costs ~24 bytes plus growth slack, not an
object. Entries never move between buckets: when ``cur`` enters a bucket's block the bucket
itself becomes that level's run (sorted once, if it is not already in order) and is consumed
front to back with bisect. There is no per-item cascade, and so no per-item re-insert cost.

Worked example (start=0, tick=1 s, slots=4; level 0 has 1-tick buckets over ticks
[cur, cur+4), level 1 has 4-tick buckets over [cur//4*4, +16), level 2 16-tick ones over
[cur//16*16, +64)):

- at now=0 insert A@2.5 -> tick 2, level 0 slot 2; B@9 and C@9 -> tick 9, not < 4, < 16:
  level 1 slot 9//4 % 4 = 2; D@40 -> level 2 slot 40//16 % 4 = 2; E@-1 -> pending.
  ``next_deadline()`` is -1 (E is due).
- ``advance(3)`` -> ``['E', 'A']``: pending first, then level 0's ticks 0, 1 and 2 are wholly
  due (tick 3's bucket would be compared with now=3). ``next_deadline()`` is 9.
- ``advance(9)`` -> ``['B', 'C']``: level 1 moves from block 0 to block 2, whose bucket becomes
  the level-1 run; its prefix with deadline <= 9 is B then C (tie: insertion order).
- insert F@9.5 (tick 9 = cur: level 0 slot 1); ``cancel(D)`` -> True, ``cancel(D)`` -> False;
  ``len(w)`` is 1 and ``next_deadline()`` 9.5.
- ``advance(50)`` -> ``['F']``: level 2 passes blocks 0-2 (D is a tombstone and is dropped),
  levels 1 and 0 pass everything. ``cancel(A)`` -> False (already returned).

advance(now)
------------
With ``k = k(now)``, each level independently: if ``cur`` and ``k`` share its block, only the
prefix (deadline <= now, by bisect) of its run can be due. Otherwise the old run and the slots
of the blocks before ``k``'s are wholly due (list extend; no comparison per item), and ``k``'s
bucket becomes the new run, of which the prefix is due. At level 0 the bucket of ``k`` stays in
its slot (it still takes inserts). Cost: O(levels + buckets passed + items returned), plus one
C sort of a bucket the first time an unordered bucket is needed in order.

Invariants
----------
- Never early: an item is returned only by an advance(now) with now >= its deadline; and by the
  first such advance, so a caller advancing every tick sees it at most one tick late.
- Exactly once: each live entry is returned by exactly one advance, unless cancelled first.
- Order: the result is sorted by deadline, ties in insertion order -- the same list a sorted
  reference model gives. Why ties need no stored comparison: for a fixed deadline the level an
  insert picks never increases over time (windows only move forward) and entries never move,
  so among equal deadlines those at a higher level were inserted earlier; within a bucket they
  are appended in insertion order and sorts are stable. advance() therefore collects pieces
  pending first, then levels from the top down, each in block order, and a stable sort by
  deadline alone (skipped when the pieces are already in order end to end, as for a burst of a
  million equal deadlines, which is returned as one list without sorting) is exact.
- ``len(w)`` counts live entries: inserted, neither returned nor cancelled.

Cancel and handles
------------------
``insert`` returns a ``Handle`` holding the entry's bucket, seq and deadline; the wheel keeps
no reference to it. ``cancel`` adds the seq to that bucket's tombstone set (O(1)); expiry,
sorting and compaction drop tombstoned entries. Because entries never move, the handle's bucket
stays right however far the entry has come down the hierarchy. A bucket is compacted once
tombstones are at least half of it (and at least 64), so cancelled entries never hold more
than about as much memory as live ones (plus 64 per bucket); compaction is amortised O(1) per
cancel. Idempotency: cancel() clears the handle, so a second call is False; an entry whose seq
predates the last advance and whose deadline is <= that advance's ``now`` was returned, so
cancel() after expiry is False. A handle from another wheel is a ValueError.

next_deadline()
---------------
A lower bound: never later than the earliest live deadline. It is exact unless the earliest
stored entry of an unordered bucket is a tombstone (tombstones are purged lazily); then it is
that tombstone's deadline, and the advance() at that time purges it, so the firing loop wakes
at most once per such cancel and never spins: right after advance(now), next_deadline() is
> now unless entries were inserted at or before ``now`` since. None when the wheel is empty.

How it fails
------------
A NaN or infinite ``start``/deadline/``now``, a non-positive or non-finite ``tick``, ``slots``
< 2, an ``advance`` to before the last one, or a deadline too far ahead for its tick index to
be computed raise ``ValueError`` naming the value, with the wheel unchanged.

Known cost: the first time a level-1 (or higher) bucket is consumed it is sorted in one go if
its entries were not inserted in deadline order (a C sort, O(n log n) in that bucket). With the
defaults a level-1 bucket spans 2.56 s and the level-1 window 655 s, so a 2-minute preload never
reaches level 2, and a node holding 1M timers over 2 minutes sorts ~21k entries every 2.56 s:
that advance() takes ~15 ms instead of <1 ms (``python -m bench.wheel`` prints the figure).
"""

from __future__ import annotations

from .wheel import Handle, TimingWheel

__all__ = ["Handle", "TimingWheel"]
