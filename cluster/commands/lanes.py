"""Queues and capabilities (issue 52 items 2 and 3): the names, and what a worker may lease.

A run names its queue (DEFAULT_QUEUE unless given) and may require capabilities, each
`key=value` ("gpu=a100", "region=eu"). It is stored as one canonical text (`capability_set`: the
items sorted and joined by ","; "" for none) which the claim compares by equality, per lane:
a worker names its queues (none: DEFAULT_QUEUE only) and advertises capabilities, and it leases
a run only if the run's queue is one of them and every capability the run requires is
advertised (storage/sql/queries/dispatch.sql `claim`, through cronwheel_claim_lanes). A worker
may cap how many runs of a queue it holds at once (`slots`: "long" at most 2), so one worker
process serves a long-job queue with a few slots and the default queue with the rest.

Capabilities are not schedule labels (a schedule's free-form tags for listing): they are only
what a run requires of a worker and what a worker offers. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cronwheel.errors import InvalidArgument

DEFAULT_QUEUE = "default"
MAX_QUEUE_NAME = 100
MAX_QUEUES = 32  # queues one worker names in one lease call
MAX_CAPABILITIES = 16  # capabilities a run requires, or a worker advertises
MAX_CAPABILITY = 100  # characters of one `key=value`
MAX_QUEUE_SLOTS = 1_000_000
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
_PART = re.compile(r"[A-Za-z0-9_.:/-]+")


def queue_name(field: str, value: str | None) -> str:
    """A queue's name: 1..100 of [A-Za-z0-9_.:-]; empty or None: DEFAULT_QUEUE."""
    if not value:
        return DEFAULT_QUEUE
    if len(value) > MAX_QUEUE_NAME or not _NAME.fullmatch(value):
        raise InvalidArgument(field, f"must be 1..{MAX_QUEUE_NAME} characters of letters, digits and "
                                     f"_ . : -, got {value[:120]!r}")
    return value


def capabilities(field: str, items: Iterable[str]) -> tuple[str, ...]:
    """Capabilities as `key=value` items (letters, digits, _ . : / - on each side), sorted, each
    once; at most MAX_CAPABILITIES."""
    out = set()
    for k, item in enumerate(items):
        key, eq, value = item.partition("=")
        if (not eq or len(item) > MAX_CAPABILITY or not _PART.fullmatch(key) or not _PART.fullmatch(value)):
            raise InvalidArgument(f"{field}[{k}]", f"must be key=value (letters, digits, _ . : / -; at most "
                                                   f"{MAX_CAPABILITY} characters), got {item[:120]!r}")
        out.add(item)
    if len(out) > MAX_CAPABILITIES:
        raise InvalidArgument(field, f"must hold at most {MAX_CAPABILITIES} capabilities, got {len(out)}")
    return tuple(sorted(out))


def capability_set(caps: Iterable[str]) -> str:
    """The stored form of a set of checked capabilities (executions.required_capabilities)."""
    return ",".join(sorted(set(caps)))


def capability_items(stored: str) -> tuple[str, ...]:
    """The capabilities of a stored set ("" : none)."""
    return tuple(stored.split(",")) if stored else ()


@dataclass(frozen=True, slots=True)
class WorkerLanes:
    """What one lease call may take: its queues, its slots per queue (at most that many runs
    of the queue held by the worker at once; a queue not here: no cap beyond the call's
    max_count), and the capabilities it advertises."""

    queues: tuple[str, ...] = (DEFAULT_QUEUE,)
    slots: tuple[tuple[str, int], ...] = ()
    capabilities: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[object, ...]:
        """Equal for calls that may take exactly the same runs (a long poll's scope)."""
        return (self.queues, self.slots, self.capabilities)


def worker_lanes(queues: Iterable[str], slots: Mapping[str, int], caps: Iterable[str]) -> WorkerLanes:
    """Check a lease call's queues (none: DEFAULT_QUEUE only), slots (each of a named queue,
    1..MAX_QUEUE_SLOTS) and capabilities; InvalidArgument names the field."""
    names = tuple(sorted({queue_name(f"queues[{k}]", q) for k, q in enumerate(queues)})) or (DEFAULT_QUEUE,)
    if len(names) > MAX_QUEUES:
        raise InvalidArgument("queues", f"must name at most {MAX_QUEUES} queues, got {len(names)}")
    # Kept under the queue's name as `names` has it: the claim matches slots to queues by name.
    queue_slots: dict[str, int] = {}
    for q, n in slots.items():
        name = queue_name("queue_slots", q)
        if name not in names:
            raise InvalidArgument("queue_slots", f"names queue {q!r}, which is not among queues {list(names)}")
        if name in queue_slots:
            raise InvalidArgument("queue_slots", f"names queue {name!r} twice")
        if not 1 <= n <= MAX_QUEUE_SLOTS:
            raise InvalidArgument("queue_slots", f"must be 1..{MAX_QUEUE_SLOTS} for queue {q!r}, got {n}")
        queue_slots[name] = n
    return WorkerLanes(names, tuple(sorted(queue_slots.items())), capabilities("capabilities", caps))


DEFAULT_LANES = WorkerLanes()  # a lease call naming no queue, slots or capabilities
