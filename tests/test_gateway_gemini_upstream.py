"""What a Gemini-speaking upstream reports, metered exactly: every usage field, thoughts, cut or
failing streams, errors, retries. The upstream is a real local aiohttp server with fixed replies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from test_gateway import SECRET, serve

from agentmeter.gateway import Gateway, ModelRegistry, RetryPolicy, UpstreamModel
from agentmeter.pricing import PriceBook

FULL = {"promptTokenCount": 1000, "toolUsePromptTokenCount": 50, "candidatesTokenCount": 200,
        "cachedContentTokenCount": 600, "thoughtsTokenCount": 300, "totalTokenCount": 1550}
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def reply(parts: list[dict[str, Any]], finish: str | None, usage: dict[str, Any] | None) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [cand], "modelVersion": "gemini-x"}
    if usage is not None:
        out["usageMetadata"] = usage
    return out


#: a stream as Google sends it: thoughts first, cumulative usage on every event, the last complete
STREAM = [reply([{"text": "let me think", "thought": True}], None,
                {"promptTokenCount": 1000, "totalTokenCount": 1000}),
          reply([{"text": "Hello "}], None, {"promptTokenCount": 1000, "candidatesTokenCount": 2}),
          reply([{"text": "world"}], "STOP", FULL)]
WHOLE = reply([{"text": "let me think", "thought": True}, {"text": "Hello world"}], "STOP", FULL)


class Fixed:
    """A Gemini upstream answering every call with ``events`` (stream) or ``whole``."""

    def __init__(self, events: list[bytes] | None = None, whole: Any = WHOLE, status: int = 200,
                 statuses: list[int] | None = None) -> None:
        self.events = events if events is not None else [
            f"data: {json.dumps(e)}\r\n\r\n".encode() for e in STREAM]
        self.whole, self.status = whole, status
        self.statuses = list(statuses or [])  # answered first, one per call, before the reply
        self.seen: list[web.Request] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request)
        await request.read()
        status = self.statuses.pop(0) if self.statuses else self.status
        if status != 200:
            key = request.headers.get("x-goog-api-key")
            return web.json_response({"error": {"code": status, "message": f"nope (key {key})",
                                                "status": "UNAVAILABLE"}}, status=status)
        if not request.path.endswith(":streamGenerateContent"):
            return web.json_response(self.whole)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for e in self.events:
            await resp.write(e)
        await resp.write_eof()
        return resp


@pytest.fixture
async def upstream(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[[Fixed], Any]]:
    made: list[tuple[web.AppRunner, Gateway]] = []
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)

    async def make(fixed: Fixed) -> Gateway:
        app = web.Application()
        app.router.add_post("/v1beta/models/{target}", fixed.handle)
        runner, port = await serve(app)
        gw = Gateway(ModelRegistry({"g/up": UpstreamModel(
            name="g/up", base_url=f"http://127.0.0.1:{port}/v1beta", wire_api="gemini",
            key_env="AGENTMETER_TEST_KEY", price_key="google/gemini-2.5-pro")}), PriceBook(),
            retry=RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02))
        await gw.start(port=0)
        made.append((runner, gw))
        return gw

    yield make
    for runner, gw in made:
        await gw.stop()
        await runner.cleanup()


async def post(gw: Gateway, token: str, api: str, stream: bool,
               body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    if api == "gemini":
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        url, headers = f"{gw.base_url}/v1beta/models/x:{method}", {"x-goog-api-key": token}
        data = body or BODY
    else:
        url, headers = f"{gw.base_url}/v1/chat/completions", {"Authorization": f"Bearer {token}"}
        data = dict(body or CHAT, stream=stream)
    async with aiohttp.ClientSession() as s, s.post(url, json=data, headers=headers) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("api", ["gemini", "chat"])
@pytest.mark.parametrize("stream", [False, True])
async def test_every_gemini_usage_field_is_metered(upstream: Any, api: str, stream: bool) -> None:
    gw = await upstream(Fixed())
    token = gw.open_trial("t", "g/up")
    status, body = await post(gw, token, api, stream)
    assert status == 200
    u = gw.close_trial("t").calls[0].usage
    # prompt + tool-use prompt; cached (part of the input); candidates + thoughts; thoughts
    assert (u.input, u.cache_read, u.output, u.reasoning) == (1050, 600, 500, 300)
    assert u.cache_creation is None
    assert b"Hello" in body and b"world" in body and b"let me think" not in body or api == "gemini"
    if api == "chat" and not stream:
        got = json.loads(body)
        assert got["choices"][0]["message"]["content"] == "Hello world"
        assert got["usage"]["prompt_tokens"] == 1050 and got["usage"]["completion_tokens"] == 500
        assert got["usage"]["completion_tokens_details"]["reasoning_tokens"] == 300


async def test_cost_of_a_gemini_call_is_priced(upstream: Any) -> None:
    gw = await upstream(Fixed())
    token = gw.open_trial("t", "g/up")
    await post(gw, token, "gemini", False)
    meter = gw.close_trial("t")
    assert meter.cost_usd is not None and meter.cost_usd > 0


@pytest.mark.parametrize(("usage", "expected"), [
    ({"promptTokenCount": 7, "totalTokenCount": 7}, (7, 0, None, None)),  # zero counts omitted
    ({"promptTokenCount": 7, "candidatesTokenCount": 3}, (7, 3, None, None)),
    ({"promptTokenCount": 7, "thoughtsTokenCount": 4}, (7, 4, None, 4)),
])
async def test_unreported_fields_stay_unknown(upstream: Any, usage: dict[str, Any],
                                              expected: tuple[Any, ...]) -> None:
    gw = await upstream(Fixed(whole=reply([{"text": "x"}], "STOP", usage)))
    token = gw.open_trial("t", "g/up")
    await post(gw, token, "gemini", False)
    u = gw.close_trial("t").calls[0].usage
    assert (u.input, u.output, u.cache_read, u.reasoning) == expected


async def test_no_usage_is_charged_a_bound(upstream: Any) -> None:
    gw = await upstream(Fixed(whole=reply([{"text": "x"}], "STOP", None)))
    token = gw.open_trial("t", "g/up")
    await post(gw, token, "gemini", False, dict(BODY, generationConfig={"maxOutputTokens": 77}))
    meter = gw.close_trial("t")
    assert meter.calls_without_usage == 1 and meter.cost_usd is None
    assert meter.charged_tokens >= 77  # the request's own output cap bounds the output


@pytest.mark.parametrize("cut", ["truncated", "error_event"])
async def test_cut_or_failing_gemini_stream_is_the_providers_fault(upstream: Any, cut: str) -> None:
    events = [f"data: {json.dumps(STREAM[0])}\r\n\r\n".encode()]
    if cut == "error_event":
        events.append(b'data: {"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}\r\n\r\n')
    gw = await upstream(Fixed(events=events))
    token = gw.open_trial("t", "g/up")
    status, _ = await post(gw, token, "gemini", True)
    call = gw.close_trial("t").calls[0]
    assert status == 200 and call.error is not None
    assert ("boom" in call.error) if cut == "error_event" else ("final event" in call.error)


async def test_upstream_errors_keep_or_take_the_clients_shape_key_scrubbed(upstream: Any) -> None:
    gw = await upstream(Fixed(status=400))
    token = gw.open_trial("t", "g/up")
    status, body = await post(gw, token, "gemini", False)
    assert status == 400 and json.loads(body)["error"]["status"] == "UNAVAILABLE"
    assert SECRET.encode() not in body and b"***" in body
    status, body = await post(gw, token, "chat", True)
    err = json.loads(body)["error"]
    assert status == 400 and "nope" in err["message"] and "type" in err  # OpenAI's shape
    assert SECRET not in err["message"]
    gw.close_trial("t")


async def test_gemini_upstream_retried_like_any_other(upstream: Any) -> None:
    fixed = Fixed(statuses=[503, 429])
    gw = await upstream(fixed)
    token = gw.open_trial("t", "g/up")
    status, _ = await post(gw, token, "gemini", True)
    assert status == 200 and len(fixed.seen) == 3
    assert all(r.query_string == "alt=sse" and SECRET not in r.path_qs for r in fixed.seen)
    meter = gw.close_trial("t")
    assert [c.status_code for c in meter.calls] == [200] and meter.infra_error is None
    fixed.statuses = [503] * 3
    token = gw.open_trial("t2", "g/up")
    status, body = await post(gw, token, "gemini", False)
    assert status == 503 and json.loads(body)["error"]["code"] == 503
    assert "after 3 attempts" in (gw.close_trial("t2").infra_error or "")
