"""What the gateway charges and when: cut streams, unknown usage, the call sink, hostile bodies.

Attacks from a hostile client: hanging up mid-stream (to escape metering and budgets), and
request bodies nested deeply enough to break the parser or the translators.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from polling import eventually_async
from test_gateway import APIS, PATHS, SECRET, headers_for, request_body, serve

from agentmeter.gateway import Budget, Gateway, ModelRegistry, UpstreamModel
from agentmeter.pricing import PriceBook
from agentmeter.records import ModelCallRecord


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


FIRST = chunk({"role": "assistant", "content": "FIRSTPART"})
USAGE = {"prompt_tokens": 400, "completion_tokens": 100, "total_tokens": 500}
#: the rest of a stream in many writes, its usage last: a gateway that stopped reading when its
#: client went away would never see the usage
REST = ([chunk({"content": "SECONDPART"})] + [chunk({"content": f" more {i}"}) for i in range(20)]
        + [chunk({}, "stop"), b'data: {"id":"c","object":"chat.completion.chunk","created":0,'
           b'"model":"m","choices":[],"usage":' + json.dumps(USAGE).encode() + b"}\n\n",
           b"data: [DONE]\n\n"])


class HeldUpstream:
    """A chat upstream that sends its first event, then holds the rest of each stream until
    the test releases it (after the client hung up): no timing involved."""

    def __init__(self, usage: bool = True) -> None:
        self.releases: asyncio.Queue[None] = asyncio.Queue()
        self.served = 0
        self.usage = usage

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.served += 1
        rest = REST if self.usage else [chunk({"content": "SECONDPART"}, "stop"), b"data: [DONE]\n\n"]
        if not body.get("stream"):
            msg = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                       "role": "assistant", "content": "WHOLE"}}]}
            if self.usage:
                msg["usage"] = USAGE
            return web.json_response(msg)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST)
        await asyncio.wait_for(self.releases.get(), 30)
        for part in rest:
            await resp.write(part)
            for _ in range(5):  # let the gateway read each part on its own (not a timing)
                await asyncio.sleep(0)
        await resp.write_eof()
        return resp


@pytest.fixture
async def held(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Gateway, HeldUpstream]]:
    up = HeldUpstream()
    app = web.Application()
    app.router.add_post(PATHS["chat"], up.handle)
    runner, port = await serve(app)
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    gw = Gateway(ModelRegistry({"held/up": UpstreamModel(
        name="held/up", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        key_env="AGENTMETER_TEST_KEY", price_key="scripted/x")}), PriceBook())
    await gw.start(port=0)
    yield gw, up
    for _ in range(64):  # streams still held (a failing test) end now
        up.releases.put_nowait(None)
    await gw.stop()
    await runner.cleanup()


async def cut_stream(gw: Gateway, up: HeldUpstream, api: str, token: str) -> int:
    """Start a stream, read its first event, then hang up with a TCP reset; returns the status
    (a refused call is answered at once, with no stream to cut)."""
    async with aiohttp.ClientSession() as s:
        r = await s.post(gw.base_url + PATHS[api], json=request_body(api, True),
                         headers=headers_for(api, token))
        if r.status != 200:
            await r.read()
            return r.status
        seen = b""
        while b"FIRSTPART" not in seen:
            seen += await asyncio.wait_for(r.content.readany(), 10)
        assert r.connection is not None and r.connection.transport is not None
        transport = r.connection.transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()  # RST: the gateway's next write to this client fails
        r.close()
    up.releases.put_nowait(None)  # only now does the upstream send the rest, usage included
    return 200


@pytest.mark.parametrize("api", APIS)  # responses and messages: translated from the chat upstream
async def test_cut_streams_are_metered_charged_and_refused_once_over_budget(
        held: tuple[Gateway, HeldUpstream], api: str) -> None:
    gw, up = held
    token = gw.open_trial("t", "held/up", budget=Budget(max_tokens=3000))
    statuses = []
    for _ in range(15):
        statuses.append(await cut_stream(gw, up, api, token))
        # the cut call is metered once the upstream's stream ended (the gateway read it all)
        assert await eventually_async(lambda: len(gw.trial_meter("t").calls) == len(statuses))
    refused = 402 if api == "messages" else 429
    assert statuses == [200] * 6 + [refused] * 9  # 6 x 500 tokens reach the 3000 budget
    assert up.served == 6
    meter = gw.close_trial("t")
    served = meter.calls[:6]
    for call in served:
        assert (call.usage.input, call.usage.output) == (400, 100)  # the real usage, not 0
        assert call.cost_usd is not None and call.cost_usd > 0
        assert call.error is not None and call.error.startswith("client disconnected"), call.error
    assert all(c.error == "budget_exceeded" for c in meter.calls[6:])
    assert meter.usage.total == meter.charged_tokens == 3000
    assert meter.budget_exceeded
    assert meter.infra_error is None  # the client's doing: not a provider fault
    assert meter.cost_usd == pytest.approx(sum(c.cost_usd or 0 for c in served))


@pytest.mark.parametrize("stream", [False, True])
async def test_unknown_usage_is_na_and_charged_an_upper_bound(
        held: tuple[Gateway, HeldUpstream], stream: bool) -> None:
    gw, up = held
    up.usage = False  # a served reply that reports no usage
    body = request_body("chat", stream)
    body["max_tokens"] = 50
    token = gw.open_trial("t", "held/up", budget=Budget(max_tokens=10_000))
    if stream:
        up.releases.put_nowait(None)
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + PATHS["chat"], json=body, headers=headers_for("chat", token)) as r:
        assert r.status == 200
        await r.read()
    meter = gw.trial_meter("t")
    (call,) = meter.calls
    assert call.status_code == 200 and call.error is None
    assert call.usage.input is None and call.usage.output is None  # n/a, never 0
    assert call.cost_usd is None and meter.cost_usd is None and meter.usage.total == 0
    assert meter.calls_without_usage == 1
    # charged: the request's bytes (a token is at least a byte) plus its output cap
    assert meter.charged_tokens == call.bytes_in + 50
    assert meter.charged_usd > 0
    # without an output cap: the bytes the upstream sent bound the (visible) output
    del body["max_tokens"]
    if stream:
        up.releases.put_nowait(None)
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + PATHS["chat"], json=body, headers=headers_for("chat", token)) as r:
        await r.read()
    second = gw.trial_meter("t").calls[1]
    assert gw.trial_meter("t").charged_tokens - meter.charged_tokens > second.bytes_in
    # the conservative charge counts against the budget: 10,000 is soon reached
    for _ in range(40):
        if stream:
            up.releases.put_nowait(None)
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + PATHS["chat"], json=body, headers=headers_for("chat", token)) as r:
            await r.read()
            if r.status == 429:
                break
    else:
        pytest.fail("calls with unknown usage were never refused")
    final = gw.close_trial("t")
    assert final.budget_exceeded and final.usage.total == 0 < 10_000 <= final.charged_tokens


async def test_sink_gets_each_call_before_the_client_sees_its_end(
        held: tuple[Gateway, HeldUpstream]) -> None:
    gw, up = held
    got: list[ModelCallRecord] = []
    token = gw.open_trial("t", "held/up", sink=got.append)
    for i, stream in enumerate([False, True, False]):
        if stream:
            up.releases.put_nowait(None)
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + PATHS["chat"], json=request_body("chat", stream),
                headers=headers_for("chat", token)) as r:
            await r.read()
        assert [c.seq for c in got] == list(range(i + 1))  # no waiting: already handed over
    meter = gw.close_trial("t")
    assert meter.stored_seqs == [0, 1, 2] and meter.sink_error is None
    assert got == meter.calls


async def test_a_failing_sink_never_fails_the_call(held: tuple[Gateway, HeldUpstream]) -> None:
    gw, _ = held

    def broken(record: ModelCallRecord) -> None:
        raise OSError("database is locked")

    token = gw.open_trial("t", "held/up", sink=broken)
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + PATHS["chat"], json=request_body("chat", False),
            headers=headers_for("chat", token)) as r:
        assert r.status == 200
    meter = gw.close_trial("t")
    assert meter.stored_seqs == [] and len(meter.calls) == 1  # the runner stores it at the end
    assert meter.sink_error is not None and "database is locked" in meter.sink_error


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("depth", [300, 985, 100_000, 199_000])  # 199,000: orjson 3.8 crashed
async def test_deeply_nested_json_gets_400_in_api_shape(api: str, depth: int) -> None:
    """Nested past the parser's limit, or just below it (where translating or re-encoding
    would blow the stack): a client error in the client's shape, never a 500 or a 502
    blamed on the provider."""
    gw = Gateway(ModelRegistry(), PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "scripted/explorer")
        raw = json.dumps(request_body(api, False)).replace(
            '"Fix the bug in app.py"', "[" * depth + "]" * depth, 1).encode()
        async with aiohttp.ClientSession() as s:
            for path in (PATHS[api], "/v1/messages/count_tokens"):
                async with s.post(gw.base_url + path, data=raw, headers={
                        **headers_for(api, token), "Content-Type": "application/json"}) as r:
                    err = json.loads(await r.read())
                    assert r.status == 400, err
                    assert "nested deeper" in json.dumps(err)
                    if api == "messages" or path.endswith("count_tokens"):
                        assert err["type"] == "error"
                        assert err["error"]["type"] == "invalid_request_error"
                    else:
                        assert err["error"]["type"] == "invalid_request_error"
        meter = gw.close_trial("t")
        assert meter.infra_error is None and meter.calls == []
    finally:
        await gw.stop()
