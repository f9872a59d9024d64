"""A TCP proxy in front of a real PostgreSQL that reads the frontend's protocol messages, so a
test can see what a client sent and where it waited: `marks` is the sequence of the Execute
('E': a statement run), Flush ('H': psycopg asks for the answers so far, to read a result) and
Sync ('S': the end of a pipeline or of an extended-protocol statement) messages the client sent.
A pipelined transaction of two statements that reads the first one's answer before sending the
second shows "EHES"; one that sends everything before it waits, "EES" (psycopg may flush again
after the Sync, while it reads the answers: trailing H)."""

from __future__ import annotations

import asyncio
import struct
from typing import Self
from urllib.parse import urlsplit, urlunsplit

from chaos.netns import pump

SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104


class WireCounter:
    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._parts = parts
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.marks = ""
        self.dsn = ""

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        user = f"{self._parts.username}@" if self._parts.username else ""
        self.dsn = urlunsplit(self._parts._replace(netloc=f"{user}127.0.0.1:{port}"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reset(self) -> None:
        self.marks = ""

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._target)
        down = asyncio.create_task(pump(server_r, client_w))
        self._tasks.add(down)
        try:
            await self._frontend(client_r, server_w)
        finally:
            server_w.close()
            client_w.close()

    async def _frontend(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        started = False
        while True:
            if not started:  # untyped: SSLRequest / GSSENCRequest (the server answers) or StartupMessage
                head = await r.readexactly(8)
                length, code = struct.unpack("!ii", head)
                body = await r.readexactly(length - 8)
                w.write(head + body)
                await w.drain()
                started = code not in (SSL_REQUEST, GSSENC_REQUEST)
                continue
            try:
                kind = await r.readexactly(1)
            except asyncio.IncompleteReadError:
                return
            length = struct.unpack("!i", await r.readexactly(4))[0]
            body = await r.readexactly(length - 4)
            if kind in (b"E", b"S", b"H"):
                self.marks += kind.decode()
            w.write(kind + struct.pack("!i", length) + body)
            await w.drain()
