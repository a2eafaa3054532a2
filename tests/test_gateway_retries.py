"""Upstream 429/5xx/connection errors: retried with backoff and Retry-After; exhausted → infra."""

from __future__ import annotations

import json
import socket
import time
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

    async def do(port: int, retries: int = 3, max_delay: float = 0.05) -> tuple[int, dict[str, Any], Gateway]:
        gw = Gateway(registry(port), PriceBook(),
                     retry=RetryPolicy(max_retries=retries, base_delay=0.01, max_delay=max_delay))
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


async def test_retry_after_hint_is_waited(call: Any) -> None:
    """The hint (400 ms) is waited, not the policy's 10 ms backoff: a lower bound on elapsed
    time, which a loaded machine can only lengthen."""
    arrivals: list[float] = []

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            return web.json_response({"error": {"message": "slow down"}}, status=429,
                                     headers={"retry-after-ms": "400"})
        return web.json_response(OK)

    runner, port = await start(handle)
    try:
        status, _, _ = await call(port, max_delay=5.0)
        assert status == 200 and len(arrivals) == 2
        assert arrivals[1] - arrivals[0] >= 0.4
    finally:
        await runner.cleanup()


async def test_upstream_down_for_a_whole_trial_is_infra_invalid_retried_and_kept(tmp_path: Any) -> None:
    """Through the runner: every try of the trial meets an upstream answering 503; each try ends
    infra_invalid with its model calls kept, the trial is retried max_infra_retries times, and the
    scores leave it out."""
    from taskgen import make_task

    from agentmeter.metrics import ScoringSpec, load_frame, score
    from agentmeter.records import TrialStatus
    from agentmeter.runner.session import RunRequest, prepare, run
    from agentmeter.store.db import Store

    seen = 0

    async def down(request: web.Request) -> web.Response:
        nonlocal seen
        await request.read()
        seen += 1
        return web.json_response({"error": {"message": "overloaded", "type": "server_error"}},
                                 status=503, headers={"retry-after-ms": "1"})

    runner, port = await start(down)
    suite = tmp_path / "suite"
    make_task(suite, "t")
    models = tmp_path / "models.toml"
    models.write_text(f'[models."down/m"]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                      f'wire_api = "chat"\nprice_key = "scripted/solver"\n')
    try:
        with Store.open(tmp_path / "runs") as store:
            rid, progress = await run(store, prepare(RunRequest(
                suites=[str(suite)], agents=["native"], models=["down/m"], models_file=str(models),
                max_infra_retries=2)))
            tries = sorted(store.trials(rid), key=lambda t: t.try_number)
            calls = {t.try_number: store.model_calls(rid, t.id, t.try_number) for t in tries}
            card = score(load_frame(store, [rid]), ScoringSpec(resamples=0))
    finally:
        await runner.cleanup()
    assert [t.try_number for t in tries] == [0, 1, 2]
    assert all(t.status is TrialStatus.INFRA_INVALID for t in tries)
    assert all("503" in (t.error or "") for t in tries), [t.error for t in tries]
    assert all(len(c) >= 1 and c[0].status_code == 503 for c in calls.values())  # spending kept
    assert seen == 3 * 5  # 3 tries x (1 + 4 gateway retries) for the one call of each try
    assert progress.infra == 1 and progress.passed == 0
    (row,) = card.rows
    assert row.n_scored == 0 and row.pass_rate is None  # excluded from quality
