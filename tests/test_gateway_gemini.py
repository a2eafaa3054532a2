"""Google's Gemini API through the gateway: native, translated both ways, metered, refused.

Upstreams are real local aiohttp servers: the stand-alone scripted model (speaking only chat, or
only Gemini) and a fixed Gemini upstream reporting every usage field.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from test_gateway import SECRET, serve

from agentmeter.gateway import Budget, Gateway, ModelRegistry, ScriptedContext, UpstreamModel
from agentmeter.gateway.scripted.policy import HEREDOC, Policy, file_command
from agentmeter.gateway.scripted.server import Exchange, make_app
from agentmeter.pricing import PriceBook

SCRIPT = "cd /app && sed -i 's/bug/fix/' main.py\necho done\n"
SHELL = {"functionDeclarations": [{
    "name": "run_shell_command", "description": "run a shell command",
    "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}},
                             "required": ["command"]}}]}
PNG = "iVBORw0KGgo="
METHODS = [("generateContent", ""), ("streamGenerateContent", "?alt=sse"),
           ("streamGenerateContent", "")]


async def gemini_call(gw: Gateway, token: str | None, body: dict[str, Any], method: str = "generateContent",
                      query: str = "", headers: dict[str, str] | None = None,
                      ) -> tuple[int, list[dict[str, Any]], aiohttp.ClientResponse]:
    """POST to the gateway's Gemini route; the reply as its response objects (one for a whole
    reply or an error, one per SSE event, or the JSON array's items)."""
    hdrs = dict(headers or {})
    if token is not None and not hdrs and "key=" not in query:
        hdrs["x-goog-api-key"] = token
    url = f"{gw.base_url}/v1beta/models/gemini-2.5-pro:{method}{query}"
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=hdrs) as r:
        raw = await r.read()
    if r.content_type == "text/event-stream":
        objs = [json.loads(line[6:]) for line in raw.decode().splitlines()
                if line.startswith("data: ")]
        assert raw.endswith(b"\r\n\r\n")
    else:
        value = json.loads(raw)
        objs = value if isinstance(value, list) else [value]
        if method == "streamGenerateContent" and r.status == 200:
            assert isinstance(value, list) and r.content_type == "application/json"
    return r.status, objs, r


def parts(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for o in objs for c in o.get("candidates", []) for p in c["content"]["parts"]]


def text_of(objs: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for p in parts(objs) if not p.get("thought"))


def calls_of(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p["functionCall"] for p in parts(objs) if "functionCall" in p]


def prompt(extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]},
            "contents": [{"role": "user", "parts": [{"text": "Fix the bug."}]}, *(extra or [])],
            "tools": [SHELL], "generationConfig": {"temperature": 0, "maxOutputTokens": 900}}


def follow_up(call: dict[str, Any], with_id: bool) -> list[dict[str, Any]]:
    """The CLI's next turn: the model's call as it was received (the id kept or not) and its
    function response (with an id of the CLI's own when the call had none)."""
    sent = {k: v for k, v in call.items() if with_id or k != "id"}
    return [{"role": "model", "parts": [{"functionCall": sent}]},
            {"role": "user", "parts": [{"functionResponse": {
                "id": call["id"] if with_id else "run_shell_command-1700000000-ab",
                "name": call["name"], "response": {"output": "done"}}}]}]


async def two_turns(gw: Gateway, token: str, method: str, query: str,
                    with_id: bool = True) -> list[dict[str, Any]]:
    status, first, _ = await gemini_call(gw, token, prompt(), method, query)
    assert status == 200, first
    calls = calls_of(first)
    assert len(calls) == 1 and calls[0]["name"] == "run_shell_command"
    # run_shell_command refuses command substitution: the solution comes as a file command
    assert calls[0]["args"]["command"] == file_command(SCRIPT), calls[0]["args"]
    assert first[-1]["candidates"][0]["finishReason"] == "STOP"
    status, second, _ = await gemini_call(gw, token, prompt(follow_up(calls[0], with_id)),
                                          method, query)
    assert status == 200 and "Done" in text_of(second), second
    return second


def agrees(meta: dict[str, Any], usage: Any) -> None:
    """The client's usageMetadata is the recorded usage, field by field."""
    assert meta["promptTokenCount"] == usage.input
    assert meta["candidatesTokenCount"] + meta["thoughtsTokenCount"] == usage.output
    assert meta["cachedContentTokenCount"] == (usage.cache_read or 0)
    assert meta["thoughtsTokenCount"] == (usage.reasoning or 0)
    assert meta["totalTokenCount"] == usage.input + usage.output


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(ModelRegistry(), PriceBook())
    await gw.start(port=0)
    yield gw
    await gw.stop()


@pytest.mark.parametrize(("method", "query"), METHODS)
async def test_gemini_client_scripted_native(gateway: Gateway, method: str, query: str) -> None:
    token = gateway.open_trial("t", "scripted/solver", scripted=ScriptedContext(solution_script=SCRIPT))
    second = await two_turns(gateway, token, method, query)
    meter = gateway.close_trial("t")
    assert [(c.client_api, c.wire_api, c.stream) for c in meter.calls] == [
        ("gemini", "gemini", method != "generateContent")] * 2
    agrees(second[-1]["usageMetadata"], meter.calls[1].usage)
    assert (meter.calls[1].usage.cache_read or 0) > 0 and meter.cost_usd is not None


async def test_count_tokens_is_an_estimate_not_a_call(gateway: Gateway) -> None:
    token = gateway.open_trial("t", "scripted/solver")
    status, objs, _ = await gemini_call(gateway, token, {"contents": prompt()["contents"]},
                                        "countTokens")
    assert status == 200 and objs[0]["totalTokens"] > 0
    status, wrapped, _ = await gemini_call(gateway, token, {"generateContentRequest": prompt()},
                                           "countTokens")
    assert wrapped[0]["totalTokens"] > objs[0]["totalTokens"]  # the tools and system count too
    assert gateway.close_trial("t").calls == []


@pytest.mark.parametrize("how", ["header", "query", "bearer"])
async def test_auth_by_goog_header_query_key_or_bearer(gateway: Gateway, how: str) -> None:
    token = gateway.open_trial("t", "scripted/quitter")
    query, headers = "", {}
    if how == "header":
        headers = {"x-goog-api-key": token}
    elif how == "query":
        query = f"?key={token}"
    else:
        headers = {"Authorization": f"Bearer {token}"}
    status, objs, _ = await gemini_call(gateway, None, prompt(), query=query, headers=headers)
    assert status == 200 and "give up" in text_of(objs)
    status, objs, _ = await gemini_call(gateway, None, prompt(), query="?key=am-wrong")
    assert status == 401 and objs[0]["error"]["status"] == "UNAUTHENTICATED"
    assert objs[0]["error"]["code"] == 401
    status, objs, _ = await gemini_call(gateway, None, prompt(), "embedContent",
                                        headers={"x-goog-api-key": token})
    assert status == 404 and objs[0]["error"]["status"] == "NOT_FOUND"
    assert len(gateway.close_trial("t").calls) == 1


@pytest.mark.parametrize(("method", "query"), METHODS)
async def test_budget_refusal_in_gemini_shape(gateway: Gateway, method: str, query: str) -> None:
    token = gateway.open_trial("t", "scripted/quitter", budget=Budget(max_calls=1))
    assert (await gemini_call(gateway, token, prompt(), method, query))[0] == 200
    status, objs, _ = await gemini_call(gateway, token, prompt(), method, query)
    err = objs[0]["error"]
    assert status == 429 and err["code"] == 429 and err["status"] == "RESOURCE_EXHAUSTED"
    assert "agentmeter budget" in err["message"]
    assert err["details"][0]["@type"].endswith("QuotaFailure")
    meter = gateway.close_trial("t")
    assert meter.budget_exceeded and [c.error for c in meter.calls] == [None, "budget_exceeded"]


# -- a Gemini client, a chat-speaking upstream ----------------------------------------------------

@pytest.fixture
async def chat_upstream() -> AsyncIterator[tuple[Gateway, list[Exchange]]]:
    log: list[Exchange] = []
    runner, port = await serve(make_app(Policy("solver"), SCRIPT, apis=("chat",), log=log))
    gw = Gateway(ModelRegistry({"local/chat": UpstreamModel(
        name="local/chat", base_url=f"http://127.0.0.1:{port}/v1", price_key="scripted/x")}),
        PriceBook())
    await gw.start(port=0)
    yield gw, log
    await gw.stop()
    await runner.cleanup()


@pytest.mark.parametrize("with_id", [True, False])
@pytest.mark.parametrize(("method", "query"), METHODS)
async def test_gemini_client_through_chat_upstream(chat_upstream: tuple[Gateway, list[Exchange]],
                                                   method: str, query: str, with_id: bool) -> None:
    gw, log = chat_upstream
    token = gw.open_trial("t", "local/chat")
    second = await two_turns(gw, token, method, query, with_id)
    sent = json.loads(log[-1].body)
    assert log[-1].path == "/v1/chat/completions" and sent["model"] == "chat"
    assert sent.get("stream", False) is (method != "generateContent")
    calls = sent["messages"][2]["tool_calls"]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": calls[0]["id"],
                                   "content": "done"}  # matched by id, or by name
    assert sent["tools"][0]["function"]["name"] == "run_shell_command"
    assert sent["temperature"] == 0 and sent["max_tokens"] == 900
    meter = gw.close_trial("t")
    assert [(c.client_api, c.wire_api) for c in meter.calls] == [("gemini", "chat")] * 2
    agrees(second[-1]["usageMetadata"], meter.calls[1].usage)


async def test_gemini_request_translated_to_chat(chat_upstream: tuple[Gateway, list[Exchange]]) -> None:
    gw, log = chat_upstream
    token = gw.open_trial("t", "local/chat")
    body = {"contents": [
        {"role": "user", "parts": [{"text": "look"}, {"inlineData": {"mimeType": "image/png",
                                                                     "data": PNG}}]},
        {"role": "model", "parts": [{"text": "thinking...", "thought": True}, {"text": "ok"},
                                    {"functionCall": {"name": "ls", "args": {"d": "/"}}},
                                    {"functionCall": {"name": "cat", "args": {"f": "a"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "cat", "response": {"error": "no such file"}}},
            {"functionResponse": {"name": "ls", "response": {"output": "a b"}}}]}],
        "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {
            "type": "OBJECT", "properties": {"d": {"type": "STRING"}}}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}},
        "generationConfig": {"stopSequences": ["END"], "responseMimeType": "application/json"}}
    status, _, _ = await gemini_call(gw, token, body)
    assert status == 200
    sent = json.loads(log[-1].body)
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look"}, {
            "type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "ls", "arguments": json.dumps({"d": "/"})}},
            {"id": "call_1", "type": "function",
             "function": {"name": "cat", "arguments": json.dumps({"f": "a"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"error": "no such file"})},
        {"role": "tool", "tool_call_id": "call_0", "content": "a b"}]
    assert sent["tools"][0]["function"]["parameters"] == {
        "type": "object", "properties": {"d": {"type": "string"}}}
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "ls"}}
    assert sent["stop"] == ["END"] and sent["response_format"] == {"type": "json_object"}
    gw.close_trial("t")


@pytest.mark.parametrize("tool", ["googleSearch", "codeExecution", "urlContext"])
async def test_untranslatable_tool_is_a_gemini_400(chat_upstream: tuple[Gateway, list[Exchange]],
                                                   tool: str) -> None:
    gw, log = chat_upstream
    # a trial allowing provider-run tools (else dropped: tests/test_gateway_abuse.py)
    token = gw.open_trial("t", "local/chat", hosted_tools=True)
    body = dict(prompt(), tools=[SHELL, {tool: {}}])
    status, objs, _ = await gemini_call(gw, token, body, "streamGenerateContent", "?alt=sse")
    err = objs[0]["error"]
    assert status == 400 and err["status"] == "INVALID_ARGUMENT" and err["code"] == 400
    assert tool in err["message"]
    assert log == [] and gw.close_trial("t").calls == []  # never sent, never metered


# -- chat, responses and messages clients, a Gemini-speaking upstream ----------------------------

@pytest.fixture
async def gemini_upstream(monkeypatch: pytest.MonkeyPatch,
                          ) -> AsyncIterator[tuple[Gateway, list[Exchange]]]:
    log: list[Exchange] = []
    runner, port = await serve(make_app(Policy("solver"), SCRIPT, apis=("gemini",), log=log))
    monkeypatch.setenv("AGENTMETER_TEST_KEY", SECRET)
    gw = Gateway(ModelRegistry({"g/up": UpstreamModel(
        name="g/up", base_url=f"http://127.0.0.1:{port}/v1beta", wire_api="gemini",
        key_env="AGENTMETER_TEST_KEY", price_key="scripted/x", upstream_model="gemini-x")}),
        PriceBook())
    await gw.start(port=0)
    yield gw, log
    await gw.stop()
    await runner.cleanup()


def check_gemini_sent(log: list[Exchange], stream: bool) -> dict[str, Any]:
    ex = log[-1]
    want = "streamGenerateContent" if stream else "generateContent"
    assert ex.path == f"/v1beta/models/gemini-x:{want}"
    assert ex.query == ("alt=sse" if stream else "") and SECRET not in ex.query
    assert ex.headers["x-goog-api-key"] == SECRET and "Authorization" not in ex.headers
    sent: dict[str, Any] = json.loads(ex.body)
    assert "model" not in sent and "stream" not in sent and "messages" not in sent
    decls = sent["tools"][0]["functionDeclarations"]
    assert "parametersJsonSchema" in decls[0]
    return sent


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_client_through_gemini_upstream(gemini_upstream: tuple[Gateway, list[Exchange]],
                                                   stream: bool) -> None:
    gw, log = gemini_upstream
    token = gw.open_trial("t", "g/up")
    client = openai.AsyncOpenAI(base_url=gw.base_url + "/v1", api_key=token, max_retries=0)
    tools: Any = [{"type": "function", "function": {
        "name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
    messages: list[Any] = [{"role": "system", "content": "sys"},
                           {"role": "user", "content": "Fix the bug."}]

    async def turn() -> tuple[str, list[Any], Any]:
        if not stream:
            r = await client.chat.completions.create(model="m", messages=messages, tools=tools)
            m = r.choices[0].message
            return m.content or "", [c.model_dump() for c in m.tool_calls or []], r.usage
        text, calls, usage = "", [], None
        async for ch in await client.chat.completions.create(
                model="m", messages=messages, tools=tools, stream=True,
                stream_options={"include_usage": True}):
            usage = ch.usage or usage
            for c in ch.choices:
                text += c.delta.content or ""
                for tc in c.delta.tool_calls or []:  # the first delta has the id and name
                    if tc.id:
                        calls.append(tc.model_dump())
                    else:
                        calls[-1]["function"]["arguments"] += tc.function.arguments
        return text, calls, usage

    _, calls, _ = await turn()
    assert calls[0]["function"]["name"] == "bash" and HEREDOC in calls[0]["function"]["arguments"]
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function", "function": calls[0]["function"]}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "done"}]
    text, _, usage = await turn()
    assert "Done" in text
    sent = check_gemini_sent(log, stream)
    assert sent["systemInstruction"] == {"parts": [{"text": "sys"}]}
    assert [c["role"] for c in sent["contents"]] == ["user", "model", "user"]
    fc = sent["contents"][1]["parts"][0]
    assert fc["functionCall"]["id"] == calls[0]["id"] and "thoughtSignature" in fc
    assert sent["contents"][2]["parts"][0]["functionResponse"] == {
        "id": calls[0]["id"], "name": "bash", "response": {"output": "done"}}
    meter = gw.close_trial("t")
    assert [(c.client_api, c.wire_api) for c in meter.calls] == [("chat", "gemini")] * 2
    rec = meter.calls[1].usage
    assert usage.prompt_tokens == rec.input and usage.completion_tokens == rec.output
    assert usage.prompt_tokens_details.cached_tokens == rec.cache_read and (rec.cache_read or 0) > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_and_messages_clients_through_gemini_upstream(
        gemini_upstream: tuple[Gateway, list[Exchange]], stream: bool) -> None:
    gw, log = gemini_upstream
    token = gw.open_trial("t", "g/up", scripted=ScriptedContext(solution_script=SCRIPT))
    oa = openai.AsyncOpenAI(base_url=gw.base_url + "/v1", api_key=token, max_retries=0)
    tool = {"type": "function", "name": "exec_command", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}}}
    kw: dict[str, Any] = {"model": "m", "input": "Fix the bug.", "tools": [tool]}
    if stream:
        async with oa.responses.stream(**kw) as s:
            r = await s.get_final_response()
    else:
        r = await oa.responses.create(**kw)
    assert r.output[0].type == "function_call" and r.output[0].name == "exec_command"
    check_gemini_sent(log, stream)
    an = anthropic.AsyncAnthropic(base_url=gw.base_url, api_key=token, max_retries=0)
    akw: dict[str, Any] = {"model": "c", "max_tokens": 500, "messages": [
        {"role": "user", "content": "Fix the bug."}], "tools": [{
            "name": "Bash", "input_schema": {"type": "object", "properties": {
                "command": {"type": "string"}}}}]}
    if stream:
        async with an.messages.stream(**akw) as ms:
            m = await ms.get_final_message()
    else:
        m = await an.messages.create(**akw)
    assert m.stop_reason == "tool_use" and m.content[-1].type == "tool_use"
    sent = check_gemini_sent(log, stream)
    assert sent["generationConfig"]["maxOutputTokens"] == 500
    meter = gw.close_trial("t")
    assert [(c.client_api, c.wire_api) for c in meter.calls] == [
        ("responses", "gemini"), ("messages", "gemini")]
    assert r.usage is not None and r.usage.input_tokens == meter.calls[0].usage.input
    assert m.usage.output_tokens == meter.calls[1].usage.output
