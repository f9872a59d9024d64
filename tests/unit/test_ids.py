"""Execution ids are RFC 9562 version 7 UUIDs: time first, so they sort by the millisecond."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronwheel import entropy
from cronwheel.storage.ids import new_execution_id, uuid7

MS = st.integers(0, (1 << 48) - 1)
RAND = st.binary(min_size=10, max_size=10)


@given(MS, RAND)
def test_layout_is_version_7_rfc_variant_with_the_milliseconds_first(ms: int, rand: bytes) -> None:
    u = uuid7(ms, rand)
    assert u.version == 7 and u.variant == uuid.RFC_4122
    assert int.from_bytes(u.bytes[:6], "big") == ms
    # Only the version nibble and the two variant bits of the random part are overwritten.
    assert u.bytes[6] & 0x0F == rand[0] & 0x0F and u.bytes[7:8] == rand[1:2]
    assert u.bytes[8] & 0x3F == rand[2] & 0x3F and u.bytes[9:] == rand[3:]


@given(MS, MS, RAND, RAND)
def test_a_later_millisecond_sorts_after(a: int, b: int, ra: bytes, rb: bytes) -> None:
    if a < b:
        ua, ub = uuid7(a, ra), uuid7(b, rb)
        assert ua < ub and str(ua) < str(ub) and ua.bytes < ub.bytes


def test_out_of_range_input_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unix_ms"):
        uuid7(1 << 48, bytes(10))
    with pytest.raises(ValueError, match="unix_ms"):
        uuid7(-1, bytes(10))
    with pytest.raises(ValueError, match="rand"):
        uuid7(0, bytes(9))


def test_fresh_ids_are_v7_distinct_and_ordered_across_milliseconds() -> None:
    ids = [new_execution_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(u.version == 7 for u in ids)
    ms = [int.from_bytes(u.bytes[:6], "big") for u in ids]
    assert ms == sorted(ms)


def test_ids_draw_their_random_bits_from_a_pool_not_a_system_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.urandom releases the GIL; beside a busy thread each call waited up to 5 ms to take it
    back (151 us an id against 1.5 us). Fails with an os.urandom call per id."""
    calls: list[int] = []
    real = os.urandom

    def counting(n: int) -> bytes:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(entropy.os, "urandom", counting)
    got = {new_execution_id() for _ in range(1000)}
    assert len(got) == 1000
    assert len(calls) <= 4  # 409 ids per 4 KiB refill, one more if the pool was part used


def test_a_forked_child_does_not_repeat_its_parents_random_bits() -> None:
    entropy.random_bytes(1)  # this thread's pool holds bytes the child would inherit
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next 64 bytes and leave at once
        os.close(r)
        os.write(w, entropy.random_bytes(64))
        os._exit(0)
    os.close(w)
    child = b""
    while len(child) < 64:
        chunk = os.read(r, 64)
        if not chunk:
            break
        child += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert len(child) == 64 and child != entropy.random_bytes(64)
