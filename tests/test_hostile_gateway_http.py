"""A black-box attack battery against the gateway's HTTP parsing over real sockets (TCP and the
Unix socket): what an agent in a sandbox can write on the wire. Each test asserts the safe
outcome (refused with the right status or closed; the gateway still serves a well-formed request
afterwards; what it holds bounded; metering exact), whatever the server is built on. Small
limits and short deadlines keep the file quick; no timing is asserted beyond "did not hang".
Connections, streams, tokens and the trial's end: ``test_hostile_gateway_conns.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from gateway_wire import (
    CHAT,
    GOOD,
    LIMITS,
    MIB,
    REFUSED,
    Target,
    chunked,
    flood,
    frame,
    request,
    start,
    target_of,
)
from polling import eventually_async
from test_hostile_gateway import fds, rss


@pytest.fixture
async def tcp() -> AsyncIterator[Target]:
    gw = await start(LIMITS)
    yield target_of(gw, "tcp")
    await gw.stop(drain_s=1)


@pytest.fixture(params=["tcp", "unix"])
async def anywhere(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    gw = await start(LIMITS)
    yield target_of(gw, request.param)
    await gw.stop(drain_s=1)


# -- time: requests that never finish arriving -------------------------------------------------
async def test_headers_trickled_a_byte_at_a_time_are_cut_at_the_header_deadline(
        anywhere: Target) -> None:
    """Slowloris: every byte resets no deadline; the half-sent request is closed, unanswered."""
    conn = await anywhere.conn()
    endless = request(anywhere.token).split(b"\r\n\r\n")[0] + b"\r\nX-A: b" * 1000
    trickling = asyncio.create_task(conn.trickle(endless, 0.02))
    async with asyncio.timeout(10):  # the trickle alone would last 30 s
        await anywhere.refuses(conn, (408,), silent_close=True)
    assert await trickling is False


async def test_a_body_trickled_a_byte_at_a_time_gets_408_at_the_body_deadline(
        anywhere: Target) -> None:
    conn = await anywhere.conn()
    await conn.send(request(anywhere.token, GOOD)[:-len(GOOD)])
    trickling = asyncio.create_task(conn.trickle(GOOD, 0.02))  # ~15 s for all of it
    async with asyncio.timeout(10):
        await anywhere.refuses(conn, (408,))
    assert await trickling is False


# -- oversized heads ---------------------------------------------------------------------------
@pytest.mark.parametrize("head", [
    f"POST {CHAT}?{'a' * 70_000} HTTP/1.1\r\nHost: gw\r\n\r\n",  # the request target
    "P" * 70_000 + f" {CHAT} HTTP/1.1\r\nHost: gw\r\n\r\n",  # the method
    f"POST {CHAT} HTTP/1.1\r\nHost: gw\r\nX-Big: {'v' * 70_000}\r\n\r\n",  # one value
    f"POST {CHAT} HTTP/1.1\r\nHost: gw\r\n{'X-' + 'n' * 70_000}: v\r\n\r\n",  # one name
], ids=["target", "method", "value", "name"])
async def test_an_oversized_request_line_or_header_is_refused(tcp: Target, head: str) -> None:
    conn = await tcp.conn()
    await conn.send(head.encode())
    await tcp.refuses(conn, silent_close=True)


async def test_a_flood_of_headers_is_refused_before_it_fills_memory() -> None:
    """Headers that never end, each within the per-header limits, and a header deadline far
    off: the gateway stops taking them after a bounded number of bytes (it refuses the request,
    or stops reading so that the client's writes block)."""
    gw = await start(LIMITS.model_copy(update={"header_timeout_s": 20.0}))
    try:
        t = target_of(gw, "tcp")
        conn = await t.conn()
        base = rss()
        sent = await flood(conn, f"POST {CHAT} HTTP/1.1\r\nHost: gw\r\n".encode(),
                           b"X-Pad: " + b"v" * 4000 + b"\r\n")
        grew = rss() - base
        assert sent < 16 * MIB and grew < 32 * MIB, (sent / MIB, grew / MIB)
        conn.reset()
        await t.serves()
    finally:
        await gw.stop(drain_s=1)


# -- framing: smuggling and malformed lengths --------------------------------------------------
@pytest.mark.parametrize("te", [
    "Transfer-Encoding: chunked", "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
    "Transfer-Encoding: identity, chunked", "Transfer-Encoding: xchunked",
    "Transfer-Encoding : chunked", "Transfer-Encoding:\x0bchunked", "Transfer-Encoding: chunked, gzip",
])
async def test_content_length_with_transfer_encoding_is_refused(tcp: Target, te: str) -> None:
    """Request smuggling: a body whose end differs by Content-Length and by chunked framing
    hides a second request (on trial "b"'s token). It is refused and closed, neither request is
    metered."""
    smuggled = request(tcp.other)
    framed = frame(GOOD)
    attack = request(tcp.token, extra=f"{te}\r\n", length=False)
    attack = attack.replace(b"\r\n\r\n", f"\r\nContent-Length: {len(framed)}\r\n\r\n".encode())
    conn = await tcp.conn()
    await conn.send(attack + framed + smuggled)
    await tcp.refuses(conn, (400, 501), silent_close=True)
    assert tcp.calls("b") == 0


@pytest.mark.parametrize("value", [
    f"{len(GOOD)}\r\nContent-Length: {len(GOOD) + 5}", f"{len(GOOD)}, {len(GOOD) + 5}", "-1",
    "abc", f"+{len(GOOD)}", "0x10", f"{len(GOOD)} 0", "1" * 30, f"{len(GOOD)}\x00",
])
async def test_a_conflicting_or_malformed_content_length_is_refused(tcp: Target,
                                                                     value: str) -> None:
    attack = request(tcp.token, extra=f"Content-Length: {value}\r\n", length=False)
    conn = await tcp.conn()
    await conn.send(attack + GOOD + b"\r\n\r\n" + request(tcp.other))
    await tcp.refuses(conn, silent_close=True)
    assert tcp.calls("b") == 0


@pytest.mark.parametrize("framed", [
    b"ffffffffffffffffffffffff\r\n" + GOOD,  # overflows 64 bits
    b"7fffffffffffffff\r\n" + GOOD,  # fits, far over the limit
    b"-5\r\nhello\r\n0\r\n\r\n",
    b"zz\r\nhello\r\n0\r\n\r\n",
    b"5\r\nhelloXX0\r\n\r\n",  # no CRLF after the data
    b"0" * 100_000 + b"5\r\nhello\r\n0\r\n\r\n",  # an endless size line
    b"5;" + b"e" * 100_000 + b"\r\nhello\r\n0\r\n\r\n",  # an endless extension
    b"5\r\nhello\r\n0\r\n" + b"X-T: v\r\n" * 20_000 + b"\r\n",  # endless trailers
], ids=["overflow", "huge", "negative", "not-hex", "no-crlf", "long-size", "long-ext",
        "many-trailers"])
async def test_bad_chunk_framing_is_refused(tcp: Target, framed: bytes) -> None:
    """Refused, or (a size that parses, its bytes never sent) cut at the body deadline."""
    conn = await tcp.conn()
    await conn.send(chunked(tcp.token, framed))
    await tcp.refuses(conn, (*REFUSED, 408), silent_close=True)


async def test_chunk_extensions_and_trailers_are_read_and_a_trailer_never_authenticates(
        tcp: Target) -> None:
    with_ext = b"".join(b"%x;name=value;q=\"x\"\r\n%s\r\n" % (len(p), p)
                        for p in (GOOD[:100], GOOD[100:]))
    conn = await tcp.conn()
    await conn.send(chunked(tcp.token, with_ext + b"0\r\nX-Trailer: v\r\n\r\n"))
    got = await conn.final()
    assert got is not None and got.status == 200
    assert tcp.calls() == 1
    # the token in a trailer, none in the head: 401, not metered on either trial
    await conn.send(chunked(None, with_ext + f"0\r\nAuthorization: Bearer {tcp.token}\r\n"
                            f"X-Api-Key: {tcp.other}\r\n\r\n".encode()))
    got = await conn.final()
    assert got is not None and got.status == 401
    conn.close()
    assert (tcp.calls(), tcp.calls("b")) == (1, 0)


async def test_a_chunked_body_over_the_limit_in_tiny_chunks_is_cut(tcp: Target) -> None:
    """Chunks of one byte: the limit counts the body, the framing (6 bytes a byte) cannot
    carry more past it."""
    conn = await tcp.conn()
    await conn.send(chunked(tcp.token, b""))
    for _ in range(20):
        if not await conn.send(b"1\r\nx\r\n" * 500):
            break
    await tcp.refuses(conn, (413,))


# -- pipelining --------------------------------------------------------------------------------
async def test_pipelined_requests_are_answered_in_order_each_metered_on_its_own_token(
        anywhere: Target) -> None:
    tokens = [anywhere.token, anywhere.other, None, anywhere.other, anywhere.token] * 3
    conn = await anywhere.conn()
    await conn.send(b"".join(request(t) for t in tokens) + b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
    statuses = []
    for _ in tokens:
        got = await conn.final()
        assert got is not None
        statuses.append(got.status)
    last = await conn.final()
    assert last is not None and last.body == b"agentmeter gateway\n"
    conn.close()
    assert statuses == [401 if t is None else 200 for t in tokens]
    assert (anywhere.calls("a"), anywhere.calls("b")) == (6, 6)


@pytest.mark.parametrize("pad", [0, 4000], ids=["small", "padded"])
async def test_a_pipelining_flood_without_reading_replies_is_bounded(pad: int) -> None:
    """The client writes requests as fast as it can and never reads a reply: small ones (each
    reply 5 times the request: replies must not pile up in memory) or 4 kB ones (requests must
    not pile up). The gateway's memory stays bounded, and the connection is dropped (its replies
    not taken within the write deadline) or closed (idle, its queue served)."""
    gw = await start(LIMITS.model_copy(update={"write_timeout_s": 5.0, "header_timeout_s": 5.0}))
    try:
        t = target_of(gw, "tcp")
        base_fds = fds()
        conn = await t.conn()
        base = rss()
        extra = b"X-Pad: " + b"v" * pad + b"\r\n" if pad else b""
        sent = await flood(conn, b"", b"GET / HTTP/1.1\r\nHost: gw\r\n" + extra + b"\r\n",
                           seconds=4)  # under the deadlines
        grew = rss() - base
        assert grew < 8 * MIB, (sent / MIB, grew / MIB)  # a queue without bound: > 15 MiB
        assert await eventually_async(lambda: fds() <= base_fds + 1, timeout=15)
        conn.close()
        await t.serves()
    finally:
        await gw.stop(drain_s=1)


# -- other request forms ---------------------------------------------------------------------
async def test_expect_100_continue_with_an_oversized_length_is_refused_unread(
        tcp: Target) -> None:
    conn = await tcp.conn()
    await conn.send(request(tcp.token, extra="Expect: 100-continue\r\n", length=False)
                    .replace(b"\r\n\r\n", b"\r\nContent-Length: 1000000000\r\n\r\n"))
    await tcp.refuses(conn, (413,))  # an interim 100 Continue before it is tolerated


async def test_http_1_0_is_served_and_closed(tcp: Target) -> None:
    conn = await tcp.conn()
    await conn.send(request(tcp.token, version="HTTP/1.0").replace(b"Host: gw\r\n", b""))
    got = await conn.final()
    assert got is not None and got.status == 200 and json.loads(got.body)["choices"]
    await conn.closed()
    conn.close()
    assert tcp.calls() == 1


@pytest.mark.parametrize("target", [f"http://169.254.169.254{CHAT}", f"http://gw{CHAT}"])
async def test_an_absolute_form_target_is_served_here_or_refused(tcp: Target,
                                                                 target: str) -> None:
    """The gateway is no forward proxy: an absolute URI is its own route or refused."""
    conn = await tcp.conn()
    await conn.send(request(tcp.token, path=target))
    got = await conn.final()
    assert got is not None and got.status in (200, 400, 404)
    if got.status == 200:
        assert json.loads(got.body)["choices"]
    conn.close()
    assert tcp.calls() == (got.status == 200)


async def test_connect_is_refused(tcp: Target) -> None:
    conn = await tcp.conn()
    await conn.send(b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n"
                    b"SSH-2.0-x\r\n")
    got = await conn.final()
    assert got is None or got.status in (400, 404, 405), got
    conn.close()
    await tcp.serves()


@pytest.mark.parametrize("upgrade", [
    "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "Sec-WebSocket-Version: 13",
    "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__",
], ids=["websocket", "h2c"])
async def test_an_upgrade_is_never_switched_to(tcp: Target, upgrade: str) -> None:
    """No 101: what follows on the connection is HTTP/1.1 (answered) or nothing (closed)."""
    conn = await tcp.conn()
    await conn.send(request(tcp.token, extra=upgrade + "\r\n") + request(tcp.other))
    for _ in range(2):
        got = await conn.reply()
        if got is None:
            break
        assert got.status != 101 and got.status in (200, 400), got.status
    conn.close()
    assert tcp.calls() <= 1 and tcp.calls("b") <= 1
    await tcp.serves()


async def test_an_http2_preface_is_refused(tcp: Target) -> None:
    conn = await tcp.conn()
    await conn.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 64)
    await tcp.refuses(conn, (400, 505), silent_close=True)


@pytest.mark.parametrize("header", [
    "X-A: a\x00b", "X-A: a\rb", "Authorization: Bearer {token}\x00", "X-A: a\x7f\x01b",
])
async def test_control_characters_in_a_header_are_refused(tcp: Target, header: str) -> None:
    conn = await tcp.conn()
    await conn.send(request(tcp.token, extra=header.format(token=tcp.token) + "\r\n"))
    await tcp.refuses(conn, (400,), silent_close=True)


@pytest.mark.parametrize("variant", ["obs-fold", "lf-only"])
async def test_obs_fold_and_bare_lf_heads_are_refused_or_read_one_way(tcp: Target,
                                                                      variant: str) -> None:
    """Either refused, or read as one request whose token is exactly the trial's: never a
    second request found inside the head, never a call metered on the wrong trial."""
    raw = request(tcp.token)
    if variant == "obs-fold":  # the token folded onto a continuation line
        raw = raw.replace(f"Bearer {tcp.token}".encode(), f"Bearer\r\n {tcp.token}".encode())
    else:
        raw = raw.replace(b"\r\n", b"\n")
    conn = await tcp.conn()
    await conn.send(raw)
    got = await conn.final()
    assert got is None or got.status in (200, 400), got
    conn.close()
    assert tcp.calls() == (got is not None and got.status == 200) and tcp.calls("b") == 0
    await tcp.serves()


@pytest.mark.parametrize("endless", [b"X-T: ", b"X-T"], ids=["value", "name"])
async def test_an_endless_trailer_is_refused_before_it_fills_memory(endless: bytes) -> None:
    """A chunked body's last chunk, then one trailer line that never ends (far off the body
    deadline): the trailer is held to the head's limits, not buffered until the deadline."""
    gw = await start(LIMITS.model_copy(update={"body_timeout_s": 20.0}))
    try:
        t = target_of(gw, "tcp")
        conn = await t.conn()
        base = rss()
        sent = await flood(conn, chunked(t.token, b"5\r\nhello\r\n0\r\n" + endless),
                           b"v" * 65536)
        grew = rss() - base
        assert sent < 16 * MIB and grew < 32 * MIB, (sent / MIB, grew / MIB)
        conn.reset()
        assert await eventually_async(lambda: t.held() == (0, 0), timeout=5)
        await t.serves()
    finally:
        await gw.stop(drain_s=1)


@pytest.mark.parametrize("target", [
    b"*", b"http://[::1/v1/chat/completions", b"//", b"\xff\xfe/x", b"http://a:99999999/x",
    b"/v1/chat%2Fcompletions", b"/v1/chat/completions%00", b"/%", b"/?key=%zz&key",
    b"http://user:pw@gw" + CHAT.encode(),
], ids=["star", "bracket", "slashes", "bytes", "port", "pct-slash", "pct-nul", "pct", "query",
        "userinfo"])
async def test_an_odd_request_target_is_answered_and_leaks_nothing(tcp: Target,
                                                                   target: bytes) -> None:
    """A target the URL parser may choke on (inside the server's callbacks): answered or
    closed, never a 5xx, and its connection released (no descriptor left)."""
    base = fds()
    conn = await tcp.conn()
    await conn.send(b"POST " + target + b" HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n")
    got = await conn.final()
    assert got is None or got.status < 500, (got.status, got.body[:200])
    await conn.closed()
    conn.close()
    assert await eventually_async(lambda: fds() <= base, timeout=5)
    await tcp.serves()
