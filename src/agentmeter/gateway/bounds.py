"""What one trial (and one connecting client) may hold of the gateway: requests in flight, request
bytes in memory, connections, and how long a request may take to arrive or a response to leave.

A hostile agent must not be able to take the runner's memory or file descriptors, whatever it
sends. :class:`GatewayLimits` says how much; the rest enforces it:

- per trial, ``max_in_flight`` requests at once (beyond: 429 before the body is read);
- per request, ``max_body_bytes`` (413 before reading when ``Content-Length`` says so; a chunked
  body is cut at the first byte over);
- per trial, ``max_trial_body_bytes`` of request bodies held in memory at once (beyond: 429);
- per connection, ``header_timeout_s`` for a request's headers to arrive (from the connection's
  start or the end of its previous response: a half-sent request is closed), ``body_timeout_s``
  for its body (408, then closed) and ``write_timeout_s`` for a response to be taken by the client
  (then the connection is aborted; a call under way is still metered);
- per connecting client (an IP address over TCP, a process over the Unix socket: each trial's
  bridge is its own), ``max_connections_per_client`` connections at once (beyond: 503, closed).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


class GatewayLimits(BaseModel):
    """Bounds the gateway enforces (defaults on; the runner passes its own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_in_flight: int = Field(default=16, ge=1, description="requests in flight per trial")
    max_body_bytes: int = Field(default=32 * MIB, ge=1, description="bytes of one request body")
    max_trial_body_bytes: int = Field(default=32 * MIB, ge=1,
                                      description="bytes of request bodies held per trial")
    header_timeout_s: float = Field(default=60.0, gt=0, description="for a request's headers")
    body_timeout_s: float = Field(default=60.0, gt=0, description="for a request's body")
    write_timeout_s: float = Field(default=60.0, gt=0,
                                   description="for a response (or a stream's write) to be taken")
    max_connections_per_client: int = Field(default=128, ge=1,
                                            description="open connections per connecting client")


class BodyRefused(Exception):
    """A request body the gateway will not hold: the status and message of the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class TrialLoad:
    """What one trial holds of the gateway now."""

    requests: int = 0
    body_bytes: int = 0

    def enter(self, limits: GatewayLimits) -> bool:
        """Count a request in flight; ``False`` (not counted) when the trial has its maximum."""
        if self.requests >= limits.max_in_flight:
            return False
        self.requests += 1
        return True

    def leave(self) -> None:
        self.requests -= 1


async def read_body(request: web.BaseRequest, load: TrialLoad, limits: GatewayLimits,
                    held: list[int]) -> bytes:
    """The request's body, within the limits (raises :class:`BodyRefused`). ``held[0]`` is what
    this request holds of the trial's body bytes: the caller gives it back (``release_body``)
    when the request ends, so the bytes count for as long as the call may keep them."""
    declared = request.content_length
    if declared is not None:
        if declared > limits.max_body_bytes:
            raise BodyRefused(413, f"request body of {declared} bytes is over the gateway's "
                              f"limit of {limits.max_body_bytes} bytes")
        _hold(load, limits, held, declared)
    content = request.content
    if content.is_eof() and content.total_bytes <= limits.max_body_bytes:
        # the whole body is here already (a small body arrives with its headers): no wait, so
        # no deadline to arm; its size is checked as a streamed body's is
        data = content.read_nowait(-1)
        if len(data) > held[0]:
            _hold(load, limits, held, len(data) - held[0])
        return data
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise BodyRefused(413, "request body is over the gateway's limit of "
                                      f"{limits.max_body_bytes} bytes")
                if size > held[0]:
                    _hold(load, limits, held, size - held[0])
                chunks.append(chunk)
    except TimeoutError:
        raise BodyRefused(408, f"request body not received within {limits.body_timeout_s:g} s") \
            from None
    return b"".join(chunks)


def _hold(load: TrialLoad, limits: GatewayLimits, held: list[int], more: int) -> None:
    if load.body_bytes + more > limits.max_trial_body_bytes:
        raise BodyRefused(429, "the trial's requests in flight hold the gateway's limit of "
                          f"{limits.max_trial_body_bytes} body bytes; retry")
    load.body_bytes += more
    held[0] += more


def release_body(load: TrialLoad, held: list[int]) -> None:
    load.body_bytes -= held[0]
    held[0] = 0


# -- connections -------------------------------------------------------------------------------
_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: 47\r\n\r\ntoo many connections from this gateway client\r\n")
_PEERCRED = struct.Struct("3i")


def client_key(transport: asyncio.BaseTransport) -> str:
    """Who connected: the peer's IP address, or over a Unix socket the peer's process."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return f"ip:{peer[0]}"
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX and hasattr(socket, "SO_PEERCRED"):
        try:
            pid, _, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         _PEERCRED.size))
        except OSError:
            return "unix"
        return f"pid:{pid}"
    return "unix"


class ConnectionGate:
    """Counts connections per client and closes connections that hold the gateway idle."""

    def __init__(self, limits: GatewayLimits) -> None:
        self.limits = limits
        self.open: dict[str, int] = {}

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server``: aiohttp's, wrapped."""
        return lambda: BoundedConnection(inner(), self)

    def admit(self, key: str) -> bool:
        n = self.open.get(key, 0)
        if n >= self.limits.max_connections_per_client:
            return False
        self.open[key] = n + 1
        return True

    def release(self, key: str) -> None:
        n = self.open.get(key, 0) - 1
        if n > 0:
            self.open[key] = n
        else:
            self.open.pop(key, None)


class BoundedConnection(asyncio.Protocol):
    """aiohttp's protocol behind a per-client connection count and a header deadline: from the
    connection's start, and again from the end of each response, the next request's headers
    must arrive within ``header_timeout_s`` (a request being handled has no such deadline: its
    body and its response have their own)."""

    def __init__(self, inner: asyncio.Protocol, gate: ConnectionGate) -> None:
        self.inner, self.gate = inner, gate
        self.transport: asyncio.Transport | None = None
        self.key: str | None = None
        self.busy = 0
        #: the idle connection's header deadline (loop time), ``None`` while a request is
        #: handled. One timer serves many requests: it is moved on, not re-armed, per request
        self.deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport; uvloop's are not asyncio.Transport subclasses, hence no check
        self.transport = stream = cast(asyncio.Transport, transport)
        key = client_key(transport)
        if not self.gate.admit(key):
            stream.write(_REFUSED)
            stream.close()
            return
        self.key = key
        self.inner.connection_made(transport)
        self.idle()

    def data_received(self, data: bytes) -> None:
        if self.key is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.key is not None else None

    def pause_writing(self) -> None:
        if self.key is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.key is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self.key is not None:
            self.gate.release(self.key)
            self.key = None
            self.inner.connection_lost(exc)

    # -- the header deadline -------------------------------------------------------------
    def start_request(self) -> None:
        self.busy += 1
        self.deadline = None

    def end_request(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self.idle()

    def idle(self) -> None:
        if self.transport is None or self.transport.is_closing():
            self._cancel()
            return
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + self.gate.limits.header_timeout_s
        if self._timer is None:  # else the armed timer (due earlier) moves on when it fires
            self._timer = loop.call_at(self.deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.deadline is None:  # a request is being handled: its end arms the deadline
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self.deadline:  # a request came and went since: its deadline
            self._timer = loop.call_at(self.deadline, self._expire)
        else:
            self.abort()

    def abort(self) -> None:
        self._cancel()
        if self.transport is not None:
            self.transport.abort()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def connection_of(request: web.BaseRequest) -> BoundedConnection | None:
    transport = request.transport
    proto = transport.get_protocol() if transport is not None else None
    return proto if isinstance(proto, BoundedConnection) else None


def middleware(limits: GatewayLimits) -> Middleware:
    """Marks each request's connection busy while it is handled, and sends a whole response
    within ``write_timeout_s`` (else the connection is aborted)."""

    @web.middleware
    async def bound(request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = connection_of(request)
        if conn is not None:
            conn.start_request()
        try:
            resp = await handler(request)
            if not resp.prepared:
                try:
                    async with asyncio.timeout(limits.write_timeout_s):
                        await resp.prepare(request)
                        await resp.write_eof()
                except TimeoutError:
                    abort(request)
            return resp
        finally:
            if conn is not None:
                conn.end_request()

    return bound


def abort(request: web.BaseRequest) -> None:
    """Drop the request's connection at once (a client that does not take its response)."""
    if request.transport is not None:
        request.transport.abort()
