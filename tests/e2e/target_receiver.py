"""A real local HTTP server standing for a team's service that HTTP targets call (issue 50).

Each path is a scripted endpoint: `script[path]` is a list of answers, the n-th request to the
path gets the n-th (the last repeats). An answer is (status, headers, body), or ("hang", s) to
hold the request `s` seconds before answering 200 (longer than the target's timeout: the caller
gives up first). Every request is recorded with its arrival time, method, headers and body, and
the number of requests open at once per path is tracked (the most seen is `peak[path]`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[Any, ...]


@dataclass
class Request:
    at: float  # time.time() when it arrived
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class TargetReceiver:
    base: str = ""
    script: dict[str, list[Answer]] = field(default_factory=dict)
    got: list[Request] = field(default_factory=list)
    open_now: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def requests(self, path: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.got if path is None or r.path == path]

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def _answer(self, path: str) -> Answer:
        with self.lock:
            n = sum(1 for r in self.got if r.path == path) - 1
        answers = self.script.get(path) or [(200, {}, b"")]
        return answers[min(n, len(answers) - 1)]


def serve_targets() -> Iterator[TargetReceiver]:
    rec = TargetReceiver()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            path = self.path.split("?", 1)[0]
            with rec.lock:
                rec.got.append(Request(time.time(), self.command, path,
                                       {k.lower(): v for k, v in self.headers.items()}, body))
                rec.open_now[path] += 1
                rec.peak[path] = max(rec.peak[path], rec.open_now[path])
            try:
                answer = rec._answer(path)
                if answer[0] == "hang":
                    rec.stop.wait(float(answer[1]))
                    answer = (200, {}, b"late")
                status, headers, out = answer
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except OSError:
                pass  # the caller gave up (its timeout) while we held the request
            finally:
                with rec.lock:
                    rec.open_now[path] -= 1

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815 - http.server's names

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="target-receiver", daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        rec.stop.set()
        server.shutdown()
        server.server_close()
