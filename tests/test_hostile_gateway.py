"""A hostile agent against the gateway: bodies too big for memory, requests that never finish
arriving, responses never taken, too many requests or connections, and budgets raced by
concurrent calls. The gateway runs in this process: its memory and descriptors are ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from polling import eventually_async
from test_gateway import PATHS, request_body, serve
from test_gateway_metering import FIRST, REST, USAGE, chunk

from agentmeter.gateway import Budget, Gateway, GatewayLimits, ModelRegistry, UpstreamModel
from agentmeter.pricing import PriceBook
from agentmeter.records import TokenUsage

MIB = 1024 * 1024
BLOCK = b"x" * (64 * 1024)
#: limits that let a test reach the budget (or the upstream) with hundreds of requests at once
WIDE = GatewayLimits(max_in_flight=1000, max_connections_per_client=2000)


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class GatedUpstream:
    """A chat upstream that holds every request until the test opens its gate (no timing), then
    answers with ``USAGE`` (a stream: its first event at once, the rest after the gate)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.received = 0
        self.big_stream = 0  # bytes of content a stream sends before its end (write timeout)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received += 1
        if not body.get("stream"):
            await self.gate.wait()
            return web.json_response({
                "id": "c", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "WHOLE"}}],
                "usage": USAGE})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST)
        await self.gate.wait()
        big = chunk({"content": "y" * 65536})
        for _ in range(self.big_stream // 65536):
            await resp.write(big)
        for part in REST:
            await resp.write(part)
        await resp.write_eof()
        return resp


async def start_gateway(limits: GatewayLimits | None,
                        port: int | None = None) -> Gateway:
    models = ModelRegistry({} if port is None else {"gated/up": UpstreamModel(
        name="gated/up", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        price_key="scripted/x")})
    gw = Gateway(models, PriceBook(), limits=limits)
    await gw.start(port=0)
    return gw


@pytest.fixture
async def gated() -> AsyncIterator[tuple[GatedUpstream, int]]:
    up = GatedUpstream()
    app = web.Application()
    app.router.add_post(PATHS["chat"], up.handle)
    runner, port = await serve(app)
    yield up, port
    up.gate.set()
    await runner.cleanup()


def head(token: str, extra: str) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\n{extra}").encode()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent before it closed the connection (fails if it stays open)."""
    got = b""
    async with asyncio.timeout(seconds):
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                got += data
    return got


# -- memory and descriptors ------------------------------------------------------------------
async def huge_body(port: int, token: str, size: int, chunked: bool) -> None:
    """Send ``size`` bytes of body (declared, or chunked) as fast as the gateway takes them."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head(token, "Transfer-Encoding: chunked\r\n\r\n" if chunked
                          else f"Content-Length: {size}\r\n\r\n"))
        framing = (b"%x\r\n" % len(BLOCK), b"\r\n") if chunked else (b"", b"")
        with contextlib.suppress(ConnectionError):
            for _ in range(size // len(BLOCK)):
                writer.writelines([framing[0], BLOCK, framing[1]])
                await writer.drain()
            writer.write(b"0\r\n\r\n" if chunked else b"")
            await writer.drain()
        status = await closed_within(reader, 30)
        assert not status.startswith((b"HTTP/1.1 200", b"HTTP/1.1 5")), status[:200]
    finally:
        writer.close()


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
async def test_a_hundred_60_mib_bodies_at_once_cost_little_memory(chunked: bool) -> None:
    gw = await start_gateway(None)  # the defaults
    try:
        assert gw.port is not None
        token = gw.open_trial("t", "scripted/explorer")
        base_rss, base_fds = rss(), fds()
        peak = {"rss": 0, "fds": 0}
        attack = asyncio.gather(*(huge_body(gw.port, token, 60 * MIB, chunked)
                                  for _ in range(100)))

        async def watch() -> None:  # stops the attack before it can hurt the machine
            while not attack.done():
                peak["rss"] = max(peak["rss"], rss() - base_rss)
                peak["fds"] = max(peak["fds"], fds() - base_fds)
                if peak["rss"] > 100 * MIB:
                    attack.cancel()
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        with contextlib.suppress(asyncio.CancelledError):
            await attack
        await watcher
        assert peak["rss"] < 100 * MIB, f"RSS grew {peak['rss'] / MIB:.0f} MiB"
        assert peak["fds"] < 1000
        assert await eventually_async(lambda: fds() <= base_fds + 10, timeout=10)
        assert gw.trial_meter("t").calls == []  # refused before they were calls
        # the trial holds nothing any more: a normal request is served
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + PATHS["chat"], json=request_body("chat", False),
                headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200
    finally:
        await gw.stop()


async def test_request_bodies_over_the_limit_are_refused_and_the_connection_closed() -> None:
    limits = GatewayLimits(max_body_bytes=100_000, max_trial_body_bytes=150_000)
    gw = await start_gateway(limits)
    try:
        assert gw.port is not None
        token = gw.open_trial("t", "scripted/explorer")
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(head(token, "Content-Length: 100001\r\n\r\n"))  # no body sent at all
        answer = await closed_within(reader, 5)
        assert answer.startswith(b"HTTP/1.1 413") and b"100000 bytes" in answer
        writer.close()
        # two declared bodies within the per-request limit, over the trial's: the second waits
        # for nothing, it gets a 429 before its body is read
        r1, w1 = await asyncio.open_connection("127.0.0.1", gw.port)
        w1.write(head(token, "Content-Length: 90000\r\n\r\n") + b"{")  # held: never completed
        await w1.drain()
        assert await eventually_async(lambda: gw._trials["t"].load.body_bytes == 90_000)
        r2, w2 = await asyncio.open_connection("127.0.0.1", gw.port)
        w2.write(head(token, "Content-Length: 90000\r\n\r\n"))
        answer = await closed_within(r2, 5)
        assert answer.startswith(b"HTTP/1.1 429") and b"body bytes" in answer
        w1.close()
        w2.close()
        assert await eventually_async(lambda: gw._trials["t"].load.body_bytes == 0)
    finally:
        await gw.stop()



async def test_a_small_body_that_arrived_whole_is_still_held_to_the_limits() -> None:
    """A body already received with its headers is read at once (no deadline armed): its size
    still counts against the request's and the trial's limits."""
    gw = await start_gateway(GatewayLimits(max_body_bytes=1000, max_trial_body_bytes=1000))
    try:
        assert gw.port is not None
        token = gw.open_trial("t", "scripted/explorer")

        async def chunked(size: int) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
            body = b'{"model": "m", "x": "' + b"y" * (size - 21) + b'"}'
            writer.write(head(token, "Transfer-Encoding: chunked\r\n\r\n")
                         + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            try:
                return await closed_within(reader, 5)
            finally:
                writer.close()

        assert (await chunked(1500)).startswith(b"HTTP/1.1 413")
        r1, w1 = await asyncio.open_connection("127.0.0.1", gw.port)
        w1.write(head(token, "Content-Length: 500\r\n\r\n") + b"{")  # holds 500 bytes
        await w1.drain()
        assert await eventually_async(lambda: gw._trials["t"].load.body_bytes == 500)
        assert (await chunked(800)).startswith(b"HTTP/1.1 429")  # 500 + 800 over the trial's
        w1.close()
        assert await eventually_async(lambda: gw._trials["t"].load.body_bytes == 0)
    finally:
        await gw.stop()


async def test_a_connection_busy_past_the_header_timeout_stays_open_then_idles_out() -> None:
    """The header deadline is moved on by each response, not armed per request: requests back
    to back for longer than ``header_timeout_s`` keep their connection; idle, it is closed."""
    gw = await start_gateway(GatewayLimits(header_timeout_s=1.0))
    try:
        assert gw.port is not None
        token = gw.open_trial("t", "scripted/explorer")
        good = json.dumps(request_body("chat", False)).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        # busy past the timeout, each gap far below it (0.05 s: a loaded machine's stalled
        # loop cannot stretch one to the timeout)
        loop = asyncio.get_running_loop()
        busy_until = loop.time() + 1.5
        try:
            while loop.time() < busy_until:
                writer.write(head(token, f"Content-Length: {len(good)}\r\n\r\n") + good)
                headers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert headers.startswith(b"HTTP/1.1 200"), headers[:100]
                length = int(headers.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                await asyncio.sleep(0.05)
            assert await closed_within(reader, 3) == b""
        finally:
            writer.close()
        assert await eventually_async(lambda: gw._gate.open == {})
    finally:
        await gw.stop()

# -- time --------------------------------------------------------------------------------------
async def test_half_sent_requests_are_closed_after_the_timeout() -> None:
    gw = await start_gateway(GatewayLimits(header_timeout_s=0.5, body_timeout_s=0.5))
    try:
        assert gw.port is not None
        port = gw.port
        token = gw.open_trial("t", "scripted/explorer")
        base_fds = fds()
        good = json.dumps(request_body("chat", False)).encode()

        async def half(kind: str) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if kind == "headers":
                writer.write(head(token, "Content-Length: 10"))
            elif kind == "body":
                writer.write(head(token, "Content-Length: 1000\r\n\r\n") + b'{"model": ')
            elif kind == "idle":
                pass  # connects and says nothing
            else:  # a whole request, then half the headers of the next on the same connection
                writer.write(head(token, f"Content-Length: {len(good)}\r\n\r\n") + good)
                await writer.drain()
                writer.write(head(token, "Content-Le"))
            await writer.drain()
            try:
                return await closed_within(reader, 5)
            finally:
                writer.close()

        kinds = ["headers", "body", "idle", "keep-alive"] * 10
        answers = await asyncio.gather(*(half(k) for k in kinds))
        for kind, answer in zip(kinds, answers, strict=True):
            if kind == "body":
                assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
            elif kind == "keep-alive":
                assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1") == 1
            else:
                assert answer == b""
        assert await eventually_async(lambda: fds() <= base_fds + 5, timeout=10)
        assert gw._gate.open == {}
        assert gw._trials["t"].load == type(gw._trials["t"].load)()
    finally:
        await gw.stop()


async def test_a_stream_the_client_never_reads_is_dropped_and_still_metered(
        gated: tuple[GatedUpstream, int]) -> None:
    up, port = gated
    up.big_stream = 24 * MIB  # far more than the sockets between them buffer
    up.gate.set()
    gw = await start_gateway(GatewayLimits(write_timeout_s=0.5), port)
    try:
        assert gw.port is not None
        token = gw.open_trial("t", "gated/up")
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        body = json.dumps(request_body("chat", True)).encode()
        writer.write(head(token, f"Content-Length: {len(body)}\r\n\r\n") + body)
        await writer.drain()  # and never read a byte
        assert await eventually_async(lambda: len(gw.trial_meter("t").calls) == 1, timeout=20)
        (call,) = gw.trial_meter("t").calls
        assert call.error is not None and "took no data" in call.error
        assert (call.usage.input, call.usage.output) == (400, 100)  # read to its end, metered
        writer.close()
    finally:
        await gw.stop()


# -- concurrency -------------------------------------------------------------------------------
async def test_a_17th_request_in_flight_gets_429(gated: tuple[GatedUpstream, int]) -> None:
    up, port = gated
    gw = await start_gateway(None, port)
    try:
        token = gw.open_trial("t", "gated/up")
        other = gw.open_trial("u", "gated/up")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

            async def call(tok: str) -> int:
                async with s.post(gw.base_url + PATHS["chat"], json=request_body("chat", False),
                                  headers={"Authorization": f"Bearer {tok}"}) as r:
                    await r.read()
                    return r.status

            held = [asyncio.create_task(call(token)) for _ in range(16)]
            assert await eventually_async(lambda: up.received == 16)
            async with asyncio.timeout(10), s.post(
                    gw.base_url + PATHS["chat"], json=request_body("chat", False),
                    headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 429 and r.headers["Retry-After"] == "1"
                assert "16 requests in flight" in (await r.json())["error"]["message"]
            second = asyncio.create_task(call(other))  # another trial is not held up
            assert await eventually_async(lambda: up.received == 17)
            up.gate.set()
            assert await asyncio.gather(*held, second) == [200] * 17
        assert len(gw.close_trial("t").calls) == 16
    finally:
        up.gate.set()
        await gw.stop()


@pytest.mark.parametrize("over", ["tcp", "unix"])
async def test_connections_per_client_are_capped(over: str) -> None:
    """Over TCP a client is an IP address; over the Unix socket, a process (each sandbox's
    bridge is its own)."""
    gw = Gateway(ModelRegistry(), PriceBook(), limits=GatewayLimits(max_connections_per_client=8))
    await gw.start(port=0, private_socket=True)
    try:
        assert gw.port is not None and gw.unix_socket is not None
        path, port = str(gw.unix_socket), gw.port

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            if over == "unix":
                return await asyncio.open_unix_connection(path)
            return await asyncio.open_connection("127.0.0.1", port)

        conns = [await connect() for _ in range(8)]
        reader, writer = await connect()
        answer = await closed_within(reader, 5)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        writer.close()
        conns.pop()[1].close()  # one closes: a new one is taken
        assert await eventually_async(lambda: sum(gw._gate.open.values()) == 7)
        assert list(gw._gate.open) == [f"pid:{os.getpid()}" if over == "unix" else "ip:127.0.0.1"]
        reader, writer = await connect()
        writer.write(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        writer.close()
        for _, w in conns:
            w.close()
    finally:
        await gw.stop()


async def race(gw: Gateway, up: GatedUpstream, token: str, n: int, *, stream: bool,
               cut: bool = False) -> list[int]:
    """``n`` calls at once; the upstream holds the first ones until no more arrive."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

        async def call() -> int:
            async with s.post(gw.base_url + PATHS["chat"], json=request_body("chat", stream),
                              headers={"Authorization": f"Bearer {token}"}) as r:
                if cut and r.status == 200:  # hang up after the first event
                    await r.content.readany()
                    r.close()
                else:
                    await r.read()
                return r.status

        calls = asyncio.gather(*(call() for _ in range(n)))
        assert await eventually_async(lambda: up.received > 0), "the upstream never got the call"
        before = -1
        while up.received != before:  # all that will reach the upstream now have
            before = up.received
            await asyncio.sleep(0.3)
        up.gate.set()
        return list(await calls)


async def test_max_calls_holds_against_500_concurrent_calls(
        gated: tuple[GatedUpstream, int]) -> None:
    up, port = gated
    gw = await start_gateway(WIDE, port)
    try:
        token = gw.open_trial("t", "gated/up", budget=Budget(max_calls=10))
        statuses = await race(gw, up, token, 500, stream=False)
        assert up.received == 10
        assert sorted(statuses) == [200] * 10 + [429] * 490
        meter = gw.close_trial("t")
        assert sum(c.status_code == 200 for c in meter.calls) == 10 and meter.budget_exceeded
    finally:
        await gw.stop()


async def test_max_tokens_holds_against_100_concurrent_cut_streams(
        gated: tuple[GatedUpstream, int]) -> None:
    up, port = gated
    gw = await start_gateway(WIDE, port)
    try:
        token = gw.open_trial("t", "gated/up", budget=Budget(max_tokens=3000))
        statuses = await race(gw, up, token, 100, stream=True, cut=True)
        assert await eventually_async(lambda: len(gw.trial_meter("t").calls) == 100)
        meter = gw.close_trial("t")
        served = [c for c in meter.calls if c.status_code == 200]
        assert statuses.count(200) == len(served) == up.received == 6  # 6 x 500 reach 3000
        assert all((c.usage.input, c.usage.output) == (400, 100) for c in served)  # cut, charged
        assert meter.charged_tokens == meter.usage.total == 3000
        assert meter.charged_tokens <= 3000 + TokenUsage(input=400, output=100).total
    finally:
        await gw.stop()


async def test_max_usd_holds_against_100_concurrent_calls(
        gated: tuple[GatedUpstream, int]) -> None:
    up, port = gated
    gw = await start_gateway(WIDE, port)
    try:
        one = gw.prices.cost_usd("scripted/x", TokenUsage(input=400, output=100))
        assert one is not None
        token = gw.open_trial("t", "gated/up", budget=Budget(max_usd=5.5 * one))
        statuses = await race(gw, up, token, 100, stream=False)
        meter = gw.close_trial("t")
        assert statuses.count(200) == up.received == 6
        assert meter.charged_usd == pytest.approx(6 * one)
        assert meter.charged_usd <= 5.5 * one + one
    finally:
        await gw.stop()


async def test_calls_waiting_for_their_reservation_are_refused_when_the_trial_ends(
        gated: tuple[GatedUpstream, int]) -> None:
    up, port = gated
    gw = await start_gateway(None, port)
    try:
        token = gw.open_trial("t", "gated/up", budget=Budget(max_tokens=3000))
        async with aiohttp.ClientSession() as s:

            async def call() -> int:
                async with s.post(gw.base_url + PATHS["chat"], json=request_body("chat", False),
                                  headers={"Authorization": f"Bearer {token}"}) as r:
                    await r.read()
                    return r.status

            first = asyncio.create_task(call())
            assert await eventually_async(lambda: up.received == 1)
            waiting = [asyncio.create_task(call()) for _ in range(3)]  # their worst case waits
            assert await eventually_async(lambda: gw._trials["t"].in_flight == 4)
            finishing = asyncio.create_task(gw.finish_trial("t"))
            try:
                async with asyncio.timeout(10):
                    assert await asyncio.gather(*waiting) == [401] * 3  # at once, never served
            finally:
                up.gate.set()
            assert await first == 200
            meter = await finishing
        assert len(meter.calls) == 1 and up.received == 1 and not meter.budget_exceeded
    finally:
        await gw.stop()
