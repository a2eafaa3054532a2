"""The gateway's HTTP/1.1 server: an ``asyncio.Protocol`` whose requests are parsed by
``httptools`` (llhttp, the C parser uvicorn uses). One task per request, requests on a connection
handled one at a time in order.

The client is the agent, assumed hostile. Besides the limits of ``bounds.GatewayLimits`` (the
connection gate, the header deadline, the body read through ``Request.readany`` only when the
handler wants it, the write deadline), the server bounds what a parser would otherwise take
unbounded: a request's head (``MAX_HEAD_BYTES``, ``MAX_HEADERS``: 431; ``MAX_URL_BYTES``: 414),
a body buffered before the handler reads it (``BODY_BUFFER``: reading paused), requests
pipelined ahead (reading paused while one waits; beyond ``MAX_PIPELINED`` parsed from one read,
the connection ends after answering them). Ambiguous framing (``Content-Length`` with
``Transfer-Encoding``, several ``Content-Length``, a coding other than chunked), an ``Expect``
other than ``100-continue``, a protocol upgrade and an unparsable request are refused (400 or
417), and the connection closed. The requests are in ``httprequest``, the responses in ``httpresponse``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import cast

import httptools

from agentmeter.gateway.bounds import ConnectionGate, GatewayLimits, client_key
from agentmeter.gateway.httprequest import Headers, Refused, Request, check_framing
from agentmeter.gateway.httpresponse import (
    Response,
    StreamResponse,
    refusal_bytes,
)

log = logging.getLogger(__name__)

#: bytes of a request's line and headers (beyond: 431)
MAX_HEAD_BYTES = 64 * 1024
#: header lines of a request (beyond: 431)
MAX_HEADERS = 100
#: bytes of a request's target (beyond: 414)
MAX_URL_BYTES = 16 * 1024
#: body bytes buffered for a request its handler has not taken yet (beyond: reading paused)
BODY_BUFFER = 64 * 1024
#: requests parsed ahead of the one handled (one read can hold many small ones; beyond: the
#: rest of the connection is dropped once they are answered)
MAX_PIPELINED = 16

Handler = Callable[["Request"], Awaitable[Response | StreamResponse]]


class Router:
    """Exact (method, path) routes, ``{prefix}/{target}`` routes (one segment: the Gemini
    ``/v1beta/models/{model}:{method}``), and a fallback. HEAD is served by GET's handler."""

    def __init__(self, fallback: Handler) -> None:
        self.exact: dict[tuple[str, str], Handler] = {}
        self.prefixed: list[tuple[str, str, Handler]] = []
        self.fallback = fallback

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.exact[(method, path)] = handler

    def add_prefix(self, method: str, prefix: str, handler: Handler) -> None:
        self.prefixed.append((method, prefix.rstrip("/") + "/", handler))

    def resolve(self, request: Request) -> Handler:
        method = "GET" if request.method == "HEAD" else request.method
        handler = self.exact.get((method, request.path))
        if handler is not None:
            return handler
        for m, prefix, h in self.prefixed:
            if m == method and request.path.startswith(prefix):
                target = request.path[len(prefix):]
                if target and "/" not in target:
                    request.match = target
                    return h
        return self.fallback


class HttpServer:
    """The protocol factory (``connection``) of ``loop.create_server``, and its connections."""

    def __init__(self, router: Router, limits: GatewayLimits, gate: ConnectionGate) -> None:
        self.router, self.limits, self.gate = router, limits, gate
        self.connections: set[Connection] = set()

    def connection(self) -> Connection:
        return Connection(self)

    def close_all(self) -> None:
        for conn in list(self.connections):
            conn.abort()


class Connection(asyncio.Protocol):
    """One client connection. See the module's docstring for what it bounds."""

    def __init__(self, server: HttpServer) -> None:
        self.server, self.limits = server, server.limits
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.key: str | None = None  # the client, as the gate counts it; None: not admitted
        self.waiting: collections.deque[Request | Refused] = collections.deque()
        self.current: Request | None = None  # being handled
        self.task: asyncio.Task[None] | None = None  # handling it (held: the loop's is weak)
        self.receiving: Request | None = None  # whose body is arriving
        self.dead = False  # parsing stopped: answer what is parsed, then close
        self.in_head = True  # between messages or in a head: bytes read count as head bytes
        self.head_raw = 0
        self._url = b""
        self._pairs: list[tuple[str, str]] = []
        self._head_bytes = 0
        self._read_paused = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        #: the idle connection's header deadline (loop time), ``None`` while a request is
        #: handled. One timer serves many requests: moved on, not re-armed, per request
        self.deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport; uvloop's are not asyncio.Transport subclasses, hence no check
        self.transport = stream = cast(asyncio.Transport, transport)
        key = client_key(transport)
        if not self.server.gate.admit(key):
            stream.write(refusal_bytes(503, "too many connections from this gateway client"))
            stream.close()
            return
        self.key = key
        self.server.connections.add(self)
        self.idle()

    def data_received(self, data: bytes) -> None:
        if self.key is None or self.dead:
            return
        if self.in_head or self.receiving is not None:
            self.head_raw += len(data)
        try:
            self.parser.feed_data(data)
        except Refused as e:  # raised by a callback of ours
            self.fail(e)
        except httptools.HttpParserUpgrade:
            self.fail(Refused(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as e:
            cause = e.__context__
            self.fail(cause if isinstance(cause, Refused) else
                      Refused(400, f"invalid HTTP request: {e}"))
        else:
            if (self.in_head or self.receiving is not None) and self.head_raw > MAX_HEAD_BYTES:
                self.fail(Refused(431, "request header fields too large"))

    def eof_received(self) -> bool | None:
        """The client's FIN is its hang-up (a client closing while it waits for a whole reply
        sends nothing else): the transport closes, so the call under way sees its client gone
        (a local provider stops generating; the call is recorded as disconnected). A client
        that only half-closes after its request loses its reply, as with aiohttp."""
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self.key is not None:
            self.server.gate.release(self.key)
            self.key = None
        self.server.connections.discard(self)
        gone = ConnectionResetError("the client hung up")
        for req in (self.receiving, self.current):
            if req is not None:
                req.end(gone)
        self.waiting.clear()
        self._resume_writers(gone)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._resume_writers(None)

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        if len(self.waiting) >= MAX_PIPELINED:
            raise Refused(400, f"more than {MAX_PIPELINED} requests pipelined")
        self._url, self._pairs, self._head_bytes = b"", [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_URL_BYTES:
            raise Refused(414, f"request target over {MAX_URL_BYTES} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if len(self._pairs) >= MAX_HEADERS or self._head_bytes > MAX_HEAD_BYTES:
            raise Refused(431, "request header fields too large")
        self._pairs.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.in_head, self.head_raw = False, 0
        parser = self.parser
        headers = Headers(self._pairs)
        check_framing(headers)
        method = parser.get_method().decode("ascii", "replace")
        req = Request(self, method, self._url, headers, parser.get_http_version(),
                      parser.should_keep_alive())
        if parser.should_upgrade():
            raise Refused(400, "protocol upgrades are not supported")
        expect = headers.get("expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                raise Refused(417, f"unsupported Expect: {expect[:100]}")
            req.expect_continue = req.version == "1.1"
        self.receiving = req
        if self.current is None and not self.waiting:
            self._start(req)
        else:
            self.waiting.append(req)
            self.update_reading()

    def on_body(self, body: bytes) -> None:
        assert self.receiving is not None
        self.head_raw = 0  # framing and trailers since the last body byte: held to the head's
        self.receiving.feed(body)
        if self.receiving.buffered > BODY_BUFFER:
            self.update_reading()

    def on_message_complete(self) -> None:
        if self.receiving is not None:
            self.receiving.end()
            self.receiving = None
        self.in_head, self.head_raw = True, 0

    # -- requests ----------------------------------------------------------------------------
    def fail(self, refused: Refused) -> None:
        """Stop parsing; answer ``refused`` in its turn, then close. A request whose body was
        arriving fails instead (its handler answers it)."""
        self.dead = True
        self._pause_reading()
        req, self.receiving = self.receiving, None
        if req is not None and not req.complete:
            req.end(ConnectionResetError(refused.message))
            return
        if self.current is None and not self.waiting:
            self._refuse(refused)
        else:
            self.waiting.append(refused)

    def _refuse(self, refused: Refused) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(refusal_bytes(refused.status, refused.message))
            self.transport.close()

    def _start(self, req: Request) -> None:
        self.current = req
        self.deadline = None
        self.task = asyncio.get_running_loop().create_task(self._serve(req))

    async def _serve(self, req: Request) -> None:
        try:
            resp = await self.server.router.resolve(req)(req)
        except asyncio.CancelledError:
            self.abort()
            raise
        except Exception:
            log.exception("gateway handler failed: %s %s", req.method, req.path)
            resp = Response(500, b"internal gateway error\n", "text/plain", close=True)
        try:
            if isinstance(resp, Response):
                await self._send_whole(req, resp)
            close = resp.close or not resp.ended
        except ConnectionError:
            close = True
        except Exception:  # a response that cannot be written (say, a header it cannot encode)
            log.exception("gateway response failed: %s %s", req.method, req.path)
            self.abort()
            close = True
        self._finish(req, close)

    async def _send_whole(self, req: Request, resp: Response) -> None:
        close = resp.close or not req.keep_alive or not req.complete
        self.write(resp.head(close) if req.method == "HEAD" else resp.encode(close))
        resp.close, resp.ended = close, True
        if self._write_paused:
            try:
                await self.drain()
            except TimeoutError:
                self.abort()

    def _finish(self, req: Request, close: bool) -> None:
        """The response has been sent: the next request, or the header deadline."""
        self.current = None
        if close or not req.keep_alive or not req.complete:
            if self.transport is not None:
                self.transport.close()  # after what is buffered is sent
            return
        if self.waiting:
            nxt = self.waiting.popleft()
            if isinstance(nxt, Refused):
                self._refuse(nxt)
            else:
                self._start(nxt)
            self.update_reading()
            return
        self.idle()
        self.update_reading()

    # -- reading and writing -----------------------------------------------------------------
    def update_reading(self) -> None:
        """Read while nothing waits its turn and the arriving body is within ``BODY_BUFFER``
        (or its handler is waiting for it)."""
        if self.dead:
            return
        req = self.receiving
        hold = bool(self.waiting) or (req is not None and req.buffered > BODY_BUFFER)
        if hold:
            self._pause_reading()
        elif self._read_paused and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None \
                and not self.transport.is_closing():
            self._read_paused = True
            self.transport.pause_reading()

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client hung up")
        transport.write(data)

    async def drain(self) -> None:
        """Wait until the client has taken what was written (``write_timeout_s``; raises
        TimeoutError, or ConnectionError when it hung up)."""
        if not self._write_paused:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        async with asyncio.timeout(self.limits.write_timeout_s):
            await asyncio.shield(self._drained)

    def _resume_writers(self, exc: Exception | None) -> None:
        fut, self._drained = self._drained, None
        if fut is not None and not fut.done():
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)
                fut.exception()  # retrieved: no warning when no writer waits

    def abort(self) -> None:
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    # -- the header deadline -----------------------------------------------------------------
    def idle(self) -> None:
        if self.transport is None or self.transport.is_closing():
            self._cancel_timer()
            return
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + self.limits.header_timeout_s
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

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
