"""The coordination shell: etcd membership, partition keys, epochs recorded in PostgreSQL.

Keys (under `/<cluster>/`):
    members/<node-id>      {"node", "address", "pid"} under the node's lease
    partitions/<p>         "<node-id>" under the owner's lease; its create revision is the epoch

Tasks (one TaskGroup, see `run()`):
    lease       grant a lease, register the member key, keep it alive every renew_every_s;
                every success moves the TrustWindow (anchored at the attempt's start)
    watchdog    the moment the window closes, drop every partition (before etcd says anything)
                and abandon the lease: ownership comes back only by new keys with new epochs
    watch       read the whole prefix, then watch it; any change wakes the reconciler
    reconcile   compare the rendezvous assignment with the keys: create the keys of assigned
                free partitions (txn: create_revision == 0), record their epochs in PostgreSQL
                (`record_epoch`, WHERE epoch < new) and only then announce them; release
                partitions no longer assigned (listener finishes its batch, then delete with a
                compare on owner and create revision)
    history     write the ownership-history rows (acquired / released / lost) queued by the
                others, in order; PostgreSQL away skips a row (diagnostics, not a safety record)
    unowned     every resync_every_s, while trusted: partitions with no live holder for
                unowned_alert_after_s raise the partition_unowned alert (unowned.py), once per gap
                across the cluster (`PartitionsPort.report_unowned`); PostgreSQL away: next round

Time comes only from the injected `Clock` (`clock.sleep`, `clock.wait`, `clock.monotonic`), so a
test on a `FakeClock` drives the trust watchdog without waiting. `faults.py` holds a test-only
hook (off unless its environment variable is set) that delays keepalive replies.

Standing down (`stand_down`, the clock-skew guard's verdict, clock_skew.py): the node withdraws
its member key, so the rendezvous assignment of every node leaves it out; its reconcile releases
every partition it holds (reason `clock skew`) and `epoch_if_trusted` answers None from that
moment, before the release finishes. `stand_up` puts the member key back under the lease; the
assignment then gives the node its share again. Both are states the reconcile loop converges to
(the member key is put or deleted there, retried like any etcd call).

States of a partition on this node: free -> held (our key exists) -> owned (epoch recorded,
listener told) -> released | lost. Only `owned` partitions are acted on, and only while the trust
window is open (`epoch_if_trusted`).

How it fails: etcd unreachable: the lease task retries with backoff while the window is open;
when it closes, everything is dropped. PostgreSQL unreachable: keys are kept, epochs are recorded
once it answers; the firing path stops by itself on write errors. Malformed keys are logged once
and ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Protocol

from cronwheel.backoff import backoff_s
from cronwheel.clock import Clock
from cronwheel.cluster.coordination.assignment import assign
from cronwheel.cluster.coordination.etcd import KV, Etcd
from cronwheel.cluster.coordination.faults import KeepaliveFaults
from cronwheel.cluster.coordination.partition_lease import Ownership, PartitionLeaseConfig, TrustWindow
from cronwheel.cluster.coordination.unowned import UnownedWatch
from cronwheel.errors import Unavailable
from cronwheel.storage.partitions import PartitionsPort

log = logging.getLogger("cronwheel.cluster.coordination.coordinator")

HISTORY_DRAIN_S = 2.0  # how long shutdown waits for queued ownership-history rows
MIN_RENEW_PAUSE_S = 0.05  # keepalives never go back to back, whatever etcd answers


class OwnershipListener(Protocol):
    async def partition_gained(self, partition: int, epoch: int) -> None: ...

    async def partition_releasing(self, partition: int, epoch: int) -> None:
        """Finish the in-flight batch for the partition and stop acting for it."""
        ...

    def partition_lost(self, partition: int, epoch: int, reason: str) -> None:
        """Stop acting for the partition now (no awaiting: trust is already gone)."""
        ...


class NullListener:
    async def partition_gained(self, partition: int, epoch: int) -> None:
        return None

    async def partition_releasing(self, partition: int, epoch: int) -> None:
        return None

    def partition_lost(self, partition: int, epoch: int, reason: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Member:
    node: str
    address: str
    pid: int | None


@dataclass
class ClusterView:
    """What etcd says, as last read or watched."""

    members: dict[str, Member] = field(default_factory=dict)
    partition_keys: dict[int, KV] = field(default_factory=dict)
    revision: int = 0


@dataclass
class Signals:
    """Events for tests; set on every occurrence."""

    changed: asyncio.Event = field(default_factory=asyncio.Event)
    partition_lost: asyncio.Event = field(default_factory=asyncio.Event)
    converged: asyncio.Event = field(default_factory=asyncio.Event)


class Coordinator:
    """Not thread-safe; all methods run on the node's event loop."""

    def __init__(
        self,
        node_id: str,
        address: str,
        etcd: Etcd,
        store: PartitionsPort,
        partitions: int,
        clock: Clock,
        config: PartitionLeaseConfig,
        listener: OwnershipListener | None = None,
        ignore_local_trust: bool = False,
    ) -> None:
        if not node_id or "/" in node_id:
            raise ValueError(f"node id must be non-empty without '/', got {node_id!r}")
        self.node_id = node_id
        self.address = address
        self.etcd = etcd
        self.store = store
        self.partitions = partitions
        self.clock = clock
        self.config = config.validate()
        self.listener: OwnershipListener = listener or NullListener()
        # Test-only (chaos): act on partitions past the trust window, so that the database fence
        # alone is shown to stop a zombie.
        self.ignore_local_trust = ignore_local_trust
        self.trust = TrustWindow(config.safety_margin_s)
        self.owned = Ownership()
        self.view = ClusterView()
        self.signals = Signals()
        self._lease_id = 0
        self._lease_gen = 0
        self._held: dict[int, int] = {}  # partition -> create revision of our key
        self._wake = asyncio.Event()
        self._warned: set[tuple[str, int]] = set()
        self._stopping = False
        # Ownership-history rows to write (diagnostics, not a safety record), in order, by the
        # `history` task of run()'s TaskGroup; sync paths (a trust lapse) only enqueue.
        self._history: asyncio.Queue[tuple[int, int, str]] = asyncio.Queue()
        self._history_running = False
        self.faults = KeepaliveFaults.from_env()
        self.stale_epoch_refusals = 0
        self.unowned = UnownedWatch(self.config.unowned_alert_after_s)
        self.standing_down: str | None = None  # why this node holds no partitions now (None: it may)

    # ------------------------------------------------------------------ public view

    @property
    def prefix(self) -> str:
        return f"/{self.config.cluster}/"

    def epoch_if_trusted(self, partition: int) -> int | None:
        """The epoch to fence writes for `partition` with, or None if this node must not act."""
        epoch = self.owned.epochs.get(partition)
        if epoch is None or self.standing_down is not None:
            return None
        if not self.ignore_local_trust and not self.trust.trusted(self.clock.monotonic()):
            return None
        return epoch

    def partition_stale(self, partition: int, epoch: int) -> None:
        """The database refused a write with `epoch`: someone newer owns the partition."""
        self.stale_epoch_refusals += 1
        if self.owned.epochs.get(partition) == epoch:
            self._lose(partition, "database refused our epoch")
        self._wake.set()

    def stand_down(self, reason: str) -> None:
        """Hold no partition while `reason` lasts: stop acting at once, withdraw the member key and
        release every partition (the reconcile loop does both)."""
        self.standing_down = reason
        self._wake.set()

    def stand_up(self) -> None:
        """Take a share of the partitions again (the member key goes back under the lease)."""
        self.standing_down = None
        self._wake.set()

    def lease_deadline_s(self) -> float:
        """Seconds of trust left on this node's lease (negative: lapsed; 0.0 while it has no lease
        yet or any more, where the window is -inf: a status call must not meet an infinity)."""
        left = self.trust.remaining(self.clock.monotonic())
        return left if math.isfinite(left) else 0.0

    def assignment(self) -> dict[int, str]:
        return assign(self.view.members, self.partitions)

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._lease_loop(), name=f"lease-{self.node_id}")
            tg.create_task(self._watchdog(), name=f"trust-watchdog-{self.node_id}")
            tg.create_task(self._watch_loop(), name=f"etcd-watch-{self.node_id}")
            tg.create_task(self._reconcile_loop(), name=f"reconcile-{self.node_id}")
            tg.create_task(self._history_loop(), name=f"partition-history-{self.node_id}")
            tg.create_task(self._unowned_loop(), name=f"unowned-{self.node_id}")

    async def shutdown(self) -> None:
        """Deploy: release every partition (listener finishes its batch), revoke the lease."""
        self._stopping = True
        for p, epoch in sorted(self.owned.epochs.items()):
            await self._release(p, epoch, "shutdown")
        if self._lease_id:
            try:
                await self.etcd.revoke(self._lease_id)
            except Unavailable as exc:
                log.warning("lease revoke failed", extra={"event": "lease_revoke_failed", "error": str(exc)})
        self.trust.revoke()
        self._lease_id = 0
        if self._history_running:  # the "released" rows land before the node closes its pool,
            drained = asyncio.Event()  # unless PostgreSQL is away: then exit without them

            async def join() -> None:
                await self._history.join()
                drained.set()

            joining = asyncio.ensure_future(join())
            try:
                await self.clock.wait(drained, HISTORY_DRAIN_S)
            finally:
                joining.cancel()

    # ------------------------------------------------------------------ lease & trust

    async def _lease_loop(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                if not self._lease_id:
                    await self._register()
                else:
                    started = self.clock.monotonic()
                    ttl_left = await self.etcd.keepalive(self._lease_id)
                    await self.faults.delay_reply(self.clock, self.trust.trusted_until,
                                                  started + ttl_left - self.config.safety_margin_s)
                    if ttl_left <= 0:
                        self._drop_all("lease expired in etcd")
                        self._lease_id = 0
                        continue
                    self.trust.renewed(started, ttl_left)
                failures = 0
                # Renew before the window runs out: after a slow reply (anchored at the attempt's
                # start) less than renew_every_s may be left. Normally half the window is longer.
                left = self.trust.remaining(self.clock.monotonic())
                await self.clock.sleep(min(self.config.renew_every_s, max(left / 2, MIN_RENEW_PAUSE_S)))
            except Unavailable as exc:
                log.warning("etcd unavailable", extra={"event": "etcd_unavailable", "error": str(exc)})
                failures += 1
                await self.clock.sleep(backoff_s(failures, self.config.retry_backoff_s,
                                                 self.config.retry_backoff_max_s))

    async def _register(self) -> None:
        started = self.clock.monotonic()
        lease_id = await self.etcd.grant(self.config.ttl_s)
        if self.standing_down is None:
            await self.etcd.put(self._member_key, self._member_value(), lease=lease_id)
        self._lease_id = lease_id
        self._lease_gen += 1
        self.trust.renewed(started, self.config.ttl_s)
        log.info("member registered", extra={"event": "member_registered", "lease": lease_id})
        self._wake.set()

    @property
    def _member_key(self) -> str:
        return f"{self.prefix}members/{self.node_id}"

    def _member_value(self) -> bytes:
        return json.dumps({"node": self.node_id, "address": self.address, "pid": os.getpid()}).encode()

    async def _converge_membership(self) -> None:
        """The member key exists exactly while the node is not standing down (`stand_down`)."""
        listed = self.node_id in self.view.members
        if self.standing_down is not None and listed:
            await self.etcd.delete_if(self._member_key, value=self._member_value())
        elif self.standing_down is None and not listed and self.view.revision:
            await self.etcd.put(self._member_key, self._member_value(), lease=self._lease_id)

    async def _watchdog(self) -> None:
        while not self._stopping:
            if self.faults.holding:  # test-only (faults.py): a late reply is due before the drop
                await self.clock.sleep(0.01)
                continue
            left = self.trust.remaining(self.clock.monotonic())
            if left > 0:
                await self.clock.sleep(min(left, 1.0))
                continue
            if self._lease_id and not self.ignore_local_trust:
                # The lease may already be gone in etcd: abandon it (its keys expire with it) and
                # come back under a new lease, with new keys and new epochs.
                self._drop_all("lease trust window closed")
                self._lease_id = 0
            await self.clock.sleep(0.05)

    def _drop_all(self, reason: str) -> None:
        lost = self.owned.snapshot()
        self.owned.epochs.clear()
        self._held.clear()
        self._lease_gen += 1
        for p, epoch in sorted(lost.items()):
            log.warning("partition lost", extra={"event": "partition_lost", "partition": p, "epoch": epoch,
                                                 "reason": reason})
            self.listener.partition_lost(p, epoch, reason)
            self._history.put_nowait((p, epoch, "lost"))
        if lost:
            self.signals.partition_lost.set()

    async def _history_loop(self) -> None:
        """Write the queued ownership-history rows. PostgreSQL being away only skips rows (they
        are diagnostics: the fencing record is what keeps ticks single); anything else is a bug
        and crashes the node like any task of its TaskGroup."""
        self._history_running = True
        try:
            while True:
                p, epoch, kind = await self._history.get()
                try:
                    await self.store.record_partition_change(p, epoch, self.node_id, kind)
                except Unavailable as exc:
                    log.info("history write skipped", extra={"event": "history_skipped", "partition": p,
                                                             "kind": kind, "error": str(exc)})
                finally:
                    self._history.task_done()
        finally:
            self._history_running = False

    # ------------------------------------------------------------------ view

    async def _unowned_loop(self) -> None:
        while not self._stopping:
            await self.clock.sleep(self.config.resync_every_s)
            if self._stopping:
                return
            await self.check_unowned()

    async def check_unowned(self) -> None:
        """One round of the unowned watch: judge only from a view read under a trusted lease
        (an isolated node sees every key vanish and must not cry wolf)."""
        if not self._lease_id or not self.view.revision or not self.trust.trusted(self.clock.monotonic()):
            self.unowned.reset()
            return
        holders = {p: kv.value.decode(errors="replace") for p, kv in self.view.partition_keys.items()}
        for gap in self.unowned.observe(holders, self.view.members, self.partitions, self.clock.monotonic()):
            try:
                new = await self.store.report_unowned(gap.partition, gap.unowned_for_s,
                                                      self.config.unowned_alert_after_s, self.node_id,
                                                      self.clock.now())
            except Exception as exc:  # noqa: BLE001 - an alert must never stop coordination
                log.warning("partition_unowned not recorded", extra={
                    "event": "unowned_report_deferred", "partition": gap.partition, "error": str(exc)})
                return
            self.unowned.reported(gap.partition)
            if new:
                log.warning("partition has no owner", extra={
                    "event": "partition_unowned", "partition": gap.partition, "unowned_for_s": gap.unowned_for_s})

    async def _watch_loop(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                kvs, rev = await self.etcd.get_prefix(self.prefix)
                self._rebuild_view(kvs, rev)
                async for batch in self.etcd.watch_prefix(self.prefix, rev + 1):
                    for ev in batch:
                        self._apply(ev.kind, ev.kv)
                    self._changed()
                failures = 0
            except Unavailable as exc:
                log.info("watch restarting", extra={"event": "watch_restart", "error": str(exc)})
                failures += 1
                await self.clock.sleep(backoff_s(failures, self.config.retry_backoff_s,
                                                 self.config.retry_backoff_max_s))

    def _rebuild_view(self, kvs: list[KV], rev: int) -> None:
        self.view = ClusterView(revision=rev)
        for kv in kvs:
            self._apply("put", kv)
        self._changed()

    def _changed(self) -> None:
        self._wake.set()
        self.signals.changed.set()

    def _warn_once(self, key: str, rev: int, msg: str) -> None:
        if (key, rev) not in self._warned:
            self._warned.add((key, rev))
            log.warning(msg, extra={"event": "malformed_key", "key": key})

    def _apply(self, kind: str, kv: KV) -> None:
        self.view.revision = max(self.view.revision, kv.mod_revision)
        rel = kv.key[len(self.prefix):] if kv.key.startswith(self.prefix) else ""
        section, _, name = rel.partition("/")
        if section == "members":
            if kind == "delete":
                self.view.members.pop(name, None)
                return
            try:
                d = json.loads(kv.value)
                if not isinstance(d, dict) or d.get("node") != name or not isinstance(d.get("address"), str):
                    raise ValueError("not a member record")
                pid = d.get("pid")
                self.view.members[name] = Member(name, d["address"], pid if isinstance(pid, int) else None)
            except ValueError:
                self.view.members.pop(name, None)
                self._warn_once(kv.key, kv.mod_revision, "malformed member key ignored")
        elif section == "partitions":
            try:
                p = int(name)
                if not 0 <= p < self.partitions:
                    raise ValueError("partition out of range")
            except ValueError:
                if kind != "delete":
                    self._warn_once(kv.key, kv.mod_revision, "malformed partition key ignored")
                return
            if kind == "delete":
                self.view.partition_keys.pop(p, None)
            else:
                self.view.partition_keys[p] = kv

    # ------------------------------------------------------------------ reconcile

    async def _reconcile_loop(self) -> None:
        while not self._stopping:
            await self.clock.wait(self._wake, self.config.resync_every_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                await self._reconcile()
            except Unavailable as exc:
                log.warning("reconcile deferred", extra={"event": "reconcile_deferred", "error": str(exc)})
                await self.clock.sleep(self.config.retry_backoff_s)

    async def _reconcile(self) -> None:
        if not self._lease_id or not self.trust.trusted(self.clock.monotonic()):
            return
        gen = self._lease_gen
        await self._converge_membership()
        mine = (set() if self.standing_down is not None
                else {p for p, nd in self.assignment().items() if nd == self.node_id})
        keys = self.view.partition_keys
        # Keys we hold that vanished (deleted by hand, expired): stop acting. Only judged once the
        # view has caught up with our own create, or a fresh key would look deleted.
        for p, rev in list(self._held.items()):
            kv = keys.get(p)
            if self.view.revision >= rev and (kv is None or kv.create_revision != rev):
                self._lose(p, "partition key disappeared")
        # Release what is no longer ours to hold.
        for p in sorted(set(self._held) - mine):
            await self._release(p, self._held[p], self.standing_down or "rebalance")
        # Take free assigned partitions; record epochs of held ones.
        pending = []
        for p in sorted(mine):
            if p in self.owned.epochs:
                continue
            kv = keys.get(p)
            if p not in self._held:
                if kv is not None:
                    if kv.value.decode(errors="replace") == self.node_id and kv.lease == self._lease_id:
                        self._held[p] = kv.create_revision  # ours (e.g. a retried create)
                    elif kv.lease == 0 and kv.value.decode(errors="replace") not in self.view.members:
                        # A key nobody's lease will ever expire (written by hand): clear it.
                        self._warn_once(kv.key, kv.mod_revision, "orphan partition key without lease removed")
                        await self.etcd.delete_if(kv.key, create_revision=kv.create_revision)
                        continue
                    else:
                        continue  # held by someone else: wait for release or expiry
                else:
                    created, rev = await self.etcd.create(
                        f"{self.prefix}partitions/{p}", self.node_id.encode(), self._lease_id
                    )
                    if gen != self._lease_gen:
                        return
                    if not created:
                        continue
                    self._held[p] = rev
            pending.append(p)
        await self._record(pending, gen)
        if gen == self._lease_gen and set(self.owned.epochs) == mine and len(self._held) == len(mine):
            self.signals.converged.set()

    async def _record(self, pending: list[int], gen: int) -> None:
        sem = asyncio.Semaphore(8)

        async def one(p: int) -> None:
            async with sem:
                epoch = self._held.get(p)
                if epoch is None:
                    return
                won = await self.store.record_epoch(p, epoch, self.node_id)
                if gen != self._lease_gen or self._held.get(p) != epoch:
                    return
                if not won:
                    # The database already has this or a newer epoch: not ours to act on.
                    current, owner = await self.store.current_epoch(p)
                    log.warning("epoch not recorded", extra={"event": "epoch_refused", "partition": p,
                                                             "epoch": epoch, "current": current, "owner": owner})
                    if current == epoch and owner == self.node_id:
                        won = True
                    else:
                        await self._release(p, epoch, "epoch refused")
                        return
                self.owned.epochs[p] = epoch
                log.info("partition acquired", extra={"event": "partition_acquired", "partition": p, "epoch": epoch})
                await self.listener.partition_gained(p, epoch)

        try:
            async with asyncio.TaskGroup() as tg:
                for p in pending:
                    tg.create_task(one(p), name=f"record-epoch-{p}")
        except ExceptionGroup as eg:
            # PostgreSQL away: the reconcile loop retries (it expects Unavailable); others are bugs.
            first = eg.exceptions[0]
            if all(isinstance(e, Unavailable) for e in eg.exceptions) and isinstance(first, Unavailable):
                raise first from None
            raise

    def _lose(self, p: int, reason: str) -> None:
        epoch = self._held.pop(p, None)
        if self.owned.epochs.pop(p, None) is not None and epoch is not None:
            log.warning("partition lost", extra={"event": "partition_lost", "partition": p, "epoch": epoch,
                                                 "reason": reason})
            self.listener.partition_lost(p, epoch, reason)
            self.signals.partition_lost.set()
            self._history.put_nowait((p, epoch, "lost"))

    async def _release(self, p: int, epoch: int, reason: str) -> None:
        if p in self.owned.epochs:
            await self.listener.partition_releasing(p, epoch)
            self.owned.epochs.pop(p, None)
        self._held.pop(p, None)
        try:
            await self.etcd.delete_if(
                f"{self.prefix}partitions/{p}", value=self.node_id.encode(), create_revision=epoch
            )
        finally:
            log.info("partition released", extra={"event": "partition_released", "partition": p, "epoch": epoch,
                                                   "reason": reason})
            self._history.put_nowait((p, epoch, "released"))

