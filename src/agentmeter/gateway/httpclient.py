"""The gateway's HTTP/1.1 client to its upstreams: raw asyncio protocols, replies parsed by
``httptools`` (llhttp), kept-alive connections pooled per (scheme, host, port).

A request is written whole, with its ``Content-Length`` and ``Accept-Encoding: identity`` (no
reply is compressed, so none is decompressed). A reply's body is framed by its
``Content-Length``, chunked, or read until the connection closes. A pooled connection the peer
closed while idle is retried once, on a fresh connection, when nothing of its reply came; a
connection is pooled again only after a complete reply that allows keep-alive, never after an
error, an incomplete read or ``Connection: close``.

What an upstream (a local server, a misbehaving provider) sends is bounded: the status line and
headers (``MAX_HEAD_BYTES``, ``MAX_HEADERS``), a whole reply's body (``MAX_REPLY_BYTES``), and a
stream's unread bytes (``STREAM_BUFFER``: reading pauses until the reader takes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import httptools

#: the status line and headers of a reply
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
#: a whole (not streamed) reply's body: the largest JSON answer a provider plausibly sends
MAX_REPLY_BYTES = 32 * 1024 * 1024
#: a stream's bytes received and not yet taken by its reader before reading pauses
STREAM_BUFFER = 256 * 1024
#: kept-alive connections per origin, and how long one may stay idle (those idle longer are
#: closed when a connection is next given back; a peer closing one is seen at once)
MAX_IDLE = 256
IDLE_S = 30.0


class UpstreamError(Exception):
    """The upstream could not be reached, or its reply could not be read."""


class ConnectFailed(UpstreamError):
    """No connection (refused, DNS, TLS, connect timeout): the request never left."""


class ReadTimeout(UpstreamError):
    """The request was sent and nothing more came within the read timeout."""


class ReplyBroken(UpstreamError):
    """The reply ended early (the peer closed) or broke HTTP (malformed, too large a head)."""


class ReplyTooLarge(UpstreamError):
    """A whole reply's body beyond its limit (``MAX_REPLY_BYTES``)."""


#: characters a URL's path or query keeps as they are (others are percent-encoded)
_SAFE = "/:@!$&'()*+,;=-._~%?"


@dataclass(frozen=True)
class Target:
    """A parsed URL: its origin (the pool's key), its request target and ``Host`` header."""

    scheme: str
    host: str
    port: int
    path: str  # the request target: path and query
    host_header: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.path}"

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = quote(parts.path or "/", safe=_SAFE) + \
            (f"?{quote(parts.query, safe=_SAFE)}" if parts.query else "")  # as yarl did
        return cls(parts.scheme, parts.hostname, port, path, parts.netloc.rpartition("@")[2])


class _Conn(asyncio.Protocol):
    """One connection; one request at a time. Its reply's state is reset by ``begin``."""

    def __init__(self, client: UpstreamClient, origin: tuple[str, str, int]) -> None:
        self.client, self.origin = client, origin
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.active = False
        self.begin(stream=False)

    def begin(self, *, stream: bool) -> None:
        """A new reply: read whole (its body bounded by ``MAX_REPLY_BYTES``) or streamed (its
        unread bytes bounded by ``STREAM_BUFFER``)."""
        self.stream = stream
        self.limit: int | None = None if stream else MAX_REPLY_BYTES
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_bytes = self.header_count = 0
        self.headers_done = self.complete = self.paused = self.keep_alive = False
        self.until_close = False  # a body neither sized nor chunked: it ends at close
        self.received = False  # any byte of the reply
        self.body: list[bytes] = []
        self.buffered = self.total = 0
        self.error: UpstreamError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.last_data = self.loop.time()

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received = True
        self.last_data = self.loop.time()
        if not self.headers_done:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(self.error or ReplyBroken(f"malformed reply: {e}"))
            return
        if not self.headers_done and self.head_bytes > MAX_HEAD_BYTES:  # all of it head so far
            self._fail(ReplyBroken(f"reply head beyond {MAX_HEAD_BYTES} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.active and not self.complete and self.error is None:
            if self.until_close:
                self.complete = True
            else:
                self.error = ReplyBroken("the upstream closed the connection "
                                         + ("mid-reply" if self.received else "before replying"))
        self.client._lost(self)
        self._wake()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # a second reply, with the first or on an idle connection
            self.error = ReplyBroken("the upstream sent bytes no request asked for")
            raise self.error

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > MAX_HEADERS:
            self.error = ReplyBroken(f"reply with more than {MAX_HEADERS} headers")
            raise self.error
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status < 200:  # an interim reply (100 Continue): its head counts in the bounds
            self.headers = {}
            return
        self.headers_done = True
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.until_close = not chunked and "content-length" not in self.headers \
            and self.status not in (204, 304)
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.total += len(body)
        if self.limit is not None and self.total > self.limit:
            self.error = ReplyTooLarge(f"reply body beyond {self.limit} bytes")
            raise self.error
        self.body.append(body)
        self.buffered += len(body)
        if self.limit is None and self.buffered > STREAM_BUFFER and not self.paused \
                and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        if self.stream:
            self._wake()

    def on_message_complete(self) -> None:
        if not self.headers_done:  # the end of an interim reply: the real one follows
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # only true until this returns
        self._wake()

    # -- the reader's side -----------------------------------------------------------------
    def _fail(self, error: UpstreamError) -> None:
        self.error = error
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _check_timeout(self, timeout: float) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        due = self.last_data + timeout
        if self.loop.time() < due:  # data came since: the timeout runs from the last read
            self.timer = self.loop.call_at(due, self._check_timeout, timeout)
            return
        waiter.set_exception(ReadTimeout(f"nothing read for {timeout:g} s"))

    async def wait(self, timeout: float) -> None:
        """Until a wake (the head, the end, an error, a streamed part) or ``timeout`` seconds
        without a byte read (``ReadTimeout``)."""
        self.waiter = self.loop.create_future()
        self.timer = self.loop.call_at(self.last_data + timeout, self._check_timeout, timeout)
        try:
            await self.waiter
        finally:
            self.timer.cancel()
            self.timer = self.waiter = None

    def whole(self) -> None:
        """Read the rest whole: bounded by ``MAX_REPLY_BYTES``, no longer paused."""
        self.stream, self.limit = False, MAX_REPLY_BYTES
        if self.total > self.limit:  # received before, while streamed
            error = ReplyTooLarge(f"reply body beyond {self.limit} bytes")
            self._fail(error)
            raise error
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def take(self) -> bytes:
        """The body read so far (reading resumes if it paused)."""
        data = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    @property
    def reusable(self) -> bool:
        return self.complete and self.error is None and self.keep_alive \
            and self.transport is not None and not self.transport.is_closing()


class Reply:
    """A reply whose head was read: its body read whole (``read``) or chunk by chunk
    (``chunks``); then ``release`` (the connection pooled again, or closed)."""

    def __init__(self, conn: _Conn, read_timeout: float) -> None:
        self._conn, self._timeout = conn, read_timeout
        self.status = conn.status
        self.headers = conn.headers  # lower-case names
        ctype = self.headers.get("content-type", "application/octet-stream")
        self.content_type = ctype.split(";", 1)[0].strip().lower()
        self._released = False

    async def read(self) -> bytes:
        """The whole body. On an error or a cancellation (a local provider's client hung up)
        the connection is closed at once, so the upstream stops generating."""
        conn = self._conn
        try:
            conn.whole()
            while not conn.complete:
                if conn.error is not None:
                    raise conn.error
                await conn.wait(self._timeout)
        except BaseException:
            self.abort()
            raise
        return conn.take()

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.body:
                yield conn.take()
            elif conn.complete:
                return
            elif conn.error is not None:
                raise conn.error
            else:
                await conn.wait(self._timeout)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._conn.client._give_back(self._conn)

    def __del__(self) -> None:  # a reply dropped unreleased (its reader failed): never leaked
        if not self._released and self._conn.transport is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                self._conn.transport.abort()

    def abort(self) -> None:
        """Close the connection now (the upstream stops sending)."""
        if self._conn.transport is not None:
            self._conn.transport.abort()
        self.release()


class UpstreamClient:
    """Kept-alive connections by origin. ``ssl_context``: the default (system CAs), or the
    tests' own CA."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._open: set[_Conn] = set()
        self._swept = 0.0

    async def request(self, target: Target, head: bytes, body: bytes, *, connect_timeout: float,
                      read_timeout: float, stream: bool) -> Reply:
        """Send ``head`` (the request line and headers, ended by a blank line) and ``body``;
        the reply once its head is read. A whole reply's body is bounded by
        ``MAX_REPLY_BYTES``; a streamed one is not (it is read as it is taken)."""
        fresh = False
        while True:
            conn = None if fresh else self._take(target.origin)
            if conn is None:
                fresh = True
                conn = await self._connect(target, connect_timeout)
            conn.begin(stream=stream)
            conn.active = True
            try:
                assert conn.transport is not None
                conn.transport.writelines((head, body))
                while not conn.headers_done and conn.error is None:
                    await conn.wait(read_timeout)
            except BaseException:
                self._close(conn)
                raise
            if conn.headers_done:
                return Reply(conn, read_timeout)
            self._close(conn)
            assert conn.error is not None
            if fresh or conn.received:  # a stale pooled connection is retried once, fresh
                raise conn.error
            fresh = True

    def close(self) -> None:
        for conn in list(self._open):
            self._close(conn)
        self._idle.clear()

    # -- the pool --------------------------------------------------------------------------
    async def _connect(self, target: Target, timeout: float) -> _Conn:
        loop = asyncio.get_running_loop()
        tls = None
        if target.scheme == "https":
            tls = self._ssl = self._ssl or ssl.create_default_context()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self, target.origin), target.host, target.port, ssl=tls,
                    server_hostname=target.host if tls is not None else None)
        except TimeoutError:
            raise ConnectFailed(f"no connection within {timeout:g} s") from None
        except (OSError, ValueError) as e:  # refused, unreachable, DNS, TLS, a bad host name
            raise ConnectFailed(f"{type(e).__name__}: {e}") from e
        self._open.add(conn)
        return conn

    def _take(self, origin: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def _give_back(self, conn: _Conn) -> None:
        conn.active = False
        if not conn.reusable:
            self._close(conn)
            return
        conn.idle_since = now = conn.loop.time()
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= MAX_IDLE:
            self._close(conn)
        else:
            idle.append(conn)
        if now - self._swept > IDLE_S / 4:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Close connections idle longer than ``IDLE_S``."""
        self._swept = now
        for idle in self._idle.values():
            for conn in [c for c in idle if now - c.idle_since > IDLE_S]:
                idle.remove(conn)
                self._close(conn)

    def _close(self, conn: _Conn) -> None:
        conn.active = False
        if conn.transport is not None and not conn.transport.is_closing():
            conn.transport.abort()

    def _lost(self, conn: _Conn) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
