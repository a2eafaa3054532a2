"""A request to the gateway's server (``http``): its head, its headers looked up by name
whatever their case, its query parsed on first use, and its body, fed by the connection and read
through ``readany`` only when the handler wants it; and the checks of its framing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, overload
from urllib.parse import parse_qsl, unquote

import httptools

if TYPE_CHECKING:
    from agentmeter.gateway.http import Connection

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Refused(Exception):
    """A request the server answers itself, then closes the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Headers:
    """A request's headers, looked up by name whatever its case (names stored lower-case)."""

    __slots__ = ("_map",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._map: dict[str, list[str]] = {}
        for name, value in pairs:
            self._map.setdefault(name, []).append(value)

    @overload
    def get(self, name: str) -> str | None: ...

    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self._map.get(name.lower())
        return values[0] if values else default

    def getall(self, name: str) -> list[str]:
        return self._map.get(name.lower(), [])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)


class Request:
    """One request: its head, and its body read through ``readany`` (fed by the connection)."""

    def __init__(self, conn: Connection, method: str, url: bytes, headers: Headers,
                 version: str, keep_alive: bool) -> None:
        self.conn, self.method, self.headers = conn, method, headers
        self.version, self.keep_alive = version, keep_alive
        parsed = httptools.parse_url(url)
        raw_path = parsed.path.decode("latin-1") if parsed.path else "/"
        self.path = unquote(raw_path) if "%" in raw_path else raw_path
        self.query_string = parsed.query.decode("latin-1") if parsed.query else ""
        self._query: dict[str, str] | None = None
        self.match = ""  # the ``{target}`` of a pattern route (``Router.add_prefix``)
        length = headers.getall("content-length")
        self.content_length = int(length[0]) if length else None
        self.expect_continue = False
        self.complete = False  # the whole body has arrived
        self.failed: Exception | None = None  # the body will not arrive
        self._chunks: list[bytes] = []
        self.buffered = 0
        self._waiter: asyncio.Future[None] | None = None

    @property
    def query(self) -> dict[str, str]:
        """The query's parameters (of a repeated one, its first value), parsed on first use."""
        if self._query is None:
            self._query = {}
            for k, v in parse_qsl(self.query_string, keep_blank_values=True):
                self._query.setdefault(k, v)
        return self._query

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.conn.transport

    def hung_up(self) -> bool:
        return self.conn.transport is None or self.conn.transport.is_closing()

    # -- the body ----------------------------------------------------------------------------
    def read_nowait(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        self.buffered = 0
        self.conn.update_reading()
        return data

    async def readany(self) -> bytes:
        """The body's next bytes (all buffered), ``b""`` at its end; raises ConnectionError when
        it will not arrive. The first wait answers ``Expect: 100-continue``."""
        while True:
            if self._chunks:
                return self.read_nowait()
            if self.complete:
                return b""
            if self.failed is not None:
                raise ConnectionResetError(str(self.failed))
            if self.expect_continue:
                self.expect_continue = False
                self.conn.write(_CONTINUE)
            self._waiter = asyncio.get_running_loop().create_future()
            self.conn.update_reading()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self.buffered += len(data)
        self._wake()

    def end(self, failure: Exception | None = None) -> None:
        if failure is None:
            self.complete = True
        elif not self.complete:
            self.failed = failure
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def check_framing(headers: Headers) -> None:
    """Refuse a body whose length two parties could read differently (request smuggling)."""
    lengths = headers.getall("content-length")
    coding = headers.getall("transfer-encoding")
    if len(lengths) > 1:
        raise Refused(400, "several Content-Length headers")
    if coding and lengths:
        raise Refused(400, "both Content-Length and Transfer-Encoding")
    if coding and (len(coding) > 1 or coding[0].strip().lower() != "chunked"):
        raise Refused(400, "a Transfer-Encoding other than chunked")
    if lengths and not (lengths[0].isascii() and lengths[0].isdigit()):
        raise Refused(400, "an invalid Content-Length")
