"""Upstream 429/5xx/connection errors: retried with backoff and Retry-After; exhausted → infra."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentmeter.gateway import Gateway, ModelRegistry, RetryPolicy, UpstreamModel
from agentmeter.gateway.upstream import retry_after
from agentmeter.pricing import PriceBook

OK = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                   "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}


class Flaky:
    """Answers with the scripted statuses in order, then 200."""

    def __init__(self, statuses: list[int], retry_after: str | None = None) -> None:
        self.statuses, self.retry_after, self.seen = list(statuses), retry_after, 0

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen += 1
        if self.statuses:
            status = self.statuses.pop(0)
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.json_response({"error": {"message": f"try later ({status})",
                                                "type": "server_error"}},
                                     status=status, headers=headers)
        return web.json_response(OK)


async def start(handler: Any) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def registry(port: int) -> ModelRegistry:
    return ModelRegistry({"flaky/m": UpstreamModel(
        name="flaky/m", base_url=f"http://127.0.0.1:{port}/v1", price_key="scripted/x")})


@pytest.fixture
async def call() -> AsyncIterator[Any]:
    gateways: list[Gateway] = []

    async def do(port: int, retries: int = 3) -> tuple[int, dict[str, Any], Gateway]:
        gw = Gateway(registry(port), PriceBook(),
                     retry=RetryPolicy(max_retries=retries, base_delay=0.01, max_delay=0.05))
        gateways.append(gw)
        await gw.start(port=0)
        token = gw.open_trial("t", "flaky/m")
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {token}"},
                json={"model": "x", "messages": [{"role": "user", "content": "hi"}]}) as r:
            return r.status, json.loads(await r.read()), gw

    yield do
    for gw in gateways:
        await gw.stop()


@pytest.mark.parametrize("statuses", [[429], [500, 503], [429, 502, 529]])
async def test_retried_until_success(call: Any, statuses: list[int]) -> None:
    flaky = Flaky(statuses, retry_after="0")
    runner, port = await start(flaky.handle)
    try:
        status, body, gw = await call(port)
        assert status == 200 and body["choices"][0]["message"]["content"] == "hi"
        assert flaky.seen == len(statuses) + 1
        meter = gw.close_trial("t")
        assert meter.infra_error is None and len(meter.calls) == 1
        assert meter.calls[0].usage.input == 11 and meter.calls[0].usage.output == 3
    finally:
        await runner.cleanup()


async def test_exhausted_retries_record_infra_error(call: Any) -> None:
    flaky = Flaky([503] * 10)
    runner, port = await start(flaky.handle)
    try:
        status, body, gw = await call(port, retries=2)
        assert status == 503 and "try later" in body["error"]["message"]
        assert flaky.seen == 3
        meter = gw.close_trial("t")
        assert meter.infra_error is not None and "503" in meter.infra_error
        assert "3 attempts" in meter.infra_error
    finally:
        await runner.cleanup()


async def test_client_errors_are_not_retried(call: Any) -> None:
    flaky = Flaky([400])
    runner, port = await start(flaky.handle)
    try:
        status, _, gw = await call(port)
        assert status == 400 and flaky.seen == 1
        assert gw.close_trial("t").infra_error is None
    finally:
        await runner.cleanup()


async def test_unreachable_upstream_is_infra(call: Any) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status, body, gw = await call(port, retries=1)
    assert status == 502 and "upstream unavailable" in body["error"]["message"]
    meter = gw.close_trial("t")
    assert meter.infra_error is not None and "cannot reach" in meter.infra_error


def test_retry_after_forms() -> None:
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after({}) is None
    assert RetryPolicy(base_delay=1, max_delay=5).backoff(10) == 5
