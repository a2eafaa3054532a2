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

The server (``http``) enforces the per-connection bounds and the gate; the handlers read the
body through ``read_body``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from agentmeter.gateway.httprequest import Request

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


async def read_body(request: Request, load: TrialLoad, limits: GatewayLimits,
                    held: list[int]) -> bytes:
    """The request's body, within the limits (raises :class:`BodyRefused`, or ConnectionError
    when the client hung up). ``held[0]`` is what this request holds of the trial's body bytes:
    the caller gives it back (``release_body``) when the request ends, so the bytes count for as
    long as the call may keep them. Nothing is read (no ``100 Continue`` sent) before the
    declared length is admitted."""
    declared = request.content_length
    if declared is not None:
        if declared > limits.max_body_bytes:
            raise BodyRefused(413, f"request body of {declared} bytes is over the gateway's "
                              f"limit of {limits.max_body_bytes} bytes")
        _hold(load, limits, held, declared)
    if request.complete and request.buffered <= limits.max_body_bytes:
        # the whole body is here already (a small body arrives with its headers): no wait, so
        # no deadline to arm; its size is checked as a streamed body's is
        data = request.read_nowait()
        if len(data) > held[0]:
            _hold(load, limits, held, len(data) - held[0])
        return data
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            while True:
                chunk = await request.readany()
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
    """Counts connections per client (the server's ``http.Connection`` asks it to admit each)."""

    def __init__(self, limits: GatewayLimits) -> None:
        self.limits = limits
        self.open: dict[str, int] = {}

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
