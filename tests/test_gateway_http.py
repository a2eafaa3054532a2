"""A hostile client against the gateway's own HTTP server (``gateway/http.py``), raw bytes over
a real socket: heads too big, ambiguous framing, upgrades, garbage, pipelining, ``Expect``,
HTTP/1.0 and HEAD. Each bound here fails its test with the bound disabled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator

import pytest
from polling import eventually_async
from test_gateway import PATHS, request_body
from test_hostile_gateway import GatedUpstream, closed_within, gated, head, start_gateway

from agentmeter.gateway import Gateway, GatewayLimits
from agentmeter.gateway import http as gw_http
from agentmeter.gateway.httprequest import Request

__all__ = ["gated"]  # the fixture, used by name

GOOD = json.dumps(request_body("chat", False)).encode()


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    gateway = await start_gateway(None)
    yield gateway
    await gateway.stop()


async def exchange(gw: Gateway, data: bytes, seconds: float = 5) -> bytes:
    """Send ``data``; what the gateway sent before it closed the connection."""
    assert gw.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(data)
        await writer.drain()
        return await closed_within(reader, seconds)
    finally:
        writer.close()


def call(token: str, extra: str = "", body: bytes = GOOD) -> bytes:
    return head(token, f"Content-Length: {len(body)}\r\n{extra}\r\n") + body


async def test_too_many_header_lines_get_431_and_the_connection_closed(gw: Gateway) -> None:
    many = "".join(f"X-H{i}: v\r\n" for i in range(gw_http.MAX_HEADERS + 1))
    answer = await exchange(gw, b"GET / HTTP/1.1\r\nHost: gw\r\n" + many.encode() + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431") and answer.count(b"HTTP/1.1") == 1


async def test_an_endless_header_is_cut_at_the_head_limit(gw: Gateway) -> None:
    """One header value that never ends, sent piece by piece: refused once the head's bytes
    pass ``MAX_HEAD_BYTES`` (the parser would otherwise buffer it whole)."""
    assert gw.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: gw\r\nX-Long: ")
        piece = b"a" * 16384
        with pytest.raises(ConnectionError):  # the gateway closes while we still send
            for _ in range(4 * gw_http.MAX_HEAD_BYTES // len(piece) + 64):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            await asyncio.sleep(0.2)
            writer.write(piece)  # a write after the close is refused
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(piece)
            await writer.drain()
        with contextlib.suppress(ConnectionError):  # a close with our bytes unread: a reset
            answer = await closed_within(reader, 5)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:100]
    finally:
        writer.close()


async def test_a_long_url_gets_414(gw: Gateway) -> None:
    path = "/" + "a" * (gw_http.MAX_URL_BYTES + 1)
    answer = await exchange(gw, f"GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 414")


@pytest.mark.parametrize("framing", [
    "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    "Content-Length: 5\r\nContent-Length: 6\r\n",
    "Content-Length: 5\r\nContent-Length: 5\r\n",
    "Transfer-Encoding: gzip, chunked\r\n",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
], ids=["cl-te", "te-cl", "two-lengths", "same-length-twice", "gzip-chunked", "te-twice"])
async def test_ambiguous_framing_is_refused_and_closed(gw: Gateway, framing: str) -> None:
    """Request smuggling: a body two parties could delimit differently is refused, and the
    bytes after it are never read as a request."""
    token = gw.open_trial("t", "scripted/explorer")
    smuggled = b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n"
    answer = await exchange(gw, head(token, framing + "\r\n") + b"5\r\nhello\r\n0\r\n\r\n"
                            + smuggled)
    assert answer.startswith(b"HTTP/1.1 400") and answer.count(b"HTTP/1.1") == 1, answer[:200]
    assert gw.close_trial("t").calls == []


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,  # a TLS hello
    b"GET / HTTP/9.9\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
], ids=["tls", "version", "chunk-size", "header"])
async def test_an_invalid_request_gets_400_and_the_connection_closed(
        gw: Gateway, garbage: bytes) -> None:
    answer = await exchange(gw, garbage)
    # a body that breaks off fails its request: answered by its handler (no token here: 401)
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 401")), answer[:200]
    assert answer.count(b"HTTP/1.1") == 1
    assert await eventually_async(lambda: gw._gate.open == {})


async def test_an_upgrade_is_refused(gw: Gateway) -> None:
    answer = await exchange(gw, b"GET / HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\n"
                            b"Upgrade: websocket\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and b"upgrade" in answer


async def test_pipelined_requests_are_answered_one_at_a_time_in_order(
        gated: tuple[GatedUpstream, int]) -> None:
    """A request pipelined behind a call under way waits for it: its answer comes second."""
    up, port = gated
    gw = await start_gateway(None, port)
    try:
        token = gw.open_trial("t", "gated/up")
        assert gw.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        bad = head("am-wrong", f"Content-Length: {len(GOOD)}\r\n\r\n") + GOOD
        writer.write(call(token) + bad + b"GET / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        await writer.drain()
        assert await eventually_async(lambda: up.received == 1)
        with pytest.raises(TimeoutError):  # nothing is answered before the call's answer
            await asyncio.wait_for(reader.read(1), 0.5)
        up.gate.set()
        answer = await closed_within(reader, 5)
        writer.close()
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"200", b"401", b"200"]
        assert answer.index(b"WHOLE") < answer.index(b"trial token") < \
            answer.index(b"agentmeter gateway")
        assert len(gw.close_trial("t").calls) == 1
    finally:
        await gw.stop()


async def test_pipelining_beyond_the_bound_ends_the_connection(gw: Gateway) -> None:
    """A read of many tiny pipelined requests: those within ``MAX_PIPELINED`` are answered, then
    the connection ends (the rest are never parsed into requests)."""
    n = gw_http.MAX_PIPELINED * 20
    answer = await exchange(gw, b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n" * n)
    answered = answer.count(b"HTTP/1.1 200")
    assert 1 <= answered <= gw_http.MAX_PIPELINED + 1, answered
    assert answer.rstrip().endswith(b"requests pipelined")


async def test_a_pipelined_body_is_not_read_ahead(gated: tuple[GatedUpstream, int]) -> None:
    """While a call is under way, the next request's body on the connection is read no further
    than ``BODY_BUFFER`` (and one read): the client's bytes wait in its own socket."""
    up, port = gated
    gw = await start_gateway(None, port)
    try:
        assert gw.port is not None
        token = gw.open_trial("t", "gated/up")
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        size = 8 * 1024 * 1024
        writer.write(call(token) + head(token, f"Content-Length: {size}\r\n\r\n"))
        await writer.drain()
        assert await eventually_async(lambda: up.received == 1)
        writer.write(b"x" * size)  # not drained: the gateway takes little of it
        await asyncio.sleep(0.5)
        (conn,) = gw._http.connections if gw._http else ()
        assert conn.waiting and isinstance(conn.waiting[0], Request)
        assert conn.waiting[0].buffered <= gw_http.BODY_BUFFER + 256 * 1024
        assert writer.transport.get_write_buffer_size() > size // 2
        writer.close()
        up.gate.set()
    finally:
        await gw.stop()


async def test_expect_continue_is_answered_only_when_the_body_is_wanted(gw: Gateway) -> None:
    token = gw.open_trial("t", "scripted/explorer")
    assert gw.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(head(token, f"Content-Length: {len(GOOD)}\r\nExpect: 100-continue\r\n\r\n"))
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == \
            b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(GOOD)
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    # a request refused before its body is read gets its answer, no 100, and is closed
    refused = await exchange(gw, head("am-wrong", f"Content-Length: {len(GOOD)}\r\n"
                                      "Expect: 100-continue\r\n\r\n"))
    assert refused.startswith(b"HTTP/1.1 401") and b" 100 " not in refused
    other = await exchange(gw, head(token, "Content-Length: 2\r\nExpect: magic\r\n\r\n"))
    assert other.startswith(b"HTTP/1.1 417")
    assert len(gw.close_trial("t").calls) == 1


async def test_http_1_0_and_connection_close_end_the_connection(gw: Gateway) -> None:
    token = gw.open_trial("t", "scripted/explorer")
    body = json.dumps(request_body("chat", False)).encode()
    for request in (
            f"POST {PATHS['chat']} HTTP/1.0\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body,
            call(token, "Connection: close\r\n")):
        answer = await exchange(gw, request)
        assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["choices"]
    # a stream to an HTTP/1.0 client: not chunked, ended by the close
    stream = json.dumps(request_body("chat", True)).encode()
    answer = await exchange(gw, f"POST {PATHS['chat']} HTTP/1.0\r\nAuthorization: Bearer "
                            f"{token}\r\nContent-Length: {len(stream)}\r\n\r\n".encode() + stream)
    assert answer.startswith(b"HTTP/1.1 200") and b"chunked" not in answer.lower()
    assert answer.rstrip().endswith(b"data: [DONE]")


async def test_head_gets_the_headers_without_the_body(gw: Gateway) -> None:
    answer = await exchange(gw, b"HEAD / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    headers, _, rest = answer.partition(b"\r\n\r\n")
    assert headers.startswith(b"HTTP/1.1 200") and b"Content-Length: 19" in headers
    assert rest == b""



async def test_whole_responses_the_client_never_takes_end_the_connection() -> None:
    """Requests whose answers (16 KiB each: a 404 naming its long path) the client never
    reads: once the client's socket is full, a response not taken within
    ``write_timeout_s`` aborts the connection (the answers do not pile up in the gateway)."""
    gw = await start_gateway(GatewayLimits(write_timeout_s=0.5))
    try:
        assert gw.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        request = f"GET /{'a' * 16000} HTTP/1.1\r\nHost: gw\r\n\r\n".encode()

        async def send() -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(2000):  # 32 MB of answers: more than the sockets hold
                    writer.write(request)
                    await writer.drain()
                    await asyncio.sleep(0.001)  # one at a time: within the pipelining bound

        sender = asyncio.create_task(send())
        assert await eventually_async(lambda: gw._gate.open != {})
        assert await eventually_async(lambda: gw._gate.open == {}, timeout=60)
        sender.cancel()
        writer.close()
    finally:
        await gw.stop()


async def test_a_response_that_cannot_be_written_closes_its_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler's response the server cannot encode (a content type beyond latin-1) is logged
    and its connection closed, not left open with no request and no deadline."""
    from agentmeter.gateway.httpresponse import Response

    async def unencodable(self: Gateway, request: Request) -> Response:
        return Response(200, b"x", "text/\u2603")

    monkeypatch.setattr(Gateway, "_fallback", unencodable)
    gateway = await start_gateway(None)
    try:
        answer = await exchange(gateway, b"GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n", 5)
        assert answer == b""
    finally:
        await gateway.stop()
