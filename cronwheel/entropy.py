"""Random bytes for ids and keys, from a pool of `os.urandom` bytes per thread.

`os.urandom` releases the GIL around its system call, and the caller then waits to take it back,
up to the interpreter's switch interval (5 ms) when another thread of the process is busy: one
call for a 10-byte id cost 1.5 us alone and 151 us beside one busy Python thread (this machine).
Execution ids (cronwheel.storage.ids) and the Client's idempotency keys draw from a 4 KiB pool
instead, refilled with one call. The pool is per thread (no lock) and dropped in a forked child,
so a child never repeats its parent's bits. A shared leaf: the client may import it.
"""

from __future__ import annotations

import os
import threading

POOL_BYTES = 4096
_pool = threading.local()


def _forget_pool() -> None:
    global _pool
    _pool = threading.local()


os.register_at_fork(after_in_child=_forget_pool)


def random_bytes(n: int) -> bytes:
    """`n` bytes from os.urandom, through this thread's pool."""
    buf: bytes = getattr(_pool, "buf", b"")
    at: int = getattr(_pool, "at", 0)
    if at + n > len(buf):
        buf, at = os.urandom(max(n, POOL_BYTES)), 0
        _pool.buf = buf
    _pool.at = at + n
    return buf[at:at + n]
