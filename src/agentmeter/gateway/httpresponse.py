"""The gateway server's responses (``http``): a whole ``Response`` and a ``StreamResponse``
(chunked over HTTP/1.1; over HTTP/1.0, raw and the connection closed at its end)."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentmeter.gateway.httprequest import Request

JSON = "application/json"
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_REASONS[499] = b"Client Closed Request"


def _status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))


def _fields(headers: dict[str, str]) -> bytes:
    return b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers.items())


class Response:
    """A whole response: status, body, content type, extra headers; ``close``: the connection
    ends after it."""

    __slots__ = ("status", "body", "content_type", "headers", "close", "ended")

    def __init__(self, status: int = 200, body: bytes = b"", content_type: str = JSON, *,
                 headers: dict[str, str] | None = None, close: bool = False) -> None:
        self.status, self.body, self.content_type = status, body, content_type
        self.headers: dict[str, str] = headers if headers is not None else {}
        self.close = close
        self.ended = False  # sent whole

    def head(self, close: bool) -> bytes:
        extra = _fields(self.headers) if self.headers else b""
        return b"%sContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
            _status_line(self.status), self.content_type.encode("latin-1"), len(self.body),
            extra, b"Connection: close\r\n" if close else b"")

    def encode(self, close: bool) -> bytes:
        return self.head(close) + self.body


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj).encode())


def refusal_bytes(status: int, message: str) -> bytes:
    """A plain-text refusal the server sends itself before closing the connection."""
    return Response(status, f"{message}\r\n".encode(), "text/plain").encode(close=True)


class StreamResponse:
    """A response written as it goes: ``prepare`` (the head), ``write``, ``write_eof``. Each
    write waits while the client has not taken what was written, up to the gateway's
    ``write_timeout_s`` (then the connection is aborted and TimeoutError raised); a client gone
    raises ConnectionError."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers: dict[str, str] = dict(headers or {})
        self.request: Request | None = None
        self.chunked = True
        self.close = False
        self.ended = False

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "application/octet-stream")

    @content_type.setter
    def content_type(self, value: str) -> None:
        self.headers["Content-Type"] = value

    @property
    def prepared(self) -> bool:
        return self.request is not None

    async def prepare(self, request: Request) -> None:
        if self.request is not None:
            return
        self.request = request
        self.chunked = request.version == "1.1"
        self.close = not self.chunked or not request.keep_alive
        framing = b"Transfer-Encoding: chunked\r\n" if self.chunked else b""
        request.conn.write(_status_line(self.status) + _fields(self.headers) + framing
                           + (b"Connection: close\r\n" if self.close else b"") + b"\r\n")

    async def write(self, data: bytes) -> None:
        assert self.request is not None, "write before prepare"
        if not data or self.request.method == "HEAD":
            return
        conn = self.request.conn
        conn.write(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data)
        await self._drain()

    async def write_eof(self) -> None:
        assert self.request is not None, "write_eof before prepare"
        if self.ended:
            return
        self.ended = True
        if self.chunked and self.request.method != "HEAD":
            self.request.conn.write(b"0\r\n\r\n")
        await self._drain()

    async def _drain(self) -> None:
        assert self.request is not None
        try:
            await self.request.conn.drain()
        except TimeoutError:
            self.request.conn.abort()
            raise
