"""Shared by the REST API tests (issue 51): a `cronwheel rest` process in front of a node, and a
plain HTTP client (urllib) calling it as curl would."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .api_cluster import TOKENS
from .helpers import CRONWHEEL, LineReader


@contextmanager
def rest_process(address: str, *extra: str) -> Iterator[str]:
    """`cronwheel rest --address ADDRESS` on a free loopback port; yields its base URL."""
    proc = subprocess.Popen([*CRONWHEEL, "rest", "--address", address, "--listen", "127.0.0.1:0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = LineReader(proc).wait_for("rest api listening on ", timeout=30)
        yield line.rsplit(" ", 1)[1]
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


class Http:
    """Calls the REST API as one token (None: no Authorization header)."""

    def __init__(self, base: str, who: str | None) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {TOKENS[who][0]}"} if who else {}

    def call(self, verb: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, **({"Content-Type": "application/json"} if data is not None else {})}
        req = urllib.request.Request(self.base + path, data=data, method=verb, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            with err:
                return err.code, json.loads(err.read())

    def ok(self, verb: str, path: str, body: Any = None) -> Any:
        status, got = self.call(verb, path, body)
        assert status == 200, (verb, path, status, got)
        return got
