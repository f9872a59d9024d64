"""The base of the storage port: a psycopg pool, transactions, the fence, one error choke point.

Domain ports (`storage/firing.py`, `storage/dispatch.py`, ...) take a `Database` and add one
typed method per query; `PgStore` composes them. Nothing outside `storage/` imports psycopg.

Fencing. Writes made on behalf of a partition owner run inside `fenced(partition, epoch)`: the
transaction's first statement share-locks the partition row and checks it still carries the
caller's epoch (else `StaleEpoch`, nothing written). `record_epoch()` (the acquisition update)
conflicts with that lock, so a new owner's epoch cannot land in the middle of an old owner's
batch, and once it has landed every later fenced transaction of the old owner fails its check.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from cronwheel.errors import Internal, StaleEpoch, Unavailable
from cronwheel.secret_store import SecretStore
from cronwheel.storage.errors import commit_error, map_error
from cronwheel.storage.queries import q

Row = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    dsn: str
    min_connections: int = 2
    max_connections: int = 10
    connect_timeout_s: float = 5.0
    # How long a transaction of these sessions may hold its locks when its client stops in the
    # middle of it (SessionLimits below); None: the server's own settings.
    limits: SessionLimits | None = None
    # Seals the secrets the ports keep (cronwheel/secret_store.py); the default has no key.
    secrets: SecretStore = field(default_factory=SecretStore)

    def validate(self) -> StoreConfig:
        if not self.dsn:
            raise ValueError("dsn is required")
        if self.limits is not None:
            self.limits.validate()
        if not 1 <= self.min_connections <= self.max_connections:
            raise ValueError(
                f"need 1 <= min_connections ({self.min_connections}) <= "
                f"max_connections ({self.max_connections})"
            )
        return self


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """How long a transaction may hold its locks when the client that opened it stops answering
    (a node paused, cut off from the database, or its host gone), so that it cannot hold up the
    other nodes' writes (a takeover's epoch, a fire, a claim) for longer.

    `idle_s` (`idle_in_transaction_session_timeout`): a transaction whose client has not sent its
    next statement for this long. It does not cover a client stopped in the middle of a pipeline
    (`Database.pipelined_transaction`, the fire statement): statements sent, their Sync not yet
    arrived, the server is still "active", waiting to read (measured: a row share-locked that way
    was held until the client came back, however long). `total_s` (`transaction_timeout`,
    PostgreSQL 17 and later) ends any transaction that lasts longer, in every state, so it bounds
    that case too. The server ends the session; the client's transaction fails and writes nothing
    (`storage.errors`: Unavailable). PostgreSQL 15 and 16 have no such setting: there a session
    carries its limit in its application_name (`tx_limit_name`), and the nodes end the sessions
    past it themselves (`Database.end_overrun_transactions`, once a second on every node), so the
    limit holds there too, up to that second later.

    A node takes `total_s` = its lease TTL (cluster/node.py): a node stopped for longer has lost
    its partitions anyway, and no transaction a node makes is meant to last that long (the fence
    makes a takeover wait for it)."""

    idle_s: float = 2.0
    total_s: float | None = None

    def validate(self) -> SessionLimits:
        if not self.idle_s > 0:
            raise ValueError(f"idle_s must be > 0, got {self.idle_s}")
        if self.total_s is not None and not self.total_s >= self.idle_s:
            raise ValueError(f"total_s ({self.total_s}) must be >= idle_s ({self.idle_s})")
        return self

    def options(self) -> tuple[tuple[str, str], ...]:
        """Settings every server version takes, sent with the connection (libpq `options`)."""
        return (("idle_in_transaction_session_timeout", str(round(self.idle_s * 1000))),)

    async def apply(self, conn: AsyncConnection[Any]) -> None:
        """What needs the server's version: `transaction_timeout` (PostgreSQL >= 17), else the
        limit named in the session's application_name for the nodes' sweep to enforce."""
        if self.total_s is None:
            return
        limit_ms = round(self.total_s * 1000)
        if conn.info.server_version >= TRANSACTION_TIMEOUT_SINCE:
            await conn.execute(f"SET transaction_timeout = {limit_ms}")
        else:
            name = tx_limit_name(conn.info.parameter_status("application_name") or "", limit_ms)
            await conn.execute("SELECT set_config('application_name', %s, false)", (name,))


TRANSACTION_TIMEOUT_SINCE = 170000  # server_version_num of PostgreSQL 17

# A session's transaction limit as PostgreSQL < 17 shows it to the other sessions: a tag at the end
# of its application_name, "[cronwheel tx limit 5000ms]", after whatever name the DSN gave it.
# TX_LIMIT_PATTERN reads it back (a PostgreSQL regular expression, in `end_overrun_transactions`).
_TX_LIMIT_PREFIX = "cronwheel tx limit "
TX_LIMIT_PATTERN = rf"\[{_TX_LIMIT_PREFIX}(\d+)ms\]$"
_APPLICATION_NAME_MAX = 63  # NAMEDATALEN - 1: longer names are cut by the server


@dataclass(frozen=True, slots=True)
class OverrunSweep:
    """One round of the sweep of sessions past their transaction limit (`end_overrun_sessions`)."""

    ended: tuple[int, ...]  # the server processes ended this round
    # The other tagged sessions whose transaction start this session's role cannot see, or that
    # it may not end (PostgreSQL's rules, in the statement): a stall there is never ended by it.
    unpoliced: int


async def end_overrun_sessions(conn: AsyncConnection[Any]) -> OverrunSweep:
    """One round of the sweep on `conn`, on any server version (`Database.end_overrun_transactions`
    runs it where it is needed: PostgreSQL < 17)."""
    cur = await conn.execute(q("end_overrun_transactions"), {"pattern": TX_LIMIT_PATTERN})
    row = await cur.fetchone()
    assert row is not None  # one row, always
    ended, unpoliced = row
    return OverrunSweep(ended=tuple(int(pid) for pid in ended), unpoliced=int(unpoliced))


def tx_limit_name(own: str, limit_ms: int) -> str:
    """`own` application_name with the limit tagged on (`own` shortened so the tag survives)."""
    tag = f"[{_TX_LIMIT_PREFIX}{limit_ms}ms]"
    room = _APPLICATION_NAME_MAX - len(tag) - 1
    head = own.encode()[:max(room, 0)].decode(errors="ignore").strip()
    return f"{head} {tag}" if head else tag


# Server settings of every node connection, appended to the options the DSN may carry (the user's
# own -c settings stay; a later -c wins, so these cannot be undone from the DSN by accident).
# jit=off: the fire statement's plan includes a never-run quota branch that is costed as a count
# over the tenant's executions of the day; once ANALYZE saw a few hundred thousand of them the
# total passed jit_above_cost and every fire statement spent 80-150 ms compiling itself
# (bench.retention: fire lag p50 7 -> 141 ms from one autovacuum ANALYZE on). The node's statements
# are short OLTP statements: JIT never pays for itself on them.
SESSION_SETTINGS: tuple[tuple[str, str], ...] = (("jit", "off"),)


# Sequential scans priced out, for the statements whose plan is kept and must read through their
# indexes however the table grows after it was made. A prepared statement's generic plan is made
# for the table as it was then: made on an empty table (a new database, or after a TRUNCATE) it
# chose sequential scans, and kept through a backlog it read the whole table at every call (a
# claim of 250 out of 20,000 queued: 23 ms instead of 7.6; on PostgreSQL 15 a completion batch of
# 250 beside 20,000 running runs: 27 ms instead of 7.5, until autovacuum's ANALYZE). Every table
# these statements read has an index for what they read. Applied to the claim connection's
# session (CLAIM_SESSION_SETTINGS) and to a completion batch's transaction (`price_out_seqscans`).
SEQSCANS_PRICED_OUT: tuple[tuple[str, str], ...] = (("enable_seqscan", "off"),)

# Server settings of the claim connection only (`Database.claim_connection`), after
# SESSION_SETTINGS. The claim is planned once per connection, not at every call
# (plan_cache_mode=force_generic_plan): planned per call it spent 1.0-1.5 ms planning, as long as a
# small claim runs, and claims' planning was a quarter of PostgreSQL's time under bench.e2e's W2
# single calls (pg_stat_statements). The plan made once fits the table as it will be because
# sequential scans are priced out (SEQSCANS_PRICED_OUT; tests/integration/
# test_dispatch_pipelined.py). Nothing else runs on the claim connection.
CLAIM_SESSION_SETTINGS: tuple[tuple[str, str], ...] = (("plan_cache_mode", "force_generic_plan"),
                                                       *SEQSCANS_PRICED_OUT)


async def price_out_seqscans(conn: AsyncConnection[Any]) -> None:
    """SEQSCANS_PRICED_OUT for the rest of `conn`'s transaction (set_config(..., true)), so the
    statements sent after it are planned, and their kept plans made, without sequential scans.
    The result is not read: in a pipelined transaction it travels with the next statement."""
    for name, value in SEQSCANS_PRICED_OUT:
        await conn.execute("SELECT set_config(%s, %s, true)", (name, value))


def session_options(dsn: str, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The libpq `options` of a node connection: the DSN's own, then SESSION_SETTINGS, then `extra`."""
    own = str(conninfo_to_dict(dsn).get("options") or "").strip()
    ours = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS + extra)
    return f"{own} {ours}".strip()


async def stale_epoch(conn: AsyncConnection[Any], partition: int, epoch: int) -> StaleEpoch:
    """The refusal of a write made under `epoch`, naming the partition's current epoch."""
    cur = await conn.execute(q("current_epoch"), {"partition": partition})
    row = await cur.fetchone()
    return StaleEpoch(partition, epoch, int(row[0]) if row else None)


def _cancelled(exc: BaseException | None) -> None:
    """Raise CancelledError when the task borrowing the connection is being cancelled: psycopg
    answers a cancellation in the middle of a statement with an error of its own (the query it
    cancelled on the server), which mapped to Unavailable would be caught by a loop that retries
    on Unavailable, and a cancelled task would run on (a node's TaskGroup then waits for it
    forever at SIGTERM)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


class Database:
    """The connection pool and the three ways to borrow from it: `connection()`, `transaction()`,
    `fenced(partition, epoch)`. Every psycopg error raised inside them leaves as a cronwheel
    error (`storage.errors.map_error`, the one choke point). Task-safe: shared by a whole node."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config.validate()
        self._pool = self._new_pool(config.min_connections, config.max_connections)
        # The claims' own connection (`claim_connection()`): a node claims one call at a time,
        # and on one backend the claim stays parsed and the backend's caches warm. Taken in turn
        # from the shared pool (psycopg_pool hands out the connection idle longest), every claim
        # of a herd met a backend that had not run it yet: 6-7 ms of planning each on a fresh
        # backend against 1.3 ms on a warm one, 40 ms in one 1,000-run W3 herd of six claims.
        self._claim_pool = self._new_pool(1, 1, CLAIM_SESSION_SETTINGS)

    def _new_pool(self, min_size: int, max_size: int,
                  extra: tuple[tuple[str, str], ...] = ()) -> AsyncConnectionPool[Any]:
        config = self.config
        limits = config.limits
        return AsyncConnectionPool(
            config.dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": int(config.connect_timeout_s),
                    "options": session_options(config.dsn, (limits.options() if limits else ()) + extra)},
            configure=limits.apply if limits else None,
            open=False,
            timeout=config.connect_timeout_s * 2,
            # No check on checkout: psycopg_pool sleeps 1, 2, 4 s between failed checks, which
            # stalled firing for seconds after a server restart (chaos scenario
            # postgres-restart-stalls-firing). A dead connection fails its caller once (the
            # caller retries; the pool drops it), and `check_pool()` sweeps the idle ones when a
            # restart is noticed.
        )

    async def open(self, wait: bool = True) -> Self:
        try:
            for pool in (self._pool, self._claim_pool):
                await pool.open(wait=wait, timeout=self.config.connect_timeout_s * 2)
        except psycopg_pool_errors() as exc:
            raise Unavailable("postgres", f"cannot connect: {exc}") from exc
        return self

    async def close(self) -> None:
        await self._claim_pool.close()
        await self._pool.close()

    async def check_pool(self) -> None:
        """Drop the idle connections a server restart killed (no backoff for callers)."""
        try:
            for pool in (self._pool, self._claim_pool):
                await pool.check()
        except psycopg.Error as exc:
            raise map_error(exc) from exc

    async def end_overrun_transactions(self) -> OverrunSweep | None:
        """End the sessions (any node's) whose transaction has lasted longer than the limit their
        application_name carries (SessionLimits, PostgreSQL < 17), so that a node stopped in the
        middle of a pipelined transaction holds its locks no longer there than on a server with
        `transaction_timeout`. Returns what the round ended and which tagged sessions this
        node's role cannot police (`end_overrun_sessions`); None where the server ends them
        itself (PostgreSQL >= 17: nothing to sweep, ever)."""
        async with self.connection() as conn:
            if conn.info.server_version >= TRANSACTION_TIMEOUT_SINCE:
                return None
            return await end_overrun_sessions(conn)

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        async with self._borrow(self._pool) as conn:
            yield conn

    @asynccontextmanager
    async def claim_connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """The connection claims run on (one per node, apart from the pool: see __init__); a
        second borrower waits for the first to give it back."""
        async with self._borrow(self._claim_pool) as conn:
            yield conn

    @staticmethod
    @asynccontextmanager
    async def _borrow(pool: AsyncConnectionPool[Any]) -> AsyncIterator[AsyncConnection[Any]]:
        try:
            async with pool.connection() as conn:
                _cancelled(None)  # the pool's wait for a connection can swallow a cancellation
                yield conn
        except psycopg.Error as exc:
            _cancelled(exc)
            raise map_error(exc) from exc
        except psycopg_pool_errors() as exc:
            _cancelled(exc)
            raise Unavailable("postgres", str(exc)) from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection[Any]]:
        """One transaction on a pooled connection, committed when the body ends.

        A COMMIT the server refuses once the body ran (an error raised at commit, e.g. by a
        deferred trigger: the chaos failpoint refuse-commits) wrote nothing, so it is Unavailable:
        the caller retries as when the database is away (a fenced write stays safe to retry). As
        Internal it read as a bug, and a fenced fire ended the firer's task group and the node
        (chaos seed 3, stop 48). The body's own errors are unchanged. Pipelined transactions
        cannot tell a statement's error from the COMMIT's (`pipelined_transaction`)."""
        ran = False
        try:
            async with self.connection() as conn, conn.transaction():
                yield conn
                ran = True
        except Internal as exc:
            if not ran:
                raise
            raise Unavailable("postgres", f"COMMIT refused: {exc}") from exc

    @asynccontextmanager
    async def pipelined_transaction(self, conn: AsyncConnection[Any], explicit: bool = False) -> AsyncIterator[None]:
        """One transaction on `conn` (from `connection()`, autocommit) whose statements are sent in
        pipeline mode: they form one implicit transaction, committed by the Sync that ends the
        block (PostgreSQL's extended protocol: statements between two Syncs outside an explicit
        BEGIN are one transaction; an error rolls all of them back). So no BEGIN or COMMIT
        round trip: the block costs one round trip for the Sync, carrying every statement whose
        result is read after the block (`Pending`), plus one per result read inside it (a claim:
        two, where `transaction()` took four: BEGIN, the tenant locks, the claim, COMMIT; and
        psycopg's own `transaction()` inside a pipeline syncs after BEGIN and around the body,
        so it would take four as well). A result read after the block is read after the commit
        succeeded; an error of any statement or of the commit raises at the end of the block
        (or where a result is read) and nothing of the transaction is kept. Transaction-scoped
        locks and settings hold to the end of the block.

        An error at the COMMIT itself (raised by PostgreSQL at the Sync: a deferred constraint, a
        full notification queue) reaches the caller as that error. psycopg 3.3 keeps one result
        slot for the Sync and may mis-read the two results such an error brings (measured: of 300
        refused commits, about one in six raised `IndexError` and most others "cannot exit
        pipeline mode while busy", which hid the server's error and left the connection busy).
        When the pipeline's end raises anything but a server error, the connection is closed
        rather than given back (its state is not known: the pool drops a closed connection) and
        the caller gets `commit_error`'s reading of it.

        `explicit`: psycopg's own transaction (BEGIN ... COMMIT) inside the pipeline, for a block
        that sends statements and may then raise before it ends (SubmitJobs' chunks, validated
        while the earlier ones are written): the implicit transaction would be committed by the
        Sync that ends the pipeline whatever the block raised; this one is rolled back. It costs
        the syncs psycopg's transaction() makes (after BEGIN, before COMMIT). Without it, a block
        that raises (or is cancelled) before its end closes the connection instead of sending the
        Sync: nothing it sent is committed (issue 47 item 7); a cancellation during the Sync
        itself cannot be told apart from a commit (the caller's answer is lost either way)."""
        body_done = False
        try:
            async with conn.pipeline():
                if explicit:
                    async with conn.transaction():
                        yield
                        body_done = True
                else:
                    try:
                        yield
                    except BaseException:
                        # The Sync that ends the pipeline would commit the statements already sent
                        # (a cancelled RPC: an insert without its notifications, stored while its
                        # caller is told it failed). Closed before it is sent, the session ends
                        # with its implicit transaction open, and the server rolls it back.
                        await conn.close()
                        raise
                    body_done = True
        except Exception as exc:
            if not body_done or (isinstance(exc, psycopg.Error) and exc.sqlstate):
                raise  # the block's own error, or the server's read cleanly (the borrow maps it)
            await conn.close()
            raise commit_error(exc) from exc

    @asynccontextmanager
    async def fenced(self, partition: int, epoch: int) -> AsyncIterator[AsyncConnection[Any]]:
        """A transaction that may write for `partition` only while it still has `epoch`."""
        async with self.transaction() as conn:
            cur = await conn.execute(q("check_fence"), {"partition": partition, "epoch": epoch})
            if await cur.fetchone() is None:
                raise await stale_epoch(conn, partition, epoch)
            yield conn

    async def at_current_epoch(self, conn: AsyncConnection[Any], partition: int) -> int:
        """See the module function `at_current_epoch`."""
        return await at_current_epoch(conn, partition)


async def at_current_epoch(conn: AsyncConnection[Any], partition: int) -> int:
    """Inside a transaction: the partition's current epoch, share-locked until commit as
    `fenced()` locks it, so the transaction may run fenced queries under that epoch (an
    acquisition waits for it to commit). For writes made on behalf of a user (the API's manual
    trigger) that must use the firing path's fenced statements. Take it before row-locking the
    partition's schedules or executions: the fire path takes the partition lock first too."""
    cur = await conn.execute(q("api_partition_epoch"), {"partition": partition})
    row = await cur.fetchone()
    if row is None:
        raise Unavailable("postgres", f"partition {partition} has no row (run migrate)")
    return int(row[0])


class Pending(Generic[T]):
    """A statement sent in a pipeline whose result is not read yet (`pipelined_transaction`):
    read after the block, it came back with the COMMIT, in the same round trip."""

    def __init__(self, cur: psycopg.AsyncCursor[Any], convert: Any) -> None:
        self._cur, self._convert = cur, convert
        self._value: tuple[T] | None = None

    async def result(self) -> T:
        """The statement's result (read once; later calls answer the same)."""
        if self._value is None:
            try:
                self._value = (self._convert(await self._cur.fetchall()),)
            except psycopg.Error as exc:
                raise map_error(exc) from exc
        return self._value[0]


def psycopg_pool_errors() -> tuple[type[Exception], ...]:
    import psycopg_pool

    return (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
