"""`cronwheel rest`'s HTTP side (cluster/api/rest_server.py) without a node: what a connection
is answered when the transcoder fails unexpectedly."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from cronwheel.cluster.api import rest_server


class Broken(rest_server.Transcoder):
    """A transcoder with a bug: every request raises."""

    def __init__(self) -> None:
        pass

    async def handle(self, verb: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        raise RuntimeError("a bug in the transcoder")


async def test_an_unexpected_error_is_a_500_answer_and_logged_not_a_dropped_connection(
        caplog: pytest.LogCaptureFixture) -> None:
    server = await asyncio.start_server(lambda r, w: rest_server._serve(Broken(), r, w), "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/schedules HTTP/1.1\r\nHost: t\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        body = json.loads(await reader.readexactly(length))
        writer.close()
        await writer.wait_closed()
    assert head.startswith(b"HTTP/1.1 500 ")
    assert body == {"code": 13, "message": "internal error", "details": []}
    assert [r.event for r in caplog.records if r.levelno == logging.ERROR] == ["rest_internal_error"]  # type: ignore[attr-defined]
