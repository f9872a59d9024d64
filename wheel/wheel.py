"""The hierarchical timing wheel: ``TimingWheel`` and its ``Handle``.

See the package docstring (``cronwheel.wheel``) for the design note, the worked example and
the invariants this module maintains.
"""

from __future__ import annotations

from array import array
from math import inf, isfinite
from typing import Any, ClassVar, Generic, TypeVar

from ._bucket import COMPACT_AT, Bucket, Piece

T = TypeVar("T")

__all__ = ["Handle", "TimingWheel"]


class Handle:
    """Ticket for one inserted entry; pass it to ``TimingWheel.cancel``.

    Owned by the caller: the wheel keeps no reference to it, so a caller that never cancels can
    drop it. It records the entry's ``seq`` and ``deadline`` and the bucket the entry lives in
    (entries never move between buckets), which is what makes ``cancel`` O(1).
    """

    __slots__ = ("_bucket", "_seq", "_deadline")

    def __init__(self, bucket: Bucket, seq: int, deadline: float) -> None:
        self._bucket: Bucket | None = bucket  # None once cancel() has seen this handle
        self._seq = seq
        self._deadline = deadline

    @property
    def seq(self) -> int:
        """Insertion sequence number: unique per wheel, increasing (the tie-breaker)."""
        return self._seq

    @property
    def deadline(self) -> float:
        """The deadline the entry was inserted with (Unix seconds)."""
        return self._deadline

    def __repr__(self) -> str:
        state = "issued" if self._bucket is not None else "cancel() called"
        return f"Handle(seq={self._seq}, deadline={self._deadline!r}, {state})"


def _merge(pieces: list[Piece]) -> list[Any]:
    """Concatenate pieces into one list ordered by deadline, ties in piece order.

    Pieces come in tie-break order (see the package docstring), each in seq order for equal
    deadlines, so a stable sort by deadline alone is exact. No sort happens when the pieces are
    already ordered end to end -- the common case, and always so for a same-instant burst.
    """
    if len(pieces) == 1 and pieces[0][2]:
        return pieces[0][1]
    prev = -inf
    for ds, _, ordered in pieces:
        if not ordered or ds[0] < prev:
            break
        prev = ds[-1]
    else:
        out: list[Any] = []
        for _, xs, _ in pieces:
            out += xs
        return out
    keys = array("d")
    items: list[Any] = []
    for ds, xs, _ in pieces:
        keys.extend(ds)
        items += xs
    return list(map(items.__getitem__, sorted(range(len(keys)), key=keys.__getitem__)))


class TimingWheel(Generic[T]):
    """Hierarchical timing wheel over float Unix seconds; time is passed in, never read.

    Not task-safe: call advance() from the firing task only; insert()/cancel() are O(1) and
    must run on the same task (or under the same lock) as advance().
    """

    #: Compact a bucket once this many tombstones are at least half of it (tests lower it).
    _COMPACT_AT: ClassVar[int] = COMPACT_AT

    __slots__ = (
        "_start", "_tick", "_slots", "_now", "_cur", "_seq", "_mark", "_gone", "_token",
        "_pending", "_levels", "_runs", "_spans", "_ends", "_counts",
    )

    def __init__(self, start: float, tick: float = 0.01, slots: int = 256) -> None:
        if not isinstance(start, (int, float)) or not isfinite(start):
            raise ValueError(f"start must be a finite number of seconds, got {start!r}")
        if not isinstance(tick, (int, float)) or not isfinite(tick) or tick <= 0:
            raise ValueError(f"tick must be a positive finite number of seconds, got {tick!r}")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 2:
            raise ValueError(f"slots must be an integer >= 2, got {slots!r}")
        self._start = float(start)
        self._tick = float(tick)
        self._slots = slots
        self._now = self._start  # time of the last advance (start until the first one)
        self._cur = 0  # tick index of _now: int((_now - _start) / _tick)
        self._seq = 0  # next insertion sequence number
        self._mark = 0  # _seq at the last advance: entries below it have been through one
        self._gone = 0  # entries returned or cancelled: len() is _seq - _gone
        self._token = object()  # identifies this wheel's buckets (rejects foreign handles)
        self._pending = Bucket(self._token)  # entries inserted with deadline <= _now
        self._levels: list[list[Bucket | None]] = [[None] * slots]
        self._runs: list[Bucket | None] = [None]  # per level >= 1: the bucket of _cur's block
        self._spans = [1]  # ticks per bucket at each level: slots ** level
        # Per level L: first tick past the level's window, (_cur // slots**L + slots) * slots**L;
        # then a 0 sentinel, so that ``k < ends[1]`` is simply False while level 1 is absent.
        self._ends = [slots, 0]
        self._counts = [0]  # buckets present per level (lets advance skip empty levels)

    # -- introspection -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Live entries: inserted, not yet returned by advance(), not cancelled."""
        return self._seq - self._gone

    def __repr__(self) -> str:
        return (
            f"TimingWheel(now={self._now!r}, tick={self._tick!r}, slots={self._slots}, "
            f"levels={len(self._levels)}, len={len(self)})"
        )

    @property
    def now(self) -> float:
        """Time of the last advance (the start time before the first one)."""
        return self._now

    @property
    def tick(self) -> float:
        """Seconds per level-0 bucket."""
        return self._tick

    @property
    def slots(self) -> int:
        """Buckets per level."""
        return self._slots

    @property
    def levels(self) -> int:
        """Levels created so far (an overflow level exists only once a deadline needed it)."""
        return len(self._levels)

    # -- insert and cancel -------------------------------------------------------------------

    def insert(self, deadline: float, item: T) -> Handle:
        """Schedule ``item`` at ``deadline`` (Unix seconds). O(1).

        A deadline at or before the last advance is returned by the next advance().
        Raises ValueError (state unchanged) if ``deadline`` is NaN or infinite.
        """
        if deadline - deadline != 0.0:  # NaN and +-inf; cheaper than isfinite() on this path
            raise ValueError(f"deadline must be a finite number of seconds, got {deadline!r}")
        if deadline <= self._now:
            b = self._pending
        else:
            try:
                k = int((deadline - self._start) / self._tick)
            except OverflowError:
                raise ValueError(self._too_far("deadline", deadline)) from None
            ends = self._ends
            if k < ends[0]:
                level = 0
                i = k % self._slots
            elif k < ends[1]:  # the common case for a horizon of minutes; ends[1] may be 0
                level = 1
                i = (k // self._slots) % self._slots
            else:
                level, i = self._locate(k)
            lvl = self._levels[level]
            got = lvl[i]
            if got is None:
                got = lvl[i] = Bucket(self._token)
                self._counts[level] += 1
            b = got
        seq = self._seq
        b.ds.append(deadline)
        b.ss.append(seq)
        b.xs.append(item)
        if deadline < b.last:
            b.ordered = False
        else:
            b.last = deadline
        if deadline < b.mn:
            b.mn = deadline
        self._seq = seq + 1
        return Handle(b, seq, deadline)

    def _too_far(self, what: str, value: float) -> str:
        return f"{what} {value!r} is too far from start {self._start!r} for tick {self._tick!r}"

    def _locate(self, k: int) -> tuple[int, int]:
        """(level, slot) for tick ``k`` beyond level 0, creating overflow levels as needed."""
        ends = self._ends
        level = 1
        while True:
            if level == len(self._levels):
                self._add_level()
            if k < ends[level]:
                return level, (k // self._spans[level]) % self._slots
            level += 1

    def _add_level(self) -> None:
        s = self._slots
        span = self._spans[-1] * s
        self._spans.append(span)
        self._ends.insert(-1, (self._cur // span + s) * span)
        self._levels.append([None] * s)
        self._runs.append(None)
        self._counts.append(0)

    def cancel(self, handle: Handle) -> bool:
        """Cancel the entry behind ``handle``. O(1) (amortised: see compaction).

        Returns True only if this call removed a live entry; False if the entry was already
        returned by advance() or already cancelled. Raises ValueError for a handle issued by
        another wheel.
        """
        b = handle._bucket
        if b is None:
            return False
        if b.owner is not self._token:
            raise ValueError(f"{handle!r} was issued by another TimingWheel")
        handle._bucket = None
        seq = handle._seq
        if seq < self._mark and handle._deadline <= self._now:
            return False  # went through an advance() at or after its deadline: returned
        dead = b.dead
        dead.add(seq)
        self._gone += 1
        if len(dead) >= self._COMPACT_AT and 2 * len(dead) >= len(b.ds) - b.lo:
            b.compact()
        return True

    # -- firing ------------------------------------------------------------------------------

    def advance(self, now: float) -> list[T]:
        """Move time to ``now``; return every live item with deadline <= now, exactly once.

        Ordered by deadline, ties in insertion order. Raises ValueError (state unchanged) if
        ``now`` is NaN, infinite, or earlier than the last advance.
        """
        if now - now != 0.0:
            raise ValueError(f"now must be a finite number of seconds, got {now!r}")
        if now < self._now:
            raise ValueError(f"cannot advance to {now!r}: earlier than the last advance {self._now!r}")
        try:
            k = int((now - self._start) / self._tick)
        except OverflowError:
            raise ValueError(self._too_far("now", now)) from None
        pieces: list[Piece] = []
        pending = self._pending
        if len(pending.ds):
            got = pending.take_all()
            if got[1]:
                pieces.append(got)
        if k == self._cur:
            runs = self._runs
            for level in range(len(runs) - 1, 0, -1):
                self._take_run(level, now, pieces)
            self._take_slot(0, k % self._slots, now, pieces)
        else:
            self._jump(k, now, pieces)
        self._now = now
        self._mark = self._seq
        out = _merge(pieces) if pieces else []
        self._gone += len(out)
        return out

    def _take(self, b: Bucket, now: float, pieces: list[Piece]) -> None:
        got = b.take_until(now)
        if got is not None and got[1]:
            pieces.append(got)

    def _take_run(self, level: int, now: float, pieces: list[Piece]) -> None:
        run = self._runs[level]
        if run is not None:
            self._take(run, now, pieces)
            if len(run.ds) == run.lo:
                self._runs[level] = None

    def _take_slot(self, level: int, i: int, now: float, pieces: list[Piece]) -> None:
        lvl = self._levels[level]
        b = lvl[i]
        if b is not None:
            self._take(b, now, pieces)
            if len(b.ds) == b.lo:
                lvl[i] = None
                self._counts[level] -= 1

    def _drain_slot(self, level: int, i: int, pieces: list[Piece]) -> None:
        lvl = self._levels[level]
        b = lvl[i]
        if b is not None:
            lvl[i] = None
            self._counts[level] -= 1
            got = b.take_all()
            if got[1]:
                pieces.append(got)

    def _drain_run(self, level: int, pieces: list[Piece]) -> None:
        run = self._runs[level]
        if run is not None:
            self._runs[level] = None
            got = run.take_all()
            if got[1]:
                pieces.append(got)

    def _jump(self, k: int, now: float, pieces: list[Piece]) -> None:
        """Advance from tick ``_cur`` to tick ``k > _cur``; see "advance" in the package doc.

        Levels are independent (each has its own window); they are visited from the top down
        so that pieces come in tie-break order, and each level's pieces in block order.
        """
        s, cur, ends, spans, runs = self._slots, self._cur, self._ends, self._spans, self._runs
        for level in range(len(self._levels) - 1, -1, -1):
            span = spans[level]
            cb, kb = cur // span, k // span
            if kb == cb:  # same block: only the prefix of this level's run can be due
                self._take_run(level, now, pieces)
                continue
            ends[level] = (kb + s) * span
            last = min(kb, cb + s)  # blocks [cb, last) are wholly before k; later ones wrap
            if level:
                self._drain_run(level, pieces)  # block cb
                if self._counts[level]:
                    for b in range(cb + 1, last):
                        self._drain_slot(level, b % s, pieces)
                if kb < cb + s:  # k's bucket was in the window: it becomes the run, in place
                    lvl = self._levels[level]
                    i = kb % s
                    run = lvl[i]
                    if run is not None:
                        lvl[i] = None
                        self._counts[level] -= 1
                        runs[level] = run
                        self._take_run(level, now, pieces)
            else:
                if self._counts[0]:
                    for b in range(cb, last):
                        self._drain_slot(0, b % s, pieces)
                    self._take_slot(0, k % s, now, pieces)
        self._cur = k

    # -- sleeping ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the firing loop should next call advance(); None if the wheel is empty.

        A lower bound, never later than the earliest live deadline, and equal to it unless the
        earliest stored entry of an unsorted bucket was cancelled (cancelled entries are purged
        lazily); then it is that cancelled entry's deadline, and the advance() at that time
        purges it. Right after advance(now) it is > now unless entries were inserted at or
        before now since. O(levels * slots) worst case.
        """
        best = inf
        pending = self._pending
        if pending.live():
            best = pending.head()
        s, cur = self._slots, self._cur
        for level, lvl in enumerate(self._levels):
            run = self._runs[level]
            if run is not None and run.live():
                best = min(best, run.head())
            if self._counts[level]:
                first = cur // self._spans[level] + (1 if level else 0)
                for b in range(first, first + s):  # block order: the first live one is least
                    got = lvl[b % s]
                    if got is not None and got.live():
                        best = min(best, got.head())
                        break
        return None if best == inf else best
