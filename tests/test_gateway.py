"""The gateway over real HTTP: metering, key injection, auth, malformed input, budgets.

The upstream is the scripted model served stand-alone over loopback HTTP (the only test double),
so every byte the gateway reads from an upstream is a real HTTP response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentmeter.gateway import Budget, Gateway, ModelRegistry, UpstreamModel
from agentmeter.gateway.scripted.policy import Policy
from agentmeter.gateway.scripted.server import Exchange, make_app
from agentmeter.pricing import PriceBook
from agentmeter.records import TokenUsage

SECRET = "sk-test-SECRET-do-not-leak-0123456789"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
APIS = ["chat", "responses", "messages"]


def request_body(api: str, stream: bool, turn: int = 0) -> dict[str, Any]:
    """A small agent-like request; ``turn`` > 0 extends the conversation (prefix-cache hits)."""
    extra = [f"and continue, turn {i}" for i in range(turn)]
    if api == "chat":
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent." * 8},
                                      {"role": "user", "content": "Fix the bug in app.py"}]
        msgs += [{"role": "user", "content": e} for e in extra]
        body: dict[str, Any] = {"model": "client-chosen-name", "messages": msgs, "tools": [
            {"type": "function", "function": {"name": "bash", "parameters": {
                "type": "object", "properties": {"command": {"type": "string"}},
                "required": ["command"]}}}]}
    elif api == "responses":
        items = [{"role": "user", "content": "Fix the bug in app.py"}]
        items += [{"role": "user", "content": e} for e in extra]
        body = {"model": "client-chosen-name", "instructions": "You are Codex." * 8,
                "input": items, "tools": [{"type": "function", "name": "exec_command",
                                           "parameters": {"type": "object", "properties": {
                                               "cmd": {"type": "string"}}}}]}
    else:
        mm = [{"role": "user", "content": "Fix the bug in app.py"}]
        mm += [{"role": "user", "content": e} for e in extra]
        body = {"model": "claude-client-name", "max_tokens": 1000, "system": "You are Claude." * 8,
                "messages": mm, "tools": [{"name": "Bash", "input_schema": {
                    "type": "object", "properties": {"command": {"type": "string"}},
                    "required": ["command"]}}]}
    if stream:
        body["stream"] = True
        if api == "chat":
            body["stream_options"] = {"include_usage": True}
    return body


def headers_for(api: str, token: str) -> dict[str, str]:
    if api == "messages":
        return {"x-api-key": token, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {token}"}


def sent_usage(api: str, ex: Exchange) -> TokenUsage:
    """What the upstream put on the wire, mapped by hand (independently of the gateway code)."""
    if ex.response.startswith(b"{"):
        u = json.loads(ex.response)["usage"]
    else:
        events = [json.loads(line[6:]) for line in ex.response.decode().splitlines()
                  if line.startswith("data: {")]
        if api == "chat":
            u = [e for e in events if e.get("usage")][-1]["usage"]
        elif api == "responses":
            u = [e for e in events if e["type"] == "response.completed"][0]["response"]["usage"]
        else:
            u = {}
            for e in events:
                if e["type"] == "message_start":
                    u.update(e["message"]["usage"])
                elif e["type"] == "message_delta":
                    u.update(e["usage"])
    if api == "chat":
        return TokenUsage(input=u["prompt_tokens"], output=u["completion_tokens"],
                          cache_read=u["prompt_tokens_details"]["cached_tokens"],
                          reasoning=u["completion_tokens_details"]["reasoning_tokens"])
    if api == "responses":
        return TokenUsage(input=u["input_tokens"], output=u["output_tokens"],
                          cache_read=u["input_tokens_details"]["cached_tokens"],
                          reasoning=u["output_tokens_details"]["reasoning_tokens"])
    return TokenUsage(
        input=u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"],
        output=u["output_tokens"], cache_creation=u["cache_creation_input_tokens"],
        cache_read=u["cache_read_input_tokens"])


class Upstream:
    def __init__(self, runner: web.AppRunner, port: int, log: list[Exchange]) -> None:
        self.runner, self.port, self.log = runner, port, log

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    log: list[Exchange] = []
    runner, port = await serve(make_app(Policy("explorer", 3), log=log))
    yield Upstream(runner, port, log)
    await runner.cleanup()


@pytest.fixture
async def gateway(upstream: Upstream, monkeypatch: pytest.MonkeyPatch,
                  tmp_path: Path) -> AsyncIterator[Gateway]:
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    models = ModelRegistry({"test/up": UpstreamModel(
        name="test/up", base_url=upstream.base_url, wire_api="chat",
        extra_wire_apis=("responses", "messages"), key_env="AGENTMETER_TEST_KEY",
        price_key="scripted/test", upstream_model="upstream-model-id")})
    gw = Gateway(models, PriceBook(), record_bodies_dir=tmp_path / "bodies")
    await gw.start(host="127.0.0.1", port=0)
    yield gw
    await gw.stop()


async def post(gw: Gateway, api: str, token: str, body: Any) -> tuple[int, bytes, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + PATHS[api], data=data,
            headers={**headers_for(api, token), "Content-Type": "application/json"}) as r:
        return r.status, await r.read(), r.headers


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", APIS)
async def test_usage_stored_equals_what_upstream_sent(gateway: Gateway, upstream: Upstream,
                                                      api: str, stream: bool) -> None:
    token = gateway.open_trial("trial-1", "test/up")
    for turn in range(2):
        status, body, headers = await post(gateway, api, token, request_body(api, stream, turn))
        assert status == 200, body
        assert SECRET.encode() not in body
        assert all(SECRET not in v for v in headers.values())
    meter = gateway.close_trial("trial-1")
    assert len(meter.calls) == 2 == len(upstream.log)
    for call, ex in zip(meter.calls, upstream.log, strict=True):
        expected = sent_usage(api, ex)
        for name in ("input", "output", "cache_creation", "cache_read", "reasoning"):
            assert getattr(call.usage, name) == getattr(expected, name), name
        assert call.wire_api == call.client_api == api
        assert call.stream is stream and call.status_code == 200
        assert call.model == request_body(api, stream)["model"]
        assert call.upstream_model == "upstream-model-id"
        assert call.bytes_in > 0 and call.bytes_out > 0 and not call.scripted
        if stream:
            assert call.ttft_s is not None and call.ttft_s <= call.latency_s
    # the second request shared a prefix with the first: the upstream reported cache reads
    assert (meter.calls[1].usage.cache_read or 0) > 0
    assert meter.usage == meter.calls[0].usage + meter.calls[1].usage
    assert meter.cost_usd is not None and meter.cost_usd > 0
    assert not meter.budget_exceeded and meter.infra_error is None


@pytest.mark.parametrize("api", APIS)
async def test_key_injected_upstream_token_never_forwarded(gateway: Gateway, upstream: Upstream,
                                                           api: str) -> None:
    token = gateway.open_trial("t", "test/up")
    status, _, _ = await post(gateway, api, token, request_body(api, False))
    assert status == 200
    ex = upstream.log[-1]
    sent = {k.lower(): v for k, v in ex.headers.items()}
    if api == "messages":
        assert sent["x-api-key"] == SECRET and "authorization" not in sent
        assert sent["anthropic-version"] == "2023-06-01"
    else:
        assert sent["authorization"] == f"Bearer {SECRET}" and "x-api-key" not in sent
    assert token not in json.dumps(sent) and token.encode() not in ex.body
    # the trial's configured model wins over the client's; the client's name is recorded
    assert json.loads(ex.body)["model"] == "upstream-model-id"
    call = gateway.close_trial("t").calls[0]
    assert call.model == request_body(api, False)["model"]


def test_forwarded_headers_only_the_listed_ones() -> None:
    from unittest import mock

    from agentmeter.gateway.calls import forwarded_headers
    from agentmeter.gateway.httprequest import Headers

    request = mock.Mock(headers=Headers([(k.lower(), v) for k, v in [
        ("Authorization", "Bearer am-token"), ("X-Api-Key", "am-token"), ("Cookie", "c=1"),
        ("Anthropic-Beta", "tools-1"), ("User-Agent", "first"), ("user-agent", "last"),
        ("anthropic-version", "2023-06-01")]]))
    assert forwarded_headers(request) == {"anthropic-beta": "tools-1", "user-agent": "last",
                                          "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("api", APIS)
async def test_unknown_token_gets_401_in_api_shape(gateway: Gateway, api: str) -> None:
    gateway.open_trial("t", "test/up")
    status, body, _ = await post(gateway, api, "am-not-a-real-token", request_body(api, False))
    assert status == 401
    err = json.loads(body)
    if api == "messages":
        assert err["type"] == "error" and err["error"]["type"] == "authentication_error"
    else:
        assert err["error"]["code"] == "invalid_api_key" and err["error"]["message"]
    assert gateway.close_trial("t").calls == []


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("garbage", [b"{not json", b"[1, 2]", b"", b"\xff\xfe"])
async def test_malformed_json_gets_400_in_api_shape(gateway: Gateway, api: str,
                                                    garbage: bytes) -> None:
    token = gateway.open_trial("t", "test/up")
    status, body, _ = await post(gateway, api, token, garbage)
    assert status == 400
    err = json.loads(body)
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["message"]
    if api == "messages":
        assert err["type"] == "error"  # Anthropic's envelope
    else:
        assert set(err) == {"error"}  # OpenAI's
    # and the gateway still serves the next call
    status, _, _ = await post(gateway, api, token, request_body(api, False))
    assert status == 200


@pytest.mark.parametrize("api", APIS)
async def test_call_budget_refusal(gateway: Gateway, upstream: Upstream, api: str) -> None:
    token = gateway.open_trial("t", "test/up", budget=Budget(max_calls=1))
    assert (await post(gateway, api, token, request_body(api, False)))[0] == 200
    status, body, _ = await post(gateway, api, token, request_body(api, True))
    err = json.loads(body)
    if api == "messages":
        assert status == 402 and err["error"]["type"] == "billing_error"
    else:
        assert status == 429 and err["error"]["code"] == "insufficient_quota"
    assert "budget" in json.dumps(err)
    assert len(upstream.log) == 1  # the refused call never reached the upstream
    meter = gateway.close_trial("t")
    assert meter.budget_exceeded
    assert [c.status_code for c in meter.calls][0] == 200
    assert meter.calls[1].error == "budget_exceeded"


async def test_token_and_usd_budgets(gateway: Gateway) -> None:
    token = gateway.open_trial("tok", "test/up", budget=Budget(max_tokens=10))
    assert (await post(gateway, "chat", token, request_body("chat", False)))[0] == 200
    assert (await post(gateway, "chat", token, request_body("chat", False)))[0] == 429
    assert gateway.close_trial("tok").budget_exceeded
    token = gateway.open_trial("usd", "test/up", budget=Budget(max_usd=1e-9))
    assert (await post(gateway, "responses", token, request_body("responses", False)))[0] == 200
    assert (await post(gateway, "responses", token, request_body("responses", False)))[0] == 429
    meter = gateway.close_trial("usd")
    assert meter.budget_exceeded and meter.cost_usd is not None and meter.cost_usd > 1e-9
    token = gateway.open_trial("ok", "test/up", budget=Budget(max_tokens=10**9, max_usd=100))
    assert (await post(gateway, "messages", token, request_body("messages", False)))[0] == 200
    assert not gateway.close_trial("ok").budget_exceeded


async def test_chat_stream_usage_added_for_metering_and_hidden_from_client(
        gateway: Gateway, upstream: Upstream) -> None:
    token = gateway.open_trial("t", "test/up")
    body = request_body("chat", True)
    del body["stream_options"]
    status, raw, _ = await post(gateway, "chat", token, body)
    assert status == 200
    assert json.loads(upstream.log[-1].body)["stream_options"] == {"include_usage": True}
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert all(json.loads(e)["choices"] for e in events[:-1])  # no usage-only chunk
    call = gateway.close_trial("t").calls[0]
    assert call.usage == sent_usage("chat", upstream.log[-1])


async def test_probes_and_count_tokens(gateway: Gateway) -> None:
    token = gateway.open_trial("t", "test/up")
    async with aiohttp.ClientSession() as s:
        async with s.head(gateway.base_url + "/") as r:
            assert r.status == 200
        async with s.get(gateway.base_url + "/") as r:
            assert r.status == 200
        async with s.get(gateway.base_url + "/v1/models",
                         headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200 and (await r.json())["data"][0]["id"] == "test/up"
        async with s.get(gateway.base_url + "/v1/models") as r:
            assert r.status == 401
        async with s.post(gateway.base_url + "/v1/messages/count_tokens",
                          headers={"x-api-key": token},
                          json=request_body("messages", False)) as r:
            assert r.status == 200 and (await r.json())["input_tokens"] > 0
        async with s.post(gateway.base_url + "/v1/nope", headers={"x-api-key": token}) as r:
            assert r.status == 404
    assert gateway.close_trial("t").calls == []  # probes are not model calls


async def test_unix_socket_and_recorded_bodies(gateway: Gateway, tmp_path: Path) -> None:
    sock = tmp_path / "gw.sock"
    gw = Gateway(gateway.models, gateway.prices, record_bodies_dir=tmp_path / "b")
    await gw.start(unix_socket=sock)
    try:
        token = gw.open_trial("trial:1", "test/up")
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as s:
            for stream in (False, True):
                async with s.post("http://gateway/v1/messages", json=request_body(
                        "messages", stream), headers=headers_for("messages", token)) as r:
                    assert r.status == 200
                    await r.read()
        meter = gw.close_trial("trial:1")
        assert [c.seq for c in meter.calls] == [0, 1]
        files = sorted(p.name for p in (tmp_path / "b" / "trial:1").iterdir())
        assert files == ["00000-request.json", "00000-response.json", "00001-request.json",
                         "00001-response.sse"]
    finally:
        await gw.stop()
    assert not sock.exists()


@pytest.mark.parametrize("case", ["broken-sse", "not-json", "html"])
async def test_upstream_garbage_is_recorded_and_ends_the_trial_as_infra(
        monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Garbage, truncated streams and wrong content types from an upstream: the client gets a
    well-formed answer or a clean 502, every call records what went wrong, and the trial carries
    an infra error (so the runner ends it infra_invalid, a provider fault, not the agent's)."""
    async def garbage(request: web.Request) -> web.StreamResponse:
        await request.read()
        if case == "broken-sse":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b"data: {broken\n\nevent: x\ndata: [1,2]\n\n: comment\n\ndata: ")
            return resp  # ends mid-event, without the API's final event
        if case == "not-json":
            return web.Response(body=b"\x00not json at all", content_type="application/json")
        return web.Response(text="<html><body>502 Bad Gateway (nginx)</body></html>",
                            content_type="text/html")

    app = web.Application()
    for p in PATHS.values():
        app.router.add_post(p, garbage)
    runner, port = await serve(app)
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    models = ModelRegistry({"bad/up": UpstreamModel(
        name="bad/up", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        extra_wire_apis=("messages",), key_env="AGENTMETER_TEST_KEY", price_key="scripted/x")})
    gw = Gateway(models, PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "bad/up")
        for api in APIS:  # responses is translated to chat here
            for stream in (False, True):
                status, body, _ = await post(gw, api, token, request_body(api, stream))
                assert status in (200, 502)
                if status == 502:
                    err = json.loads(body)
                    assert "malformed" in (err["error"]["message"])  # the client's own error shape
        meter = gw.close_trial("t")
        assert len(meter.calls) == 6
        assert all(c.usage == TokenUsage() for c in meter.calls)
        assert all(c.error for c in meter.calls), [c.error for c in meter.calls]
        assert meter.infra_error is not None
    finally:
        await gw.stop()
        await runner.cleanup()


async def test_upstream_error_echoing_the_key_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    async def echo(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization")
        return web.json_response({"error": {"message": f"bad key {auth}",
                                            "type": "invalid_request_error"}}, status=401)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", echo)
    runner, port = await serve(app)
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    models = ModelRegistry({"echo/up": UpstreamModel(
        name="echo/up", base_url=f"http://127.0.0.1:{port}/v1", key_env="AGENTMETER_TEST_KEY",
        price_key="scripted/x")})
    gw = Gateway(models, PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "echo/up")
        status, body, _ = await post(gw, "chat", token, request_body("chat", False))
        assert status == 401 and SECRET.encode() not in body and b"***" in body
        status, body, _ = await post(gw, "messages", token, request_body("messages", False))
        assert status == 401 and SECRET.encode() not in body
        assert json.loads(body)["type"] == "error"  # converted to the client's API shape
    finally:
        await gw.stop()
        await runner.cleanup()


@pytest.mark.parametrize("api", ["chat", "responses"])  # responses: translated chunk by chunk too
async def test_streams_pass_through_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    """The upstream holds back the rest of its stream until the client has seen the first
    event: a gateway that buffered to the end would never deliver it (no timing involved)."""
    import asyncio

    release = asyncio.Event()
    first = (b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
             b'[{"index":0,"delta":{"role":"assistant","content":"FIRSTPART"},"finish_reason":null}]}\n\n')
    rest = (b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
            b'[{"index":0,"delta":{"content":"SECONDPART"},"finish_reason":"stop"}]}\n\n'
            b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[],'
            b'"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n'
            b"data: [DONE]\n\n")

    async def held(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(first)
        await asyncio.wait_for(release.wait(), 30)
        await resp.write(rest)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post(PATHS["chat"], held)
    runner, port = await serve(app)
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    gw = Gateway(ModelRegistry({"held/up": UpstreamModel(
        name="held/up", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        key_env="AGENTMETER_TEST_KEY", price_key="scripted/x")}), PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "held/up")
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + PATHS[api], json=request_body(api, True),
                headers=headers_for(api, token)) as r:
            assert r.status == 200
            seen = b""
            while b"FIRSTPART" not in seen:  # arrives while the upstream is still holding the rest
                seen += await asyncio.wait_for(r.content.readany(), 10)
            assert b"SECONDPART" not in seen
            release.set()
            seen += await r.content.read()
        assert b"SECONDPART" in seen
        (call,) = gw.close_trial("t").calls
        assert call.usage.input == 5 and call.usage.output == 2 and call.error is None
    finally:
        release.set()
        await gw.stop()
        await runner.cleanup()


def test_gateway_serve_meters_any_client(tmp_path: Path) -> None:
    """``agentmeter gateway serve`` on its own: a client pointed at the printed URL and token is
    metered; each call is appended to --out as it happens; Ctrl-C prints the totals."""
    import json
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    from openai import OpenAI
    from polling import eventually

    from agentmeter.records import ModelCallRecord

    out = tmp_path / "calls.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "agentmeter.cli", "gateway", "serve", "-m",
                             "scripted/quitter", "--port", "0", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        banner = "".join(proc.stderr.readline() for _ in range(4))
        m = re.search(r"base URL (http://127\.0\.0\.1:\d+/v1)\s+API key (\S+)", banner)
        assert m, banner
        reply = OpenAI(base_url=m[1], api_key=m[2]).chat.completions.create(
            model="anything", messages=[{"role": "user", "content": "hello"}])
        assert reply.usage is not None
        assert eventually(lambda: out.exists() and out.read_text().count("\n") == 1)
        (row,) = [ModelCallRecord.model_validate_json(line) for line in out.read_text().splitlines()]
        assert row.status_code == 200 and row.scripted
        assert (row.usage.input, row.usage.output) == (reply.usage.prompt_tokens,
                                                       reply.usage.completion_tokens)
        # the Gemini API at the printed Gemini base URL, as the banner says
        g = re.search(r"Gemini-style clients:\s+base URL (\S+)\s+API key (\S+)", banner)
        assert g and g[2] == m[2], banner
        req = urllib.request.Request(
            g[1] + "/v1beta/models/anything:generateContent", headers={
                "x-goog-api-key": g[2], "Content-Type": "application/json"},
            data=json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode())
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req) as r:
            assert json.load(r)["usageMetadata"]["totalTokenCount"] > 0
        assert eventually(lambda: out.read_text().count("\n") == 2)
        bad = OpenAI(base_url=m[1], api_key="am-wrong", max_retries=0)
        with pytest.raises(Exception, match="401"):
            bad.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    finally:
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    assert "2 calls; tokens in=" in rest
