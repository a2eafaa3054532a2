"""The gateway's connections under a hostile client, over real sockets: the per-client cap
released exactly once however a connection ends, half-closed clients, streams abandoned, the
token in the query string, a reply split across the trial's end (the wire's parse:
``test_hostile_gateway_http.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from gateway_wire import CHAT, LIMITS, MIB, STREAM, Target, request, start, target_of
from polling import eventually_async
from rawhttp import Conn
from test_gateway import serve
from test_hostile_gateway import GatedUpstream, fds


@pytest.fixture
async def tcp() -> AsyncIterator[Target]:
    gw = await start(LIMITS)
    yield target_of(gw, "tcp")
    await gw.stop(drain_s=1)


@pytest.fixture
async def gated() -> AsyncIterator[tuple[GatedUpstream, int]]:
    up = GatedUpstream()
    app = web.Application()
    app.router.add_post(CHAT, up.handle)
    runner, port = await serve(app)
    yield up, port
    up.gate.set()
    await runner.cleanup()


# -- connections -------------------------------------------------------------------------------
@pytest.mark.parametrize("over", ["tcp", "unix"])
async def test_the_connection_cap_is_released_exactly_once_however_connections_end(
        over: str) -> None:
    """Four connections stay open while four end, each another way (refused, reset mid-body,
    closed mid-head, half-closed), after twenty refused at the cap: then exactly four more are
    admitted. A count released twice admits more; one never released admits fewer."""
    gw = await start(LIMITS.model_copy(update={"header_timeout_s": 30.0}))  # none idles out
    try:
        await cap_released_once(target_of(gw, over))
    finally:
        await gw.stop(drain_s=1)


async def cap_released_once(t: Target) -> None:
    async def admitted(n: int) -> list[Conn]:
        conns = [await t.conn() for _ in range(n)]
        for c in conns:
            await c.send(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
            got = await c.final()
            assert got is not None and got.status == 200, got
        return conns

    async def at_cap() -> bool:
        extra = await t.conn()
        await extra.send(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
        got = await extra.final()
        extra.close()
        return got is not None and got.status == 503

    kept = await admitted(4)
    a, b, c, d = await admitted(4)
    for _ in range(20):
        assert await at_cap()
    await a.send(b"GARBAGE\r\n\r\n")  # refused
    await a.closed()
    a.close()
    await b.send(request(t.token)[:-10])  # reset mid-body
    b.reset()
    await c.send(request(t.token)[:40])  # closed mid-head
    c.close()
    d.shutdown_write()  # half-closed while idle, then closed
    await asyncio.sleep(0.1)
    d.close()
    assert await eventually_async(lambda: t.held() == (0, 0), timeout=5)
    again: list[Conn] = []
    for _ in range(20):  # the server may see the last hang-up a moment late
        again = await admitted(4)
        if await at_cap():
            break
        for x in again:
            x.close()
        again = []
        await asyncio.sleep(0.2)
    assert again, "more than the cap admitted"
    for x in kept + again:
        x.close()


@pytest.mark.parametrize("over", ["tcp", "unix"])
async def test_a_client_s_fin_is_its_hang_up_and_the_call_is_metered_once(
        gated: tuple[GatedUpstream, int], over: str) -> None:
    """The client shuts its sending side after the request: the gateway takes the FIN as the
    client hanging up (what a client closing while it waits for a whole reply sends; a local
    provider then stops generating), so the reply is not written, the call is still read to its
    end and metered once, as disconnected, and the gateway serves the next client."""
    up, port = gated
    gw = await start(LIMITS, port)
    try:
        t = target_of(gw, over, "gated/up")
        conn = await t.conn()
        await conn.send(request(t.token))
        conn.shutdown_write()
        assert await eventually_async(lambda: up.received == 1, timeout=5)
        up.gate.set()
        assert await eventually_async(lambda: t.calls() == 1, timeout=5)
        call = gw.trial_meter("a").calls[0]
        assert call.error is not None and call.error.startswith("client disconnected"), call
        conn.close()
        await t.serves()
        assert t.calls() == 2
    finally:
        await gw.stop(drain_s=1)


@pytest.mark.parametrize("how", ["stall", "reset", "close"])
async def test_a_stream_its_client_abandons_is_metered_once(
        gated: tuple[GatedUpstream, int], how: str) -> None:
    """The client takes the first event then stops reading (the write deadline drops it), hangs
    up with a RST, or closes: the call is read to its end upstream and metered exactly once;
    nothing stays held."""
    up, port = gated
    up.big_stream = 16 * MIB if how == "stall" else 0
    gw = await start(LIMITS, port)
    try:
        t = target_of(gw, "unix", "gated/up")
        base = fds()
        conn = await t.conn()
        await conn.send(request(t.token, STREAM))
        head = await conn.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"FIRSTPART" in await conn.reader.readuntil(b"\n\n")
        if how == "reset":
            conn.reset()
        elif how == "close":
            conn.close()
        up.gate.set()
        assert await eventually_async(lambda: t.calls() == 1, timeout=20)
        (call,) = gw.trial_meter("a").calls
        assert (call.usage.input, call.usage.output) == (400, 100)
        meter = await gw.finish_trial("a", settle_s=5)
        assert len(meter.calls) == 1 and meter.calls_in_flight == []
        assert meter.charged_tokens == 500
        conn.close()
        assert await eventually_async(lambda: fds() <= base + 2, timeout=10)
    finally:
        await gw.stop(drain_s=1)


# -- tokens and the trial's end ---------------------------------------------------------------
async def test_the_query_string_key_authenticates_gemini_and_never_outranks_a_header(
        tcp: Target) -> None:
    gemini = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
    path = f"/v1beta/models/m:generateContent?key={tcp.token}"
    conn = await tcp.conn()
    await conn.send(request(None, gemini, path=path))
    got = await conn.final()
    assert got is not None and got.status == 200 and "candidates" in json.loads(got.body)
    assert tcp.calls() == 1
    # a header's token and another trial's in the query: metered on one trial, the header's
    await conn.send(request(tcp.other, path=f"{CHAT}?key={tcp.token}"))
    got = await conn.final()
    assert got is not None and got.status == 200
    assert (tcp.calls("a"), tcp.calls("b")) == (1, 1)
    # a query key that is not a token, beside none in the head: refused
    await conn.send(request(None, path=f"{CHAT}?key=am-forged&key={tcp.token}"))
    got = await conn.final()
    assert got is not None and got.status == 401
    conn.close()
    assert (tcp.calls("a"), tcp.calls("b")) == (1, 1)


async def test_a_reply_split_across_the_trials_end_is_delivered_and_metered(
        gated: tuple[GatedUpstream, int]) -> None:
    """A stream under way when the harness finishes the trial: the client gets all of it, the
    finished meter has it with its usage, and a request after it on the same connection (the
    token now refused) is not metered."""
    up, port = gated
    gw = await start(LIMITS, port)
    try:
        t = target_of(gw, "tcp", "gated/up")
        conn = await t.conn()
        await conn.send(request(t.token, STREAM))
        head = await conn.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        finishing = asyncio.create_task(gw.finish_trial("a", settle_s=10))
        await asyncio.sleep(0.1)
        assert not finishing.done()  # it waits for the call under way
        up.gate.set()
        rest = b""
        async with asyncio.timeout(10):
            while b"[DONE]" not in rest:
                rest += await conn.reader.read(65536)
        meter = await finishing
        assert len(meter.calls) == 1 and meter.calls[0].usage.output == 100
        await conn.reader.readuntil(b"0\r\n\r\n")
        await conn.send(request(t.token, STREAM))
        got = await conn.final()
        assert got is not None and got.status == 401
        conn.close()
        assert up.received == 1
    finally:
        await gw.stop(drain_s=1)
