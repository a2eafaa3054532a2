"""The gateway's client to its upstreams (gateway/httpclient.py) against raw local servers that
send exactly the bytes a test scripts: framing, keep-alive, stale connections, broken and
hostile replies, TLS."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentmeter.gateway import httpclient
from agentmeter.gateway.httpclient import (
    ConnectFailed,
    ReadTimeout,
    ReplyBroken,
    ReplyTooLarge,
    Target,
    UpstreamClient,
)
from agentmeter.gateway.registry import UpstreamModel
from agentmeter.gateway.upstream import HttpUpstream, RetryPolicy, UpstreamRequest

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


def _conn(stream: bool = False) -> httpclient._Conn:
    conn = httpclient._Conn(UpstreamClient(), ("http", "h", 80))
    conn.connection_made(FakeTransport())
    conn.begin(stream=stream)
    conn.active = True
    return conn


@pytest.mark.parametrize("reply", [CHUNKED, ok(b'{"a": 12}')], ids=["chunked", "sized"])
async def test_a_reply_split_at_every_byte_boundary(reply: bytes) -> None:
    for cut in range(1, len(reply)):
        conn = _conn()
        conn.data_received(reply[:cut])
        conn.data_received(reply[cut:])
        assert conn.error is None and conn.complete, cut
        assert (conn.status, conn.take()) == (200, b'{"a": 12}'), cut
    conn = _conn()
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
    conn = _conn()
    for i in range(0, len(head), 16384):
        conn.data_received(head[i:i + 16384])
        if conn.error is not None:
            break
    assert isinstance(conn.error, ReplyBroken)
    assert conn.head_bytes <= httpclient.MAX_HEAD_BYTES + 16384
    assert conn.transport is not None and conn.transport.is_closing()


async def test_a_stream_the_reader_does_not_take_pauses_reading() -> None:
    conn = _conn(stream=True)
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


async def test_interim_replies_are_skipped_within_the_head_bound() -> None:
    conn = _conn()
    conn.data_received(b"HTTP/1.1 100 Continue\r\n\r\n" + ok())
    assert (conn.status, conn.complete, conn.take()) == (200, True, b'{"ok":true}')
    conn = _conn()  # endless interim replies: bounded as one head
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
