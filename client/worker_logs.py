"""Execution logs in the worker SDK (issue 53): each attempt's log records, captured and shipped.

Capture. While a handler runs, a context variable names its attempt's `AttemptLog`: the worker
sets it in the handler's task, so tasks the handler starts and the thread a sync handler runs in
(the copied context) see it too. The worker installs one `CaptureHandler` on the root logger
while it serves: a `logging` record emitted where the variable is set goes to that attempt, any
other is ignored. Records pass the logging configuration first (a logger left at WARNING drops
INFO before any handler sees it). `ctx.log(message, level="INFO")` writes to the attempt
directly, whatever the configuration.

Bound (cronwheel.limits). ATTEMPT_LOG_BYTES of text per attempt: the first
ATTEMPT_LOG_HEAD_BYTES as written, shipped as they come; past them the last
ATTEMPT_LOG_BYTES - ATTEMPT_LOG_HEAD_BYTES are kept in a ring and shipped when the attempt ends,
after a truncation mark saying how many lines and bytes were cut (the mark takes the first cut
line's number). A line over MAX_LOG_LINE_BYTES is cut to it, and says so at its end.

Shipping. One `LogShipper` per worker, a task of its own, apart from heartbeats and reports: the
first new line of an attempt wakes it (from any thread); it gathers for `batch_s` (0.1 s) and
sends every attempt's new lines in one AppendLogs call (within the call limits; one call in
flight, what comes meanwhile goes in the next). A call that fails with a transient code is sent
again with backoff (the node skips lines it already stored), at most `max_tries` times. A
handler never waits: writing a line appends to a list under the attempt's lock. A run's last
lines go before its report: `close(log, then)` ships them at once and calls `then` (the report's
submit) once they are stored or refused, or after `close_wait_s` at most. A refused run (its
token stale, not found) has its lines dropped and is shipped no more.

Concurrency: `AttemptLog.write` and `CaptureHandler.emit` run on any thread; everything else on
the worker's event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cronwheel.client.worker_connection import WorkerStopped, permanent
from cronwheel.client.worker_policy import CodeClass, backoff_s, classify, status_code
from cronwheel.clock import Clock
from cronwheel.limits import (
    ATTEMPT_LOG_BYTES,
    ATTEMPT_LOG_HEAD_BYTES,
    MAX_LOG_CALL_BYTES,
    MAX_LOG_ITEMS,
    MAX_LOG_LEVEL_CHARS,
    MAX_LOG_LINE_BYTES,
    MAX_LOG_LINES,
    MAX_LOG_LOGGER_CHARS,
)
from cronwheel.v1 import dispatch_pb2

log = logging.getLogger("cronwheel.client.worker")

TAIL_BYTES = ATTEMPT_LOG_BYTES - ATTEMPT_LOG_HEAD_BYTES
# (seq, unix time, level, logger, message, size in bytes)
Line = tuple[int, float, str, str, str, int]
current: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar("cronwheel_attempt_log", default=None)


def cut_line(message: str) -> tuple[str, int]:
    """The message within MAX_LOG_LINE_BYTES (its end says what was cut), and its size."""
    data = message.encode("utf-8", "replace")
    if "\x00" in message:
        message, data = message.replace("\x00", "\\0"), data.replace(b"\x00", b"\\0")
    if len(data) <= MAX_LOG_LINE_BYTES:
        return message, len(data)
    note = f" [cronwheel: {len(data) - MAX_LOG_LINE_BYTES + 100} bytes of this line cut]"
    kept = data[:MAX_LOG_LINE_BYTES - 100].decode("utf-8", "ignore") + note
    return kept, len(kept.encode())


def mark_text(lines: int, size: int) -> str:
    return (f"[cronwheel: {lines} lines ({size} bytes) cut here: an attempt's log keeps its first "
            f"{ATTEMPT_LOG_HEAD_BYTES} bytes and its last {TAIL_BYTES} bytes]")


class AttemptLog:
    """One attempt's lines: the head as written (shipped as they come), then a bounded tail
    (shipped at the end). write() is thread-safe; the rest is the shipper's, on the loop."""

    __slots__ = ("execution_id", "token", "_clock", "_shipper", "_lock", "next_seq", "head_bytes", "unsent",
                 "tail", "tail_bytes", "cut_lines", "cut_bytes", "cut_from", "closed", "dead", "inflight")

    def __init__(self, execution_id: str, token: int, clock: Clock, shipper: LogShipper) -> None:
        self.execution_id = execution_id
        self.token = token
        self._clock = clock
        self._shipper = shipper
        self._lock = threading.Lock()
        self.next_seq = 1
        self.head_bytes = 0
        self.unsent: list[Line] = []
        self.tail: deque[Line] = deque()
        self.tail_bytes = 0
        self.cut_lines = 0
        self.cut_bytes = 0
        self.cut_from = 0  # the first cut line's number: the mark's
        self.closed = False
        self.dead = False  # refused by the node: nothing more is shipped
        self.inflight = 0  # lines in a call not yet answered

    def write(self, level: str, logger: str, message: str) -> None:
        text, size = cut_line(message)
        at, level, logger = self._clock.now_ts(), level[:MAX_LOG_LEVEL_CHARS] or "INFO", logger[:MAX_LOG_LOGGER_CHARS]
        with self._lock:
            if self.closed or self.dead:
                return
            line = (self.next_seq, at, level, logger, text, size)  # numbered in the order written
            self.next_seq += 1
            if not self.tail and self.head_bytes + size <= ATTEMPT_LOG_HEAD_BYTES:
                self.head_bytes += size
                self.unsent.append(line)
                wake = len(self.unsent) == 1
            else:
                self.tail.append(line)
                self.tail_bytes += size
                while self.tail_bytes > TAIL_BYTES and len(self.tail) > 1:
                    gone = self.tail.popleft()
                    if not self.cut_lines:
                        self.cut_from = gone[0]
                    self.cut_lines += 1
                    self.cut_bytes += gone[5]
                    self.tail_bytes -= gone[5]
                wake = False
        if wake:
            self._shipper.dirty(self)

    @property
    def written(self) -> bool:
        return self.next_seq > 1

    def close(self) -> None:
        """The attempt ended: its mark (if lines were cut) and its tail join the lines to ship."""
        with self._lock:
            self.closed = True
            if self.cut_lines:
                self.unsent.append((self.cut_from, self._clock.now_ts(), "WARNING", "cronwheel",
                                    mark_text(self.cut_lines, self.cut_bytes), 0))
            self.unsent.extend(self.tail)
            self.tail.clear()
            self.tail_bytes = 0

    def take(self, max_lines: int, max_bytes: int) -> list[Line]:
        with self._lock:
            n = size = 0
            for ln in self.unsent:
                if n >= max_lines or (n and size + ln[5] > max_bytes):
                    break
                n += 1
                size += ln[5]
            out, self.unsent = self.unsent[:n], self.unsent[n:]
            self.inflight += n
            return out

    def discard(self) -> None:
        """The run's result is dropped (its token is stale): so are its lines."""
        self.answered(0, refused=True)

    def answered(self, n: int, refused: bool) -> None:
        with self._lock:
            self.inflight -= n
            if refused:
                self.dead = True
                self.unsent.clear()
                self.tail.clear()

    @property
    def settled(self) -> bool:
        """Closed and nothing left to ship (or refused)."""
        return self.closed and (self.dead or (not self.unsent and not self.inflight))


class CaptureHandler(logging.Handler):
    """Routes a record to the attempt whose handler emitted it (the context variable); others
    are ignored. Thread-safe: formatting happens in the emitting thread. A process with no
    logging configuration still prints warnings to stderr (logging's lastResort, which Python
    uses only when no handler at all is found): this handler does it in that case."""

    def _others(self, name: str) -> bool:
        """Whether a handler other than this one sees records of logger `name`."""
        lg: logging.Logger | None = logging.getLogger(name)
        while lg is not None:
            if any(h is not self for h in lg.handlers):
                return True
            lg = lg.parent if lg.propagate else None
        return False

    def emit(self, record: logging.LogRecord) -> None:
        if logging.lastResort is not None and not self._others(record.name):
            logging.lastResort.handle(record)  # as if this handler were not there (no config: stderr)
        target = current.get()
        if target is None:
            return
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            elif record.exc_text:
                text += "\n" + record.exc_text
        except Exception:  # a bad format string: logging reports it, as for any handler
            self.handleError(record)
            return
        target.write(record.levelname, record.name, text)


_capture = CaptureHandler()
_installed = 0
_install_lock = threading.Lock()


def install_capture() -> None:
    """Put the one CaptureHandler on the root logger (counted: several workers in a process
    share it, so no record is captured twice)."""
    global _installed
    with _install_lock:
        if _installed == 0:
            logging.getLogger().addHandler(_capture)
        _installed += 1


def uninstall_capture() -> None:
    global _installed
    with _install_lock:
        _installed -= 1
        if _installed == 0:
            logging.getLogger().removeHandler(_capture)


class LogShipper:
    """Sends attempts' lines by AppendLogs on its own cadence (see the module note)."""

    def __init__(self, stub: Any, worker_id: str, metadata: tuple[tuple[str, str], ...], clock: Clock,
                 on_fatal: Callable[[WorkerStopped], None], *, batch_s: float = 0.1, call_timeout_s: float = 10.0,
                 close_wait_s: float = 5.0, max_tries: int = 20, rng: random.Random | None = None) -> None:
        self.stub = stub
        self.worker_id = worker_id
        self.metadata = metadata
        self.clock = clock
        self.on_fatal = on_fatal
        self.batch_s = batch_s
        self.call_timeout_s = call_timeout_s
        self.close_wait_s = close_wait_s
        self.max_tries = max_tries
        self.rng = rng or random.Random()
        self._lock = threading.Lock()
        self._dirty: dict[AttemptLog, None] = {}  # attempts with lines to ship, in order
        self._closing: dict[AttemptLog, tuple[Callable[[], None], float]] = {}  # then, give-up time
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._urgent = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        try:  # made on the worker's loop (serve_on): lines written before run() starts still wake it
            self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        except RuntimeError:
            pass
        # A node without AppendLogs (an older version: UNIMPLEMENTED; a test's stub without it):
        # lines are dropped, reports not held; said once.
        self.enabled = hasattr(stub, "AppendLogs")
        self.sent = 0  # lines stored
        self.refused = 0  # lines the node refused (their run was no longer ours)
        self.dropped = 0  # lines given up after max_tries

    def attempt(self, execution_id: str, token: int) -> AttemptLog:
        return AttemptLog(execution_id, token, self.clock, self)

    def dirty(self, attempt: AttemptLog) -> None:
        """`attempt` has new lines (any thread)."""
        with self._lock:
            first = not self._dirty
            self._dirty[attempt] = None
        if not first:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake.set()
        elif self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop closed: the worker is gone
                pass

    def close(self, attempt: AttemptLog, then: Callable[[], None]) -> None:
        """The attempt ended: ship its last lines now, then call `then` (at most close_wait_s on)."""
        if not attempt.written or attempt.dead or not self.enabled:
            then()
            return
        attempt.close()
        if attempt.settled:
            then()
            return
        self._closing[attempt] = (then, self.clock.monotonic() + self.close_wait_s)
        self._idle.clear()
        self._urgent = True
        with self._lock:
            self._dirty[attempt] = None
        self._wake.set()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every closed attempt's lines are settled; past `timeout_s`, release their
        reports anyway. False if some were released unsettled."""
        done = await self.clock.wait(self._idle, timeout_s)
        if not done:
            self._settle(force=True)
        return done

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        while True:
            deadlines = [d for _, d in self._closing.values()]
            wait = max(0.0, min(deadlines) - self.clock.monotonic()) if deadlines else 3600.0
            await self.clock.wait(self._wake, wait)
            self._wake.clear()
            if not self._urgent and self._dirty:
                await self.clock.sleep(self.batch_s)  # gather what else the handlers write
            self._urgent = False
            while self._dirty:
                await self._send(self._take())
            self._settle()

    def _take(self) -> list[tuple[AttemptLog, list[Line]]]:
        """Lines of the dirty attempts, within one call's limits; the attempts left over stay."""
        batch: list[tuple[AttemptLog, list[Line]]] = []
        lines = size = 0
        with self._lock:
            order = list(self._dirty)
            if not self.enabled:
                self._dirty.clear()
        if not self.enabled:
            for a in order:
                a.discard()
            return batch
        for a in order:
            if len(batch) >= MAX_LOG_ITEMS or lines >= MAX_LOG_LINES or size >= MAX_LOG_CALL_BYTES:
                break
            got = a.take(MAX_LOG_LINES - lines, MAX_LOG_CALL_BYTES - size)
            with self._lock:
                if not a.unsent:
                    self._dirty.pop(a, None)
            if got:
                batch.append((a, got))
                lines += len(got)
                size += sum(ln[5] for ln in got)
        return batch

    def _request(self, batch: list[tuple[AttemptLog, list[Line]]]) -> Any:
        req = dispatch_pb2.AppendLogsRequest(worker_id=self.worker_id)
        for a, lines in batch:
            item = req.items.add(execution_id=a.execution_id, fencing_token=a.token)
            add = item.lines.add
            for seq, at, level, logger, message, _ in lines:
                t = Timestamp(seconds=int(at), nanos=int((at % 1) * 1e9))
                add(seq=seq, time=t, level=level, logger=logger, message=message)
        return req

    async def _send(self, batch: list[tuple[AttemptLog, list[Line]]]) -> None:
        tries = 0
        while batch:
            tries += 1
            try:
                resp = await self.stub.AppendLogs(self._request(batch), timeout=self.call_timeout_s,
                                                  metadata=self.metadata)
            except grpc.aio.AioRpcError as exc:
                kind = classify(exc.code())
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._disable()
                if kind is CodeClass.FATAL:
                    self.on_fatal(permanent(self.worker_id, exc, "AppendLogs"))
                if kind is not CodeClass.RETRY or tries >= self.max_tries:
                    self._give_up(batch, exc.code().name, exc.details() or "")
                    return
                self._settle()  # a report waits no longer than close_wait_s for its lines
                await self.clock.sleep(backoff_s(tries, self.rng.random(), 0.1, 5.0))
                continue
            retry: list[tuple[AttemptLog, list[Line]]] = []
            for (a, lines), out in zip(batch, resp.outcomes, strict=True):
                kind = classify(status_code(out.code))
                if kind is CodeClass.OK:
                    self.sent += len(lines)
                    a.answered(len(lines), refused=False)
                elif kind is CodeClass.RETRY and tries < self.max_tries:
                    retry.append((a, lines))
                else:
                    self.refused += len(lines)
                    a.answered(len(lines), refused=True)
                    log.warning("log lines refused", extra={
                        "event": "logs_refused", "worker": self.worker_id, "execution_id": a.execution_id,
                        "code": status_code(out.code).name, "detail": out.message})
            batch = retry
            self._settle()
            if batch:
                await self.clock.sleep(backoff_s(tries, self.rng.random(), 0.1, 5.0))

    def _disable(self) -> None:
        if self.enabled:
            self.enabled = False
            log.warning("the node does not take execution logs (an older version): they are not shipped",
                        extra={"event": "logs_unsupported", "worker": self.worker_id})

    def _give_up(self, batch: list[tuple[AttemptLog, list[Line]]], code: str, detail: str) -> None:
        n = 0
        for a, lines in batch:
            n += len(lines)
            a.answered(len(lines), refused=True)
        self.dropped += n
        log.error("log lines given up", extra={"event": "logs_given_up", "worker": self.worker_id,
                                               "lines": n, "code": code, "detail": detail})
        self._settle()

    def _settle(self, force: bool = False) -> None:
        """Release the reports whose attempt's lines are settled, or waited for long enough."""
        now = self.clock.monotonic()
        for a, (then, give_up_at) in list(self._closing.items()):
            if force or a.settled or now >= give_up_at:
                del self._closing[a]
                then()
        if not self._closing:
            self._idle.set()
