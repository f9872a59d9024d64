"""A real local HTTP server that records webhook POSTs (the `receiver` fixture is in conftest.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    at: float  # time.time() when the request arrived
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A local HTTP server that records every POST and answers what `answer(n)` says for the
    n-th request (0-based): a status code, or None to hold the request until `release` is set."""

    answer: Callable[[int], int | None] = lambda n: 200
    got: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.got)


def serve_receiver() -> Iterator[Receiver]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with rec.lock:
                n = len(rec.got)
                rec.got.append(Received(time.time(), {k.lower(): v for k, v in self.headers.items()}, body))
            status = rec.answer(n)
            if status is None:
                rec.release.wait(30)
                status = 200
            try:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:
                pass  # the sender died while we held it

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        rec.release.set()
        server.shutdown()
        server.server_close()


@dataclass
class Trickler:
    """A local receiver that reads a request and then answers one byte every `every_s` seconds,
    for as long as the sender stays (no socket read of the sender ever waits `every_s` long)."""

    url: str = ""
    arrived: list[float] = field(default_factory=list)  # time.time() of each request
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.arrived)


def serve_trickler(every_s: float = 4.0) -> Iterator[Trickler]:
    import socket

    t = Trickler()
    stop = threading.Event()
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    t.url = f"http://127.0.0.1:{server.getsockname()[1]}/slow"

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            with t.lock:
                t.arrived.append(time.time())
            for b in b"HTTP/1.1 200 OK\r\n" * 1000:
                if stop.wait(every_s):
                    return
                try:
                    conn.sendall(bytes([b]))
                except OSError:
                    return  # the sender gave up: what it should do at its deadline

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, name="webhook-trickler", daemon=True).start()
    try:
        yield t
    finally:
        stop.set()
        server.close()
