"""Raw local upstreams for the gateway's client tests (gateway/httpclient.py): servers that
send exactly the bytes a test scripts, and a connection fed by hand."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentmeter.gateway import httpclient
from agentmeter.gateway.httpclient import Target, UpstreamClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
           b"Transfer-Encoding: chunked\r\nX-Extra: 1\r\n\r\n"
           b"5\r\n{\"a\":\r\n3\r\n 12\r\n1\r\n}\r\n0\r\n\r\n")


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (len(body), extra)) + body


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request (head and its Content-Length body); b"" at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return b""
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


class Server:
    """A raw TCP (or TLS) server; ``connections`` counts the accepted ones."""

    def __init__(self, handler: Handler) -> None:
        self.handler, self.connections, self.requests = handler, 0, 0
        self.server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def start(self, tls: ssl.SSLContext | None = None) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=tls)
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[tuple[Server, Target]]]]:
    servers: list[Server] = []

    async def start(handler: Handler, tls: ssl.SSLContext | None = None,
                    scheme: str = "http") -> tuple[Server, Target]:
        server = Server(handler)
        servers.append(server)
        port = await server.start(tls)
        return server, Target.parse(f"{scheme}://localhost:{port}/v1/x")

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


def replies(*answers: bytes, close_after: bool = False) -> Handler:
    """Each request on a connection answered with the next of ``answers`` (shared)."""
    queue = list(answers)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while queue and await read_request(reader):
            writer.write(queue.pop(0))
            await writer.drain()
        if not close_after:
            await reader.read()
    return handle


async def post(client: UpstreamClient, target: Target, *, stream: bool = False,
               read_timeout: float = 5.0) -> httpclient.Reply:
    head = (f"POST {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\n"
            "Content-Length: 2\r\n\r\n").encode()
    return await client.request(target, head, b"{}", connect_timeout=5.0,
                                read_timeout=read_timeout, stream=stream)


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def fed_conn(stream: bool = False) -> httpclient._Conn:
    conn = httpclient._Conn(UpstreamClient(), ("http", "h", 80))
    conn.connection_made(FakeTransport())
    conn.begin(stream=stream)
    conn.active = True
    return conn
