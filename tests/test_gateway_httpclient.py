"""The gateway's client to its upstreams (gateway/httpclient.py) against raw local servers that
send exactly the bytes a test scripts: framing, keep-alive, stale connections, broken replies,
TLS. Hostile replies and the bounds: tests/test_gateway_httpclient_bounds.py."""

from __future__ import annotations

import asyncio
import datetime
import gc
import ssl
from pathlib import Path
from typing import Any

import pytest
from upstream_servers import CHUNKED, fed_conn, ok, post, read_request, replies, serve

from agentmeter.gateway import httpclient
from agentmeter.gateway.httpclient import ConnectFailed, ReplyBroken, Target, UpstreamClient

__all__ = ["serve"]  # the fixture


async def test_chunked_reply_read_whole_and_streamed(serve: Any) -> None:
    _, target = await serve(replies(CHUNKED, CHUNKED))
    client = UpstreamClient()
    try:
        r = await post(client, target)
        assert (r.status, r.content_type, r.headers["x-extra"]) == (200, "application/json", "1")
        assert await r.read() == b'{"a": 12}'
        r.release()
        r = await post(client, target, stream=True)
        assert b"".join([c async for c in r.chunks()]) == b'{"a": 12}'
        r.release()
    finally:
        client.close()

@pytest.mark.parametrize("reply", [CHUNKED, ok(b'{"a": 12}')], ids=["chunked", "sized"])
async def test_a_reply_split_at_every_byte_boundary(reply: bytes) -> None:
    for cut in range(1, len(reply)):
        conn = fed_conn()
        conn.data_received(reply[:cut])
        conn.data_received(reply[cut:])
        assert conn.error is None and conn.complete, cut
        assert (conn.status, conn.take()) == (200, b'{"a": 12}'), cut
    conn = fed_conn()
    for i in range(len(reply)):  # and byte by byte
        conn.data_received(reply[i:i + 1])
    assert conn.complete and conn.take() == b'{"a": 12}'


async def test_keep_alive_reuses_the_connection_until_connection_close(serve: Any) -> None:
    server, target = await serve(replies(ok(), ok(), ok(extra=b"Connection: close\r\n"), ok()))
    client = UpstreamClient()
    try:
        for _ in range(3):
            r = await post(client, target)
            assert await r.read() == b'{"ok":true}'
            r.release()
        assert server.connections == 1
        r = await post(client, target)  # the last said Connection: close: a new connection
        await r.read()
        r.release()
        assert server.connections == 2
    finally:
        client.close()


async def test_a_connection_is_not_reused_after_an_incomplete_read(serve: Any) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if server.connections > 1:
            writer.write(ok())
            return
        reply = ok(b"x" * 100)
        writer.write(reply[:-100])
        await writer.drain()
        await asyncio.sleep(0.2)  # the body after the head: the reply is not complete at once
        writer.write(reply[-100:])
        if await read_request(reader):
            writer.write(ok())
        await reader.read()

    server, target = await serve(handle)
    client = UpstreamClient()
    try:
        r = await post(client, target)
        r.release()  # its body never read
        r = await post(client, target)
        assert await r.read() == b'{"ok":true}'
        r.release()
        assert server.connections == 2
    finally:
        client.close()


async def test_a_stale_pooled_connection_is_retried_once_on_a_fresh_one(serve: Any) -> None:
    """The peer closes a kept-alive connection as the next request arrives (nothing of a reply
    sent): the request is sent again on a new connection. A fresh connection that closes so is
    not retried: its error is the caller's."""
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        while await read_request(reader):
            served += 1
            if served == 2:  # the second request, on the kept-alive connection: dropped
                return
            writer.write(ok())
            await writer.drain()
            if served == 3:
                return

    server, target = await serve(handle)
    client = UpstreamClient()
    try:
        r = await post(client, target)
        await r.read()
        r.release()
        r = await post(client, target)
        assert r.status == 200 and await r.read() == b'{"ok":true}'
        r.release()
        assert served == 3 and server.connections == 2
    finally:
        client.close()

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    server, target = await serve(drop)
    client = UpstreamClient()
    try:
        with pytest.raises(ReplyBroken, match="before replying"):
            await post(client, target)
        assert server.connections == 1
    finally:
        client.close()


async def test_a_pooled_connection_that_broke_mid_reply_is_not_retried(serve: Any) -> None:
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        while await read_request(reader):
            served += 1
            writer.write(ok() if served == 1 else b"HTTP/1.1 200 OK\r\nContent-Le")
            await writer.drain()
            if served == 2:
                return

    server, target = await serve(handle)
    client = UpstreamClient()
    try:
        r = await post(client, target)
        await r.read()
        r.release()
        with pytest.raises(ReplyBroken, match="mid-reply"):
            await post(client, target)
        assert served == 2 and server.connections == 1
    finally:
        client.close()


async def test_a_peer_closing_mid_body_is_an_error_not_a_hang(serve: Any) -> None:
    _, target = await serve(replies(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", close_after=True))
    client = UpstreamClient()
    try:
        r = await post(client, target)
        with pytest.raises(ReplyBroken, match="mid-reply"):
            await asyncio.wait_for(r.read(), 5)
        r.release()
        _, target = await serve(replies(CHUNKED[:-12], close_after=True))
        r = await post(client, target, stream=True)
        got = b""
        with pytest.raises(ReplyBroken):
            async for chunk in r.chunks():
                got += chunk
        assert got == b'{"a": 12'  # what came is relayed, then the error
        r.release()
    finally:
        client.close()


async def test_a_body_read_until_close(serve: Any) -> None:
    _, target = await serve(replies(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it",
                                    close_after=True))
    client = UpstreamClient()
    try:
        r = await post(client, target)
        assert await r.read() == b"all of it"
        r.release()
    finally:
        client.close()

async def test_https_with_sni_and_verification(serve: Any, tmp_path: Path) -> None:
    server_ctx, client_ctx = _tls(tmp_path)
    names: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,misc]
    server, target = await serve(replies(CHUNKED, ok()), tls=server_ctx, scheme="https")
    client = UpstreamClient(ssl_context=client_ctx)
    try:
        for body in (b'{"a": 12}', b'{"ok":true}'):
            r = await post(client, target)
            assert await r.read() == body
            r.release()
        assert server.connections == 1 and names == ["localhost"]
    finally:
        client.close()
    client = UpstreamClient()  # the system's CAs: the test CA is not among them
    try:
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await post(client, target)
    finally:
        client.close()


def _tls(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client context trusting only the test CA): a CA and a
    certificate for localhost made with ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(hours=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                                critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("test CA", ca_key, "test CA", ca_key, True)
    leaf = cert("localhost", key, "test CA", ca_key, False)
    (tmp / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "leaf.pem", tmp / "key.pem")
    client = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return server, client


async def test_idle_connections_are_closed_after_idle_s(serve: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(httpclient, "IDLE_S", 0.05)
    _, first = await serve(replies(ok()))
    _, second = await serve(replies(ok()))
    client = UpstreamClient()
    try:
        r = await post(client, first)
        await r.read()
        r.release()
        (idle,) = client._idle[first.origin]
        await asyncio.sleep(0.1)
        r = await post(client, second)
        await r.read()
        r.release()  # a connection given back: those idle too long are closed
        assert client._idle[first.origin] == []
        assert idle.transport is not None and idle.transport.is_closing()
    finally:
        client.close()


async def test_a_read_cancelled_closes_the_connection_at_once(serve: Any) -> None:
    """A local provider's call whose client hung up is cancelled: the server sees the
    connection end while it is still generating."""
    ended = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nstill generat")
        await writer.drain()
        await reader.read()  # EOF: the client closed
        ended.set()

    _, target = await serve(slow)
    client = UpstreamClient()
    try:
        r = await post(client, target)
        task = asyncio.ensure_future(r.read())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.wait_for(ended.wait(), 5)
    finally:
        client.close()


async def test_a_reply_dropped_unreleased_closes_its_connection(serve: Any) -> None:
    """A stream whose reader failed before it took anything (say, the client's side broke
    first) does not hold its connection, nor let the upstream go on, once dropped."""
    ended = asyncio.Event()

    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await reader.read()
        ended.set()

    _, target = await serve(stream)
    client = UpstreamClient()
    try:
        r = await post(client, target, stream=True)
        chunks = r.chunks()
        del r, chunks
        gc.collect()
        await asyncio.wait_for(ended.wait(), 5)
        assert not client._open
    finally:
        client.close()


def test_targets_parsed_once_as_urls_are() -> None:
    t = Target.parse("https://h.example/v1beta/models/gemini 2:streamGenerateContent?alt=sse")
    assert (t.origin, t.host_header) == (("https", "h.example", 443), "h.example")
    assert t.path == "/v1beta/models/gemini%202:streamGenerateContent?alt=sse"
    t = Target.parse("http://[::1]:8080/v1/models/é%20x")
    assert (t.origin, t.host_header, t.path) == (("http", "::1", 8080), "[::1]:8080",
                                                  "/v1/models/%C3%A9%20x")
    with pytest.raises(ValueError):
        Target.parse("ftp://h/x")
