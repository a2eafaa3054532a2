"""What a hostile or broken upstream sends the gateway's client (gateway/httpclient.py) is
bounded: reply heads, whole replies, unread stream bytes, unasked bytes, silence; and what the
agent's headers can carry upstream. Each test fails with its defence disabled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from upstream_servers import fed_conn, ok, post, read_request, replies, serve

from agentmeter.gateway import httpclient
from agentmeter.gateway.httpclient import ReadTimeout, ReplyBroken, ReplyTooLarge, UpstreamClient
from agentmeter.gateway.registry import UpstreamModel
from agentmeter.gateway.upstream import HttpUpstream, RetryPolicy, UpstreamRequest

__all__ = ["serve"]  # the fixture


async def test_an_oversized_whole_reply_is_refused(serve: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(httpclient, "MAX_REPLY_BYTES", 1000)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
        for _ in range(100):  # the body after the head, while it is read
            await asyncio.sleep(0.01)
            writer.write(b"x" * 10000)
            await writer.drain()

    _, target = await serve(handle)
    client = UpstreamClient()
    try:
        r = await post(client, target)
        with pytest.raises(ReplyTooLarge):
            await r.read()
        r.release()
    finally:
        client.close()
    _, target = await serve(replies(ok(b"x" * 1000)))
    client = UpstreamClient()
    try:
        r = await post(client, target)  # at the limit: read
        assert len(await r.read()) == 1000
        r.release()
    finally:
        client.close()


async def test_an_oversized_reply_through_the_gateway_is_the_calls_failure_charged(
        serve: Any, monkeypatch: Any) -> None:
    """Not retried (the provider generated it), charged its reservation, no infra error."""
    monkeypatch.setattr(httpclient, "MAX_REPLY_BYTES", 1000)
    server, target = await serve(replies(*[ok(b"x" * 5000)] * 5))
    up = HttpUpstream(UpstreamModel(name="p/m", base_url=f"http://localhost:{target.port}/v1"),
                      None, client := UpstreamClient(), RetryPolicy(base_delay=0.01))
    try:
        reply = await up.send(UpstreamRequest("chat", {"messages": []}, False, {}, "k"))
        assert reply.status == 502 and reply.attempts == 1 and reply.infra_error is None
        assert reply.unanswered is not None and "size limit" in reply.unanswered
    finally:
        client.close()


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n",
    b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * (1 << 20)])
async def test_a_hostile_reply_head_is_bounded(head: bytes) -> None:
    conn = fed_conn()
    for i in range(0, len(head), 16384):
        conn.data_received(head[i:i + 16384])
        if conn.error is not None:
            break
    assert isinstance(conn.error, ReplyBroken)
    assert conn.head_bytes <= httpclient.MAX_HEAD_BYTES + 16384
    assert conn.transport is not None and conn.transport.is_closing()


async def test_a_stream_the_reader_does_not_take_pauses_reading() -> None:
    conn = fed_conn(stream=True)
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    part = b"%x\r\n%s\r\n" % (65536, b"d" * 65536)
    for _ in range(64):  # 4 MiB the upstream pushes; a real transport stops reading paused
        if not conn.paused:
            conn.data_received(part)
    assert conn.paused and conn.buffered <= httpclient.STREAM_BUFFER + 65536
    assert len(conn.take()) == conn.total and not conn.paused


@pytest.mark.parametrize("later", [False, True], ids=["with-the-reply", "when-idle"])
async def test_unasked_bytes_close_the_connection(serve: Any, later: bool) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok())
        if later:
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(ok())  # a second reply nobody asked for
        await writer.drain()
        await reader.read()

    server, target = await serve(handle)
    client = UpstreamClient()
    try:
        r = await post(client, target)
        await r.read()
        r.release()
        await asyncio.sleep(0.1)
        assert client._take(target.origin) is None  # not kept: it is closed
    finally:
        client.close()


async def test_no_answer_within_the_read_timeout(serve: Any) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()

    _, target = await serve(silent)
    client = UpstreamClient()
    try:
        with pytest.raises(ReadTimeout):
            await post(client, target, read_timeout=0.2)
    finally:
        client.close()


def test_forwarded_header_values_cannot_inject_headers() -> None:
    up = HttpUpstream(UpstreamModel(name="p/m", base_url="http://localhost:1/v1"), "sk-real",
                      UpstreamClient(), RetryPolicy())
    req = UpstreamRequest("chat", {}, False, {"user-agent": "a\r\nAuthorization: Bearer x\r\n"},
                          "k")
    head = up._head(up._target(req), req, 2)
    lines = head.split(b"\r\n")
    assert [x for x in lines if x.lower().startswith(b"authorization")] == [
        b"Authorization: Bearer sk-real"]
    assert b"Accept-Encoding: identity" in lines and b"Content-Length: 2" in lines


async def test_interim_replies_are_skipped_within_the_head_bound() -> None:
    conn = fed_conn()
    conn.data_received(b"HTTP/1.1 100 Continue\r\n\r\n" + ok())
    assert (conn.status, conn.complete, conn.take()) == (200, True, b'{"ok":true}')
    conn = fed_conn()  # endless interim replies: bounded as one head
    for _ in range(10000):
        conn.data_received(b"HTTP/1.1 100 Continue\r\nX: y\r\n\r\n")
        if conn.error is not None:
            break
    assert isinstance(conn.error, ReplyBroken) and not conn.headers_done


async def test_a_large_whole_reply_is_read_and_a_streamed_request_read_whole_is_bounded(
        serve: Any, monkeypatch: Any) -> None:
    """Beyond the stream buffer a whole read goes on (it never pauses); a streamed request's
    reply read whole (an error, not an event stream) is bounded like any whole reply."""
    big = ok(b"x" * (4 * httpclient.STREAM_BUFFER))
    _, target = await serve(replies(big, big, ok(b"y" * 3000)))
    client = UpstreamClient()
    try:
        r = await post(client, target, read_timeout=2)
        assert len(await r.read()) == 4 * httpclient.STREAM_BUFFER
        r.release()
        r = await post(client, target, stream=True, read_timeout=2)
        await asyncio.sleep(0.1)  # the stream's buffer fills and reading pauses first
        assert len(await r.read()) == 4 * httpclient.STREAM_BUFFER
        r.release()
        monkeypatch.setattr(httpclient, "MAX_REPLY_BYTES", 2000)
        r = await post(client, target, stream=True)
        with pytest.raises(ReplyTooLarge):
            await r.read()
        r.release()
    finally:
        client.close()


async def test_a_stalled_stream_ends_at_the_read_timeout(serve: Any) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await reader.read()

    _, target = await serve(stall)
    client = UpstreamClient()
    try:
        r = await post(client, target, stream=True, read_timeout=0.3)
        got = []
        with pytest.raises(ReadTimeout):
            async for chunk in r.chunks():
                got.append(chunk)
        assert got == [b"first"]
        r.release()
    finally:
        client.close()
