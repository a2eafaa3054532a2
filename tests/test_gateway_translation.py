"""Responses-API and Messages-API clients (the official SDKs) served by chat-only upstreams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from agentmeter.gateway import Gateway, ModelRegistry, ScriptedContext, UpstreamModel
from agentmeter.gateway.scripted.policy import HEREDOC, Policy
from agentmeter.gateway.scripted.server import Exchange, make_app
from agentmeter.pricing import PriceBook

SCRIPT = "cd /app && sed -i 's/bug/fix/' main.py\necho done\n"
EXEC_TOOL = {"type": "function", "name": "exec_command", "description": "run a command",
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                            "required": ["cmd"]}}
BASH_TOOL = {"name": "Bash", "description": "run bash", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"},
                                     "description": {"type": "string"}},
    "required": ["command"]}}


@pytest.fixture
async def chat_only_upstream() -> AsyncIterator[tuple[int, list[Exchange]]]:
    log: list[Exchange] = []
    runner = web.AppRunner(make_app(Policy("solver"), SCRIPT, apis=("chat",), log=log))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1], log  # type: ignore[union-attr]
    await runner.cleanup()


@pytest.fixture
async def gateway(chat_only_upstream: tuple[int, list[Exchange]]) -> AsyncIterator[Gateway]:
    port, _ = chat_only_upstream
    models = ModelRegistry({"local/chat-only": UpstreamModel(
        name="local/chat-only", base_url=f"http://127.0.0.1:{port}/v1", wire_api="chat",
        price_key="scripted/x")})
    gw = Gateway(models, PriceBook())
    await gw.start(port=0)
    yield gw
    await gw.stop()


def openai_client(gw: Gateway, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url + "/v1", api_key=token, max_retries=0)


def anthropic_client(gw: Gateway, token: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.base_url, api_key=token, max_retries=0)


async def responses_turn(client: openai.AsyncOpenAI, stream: bool, items: list[Any]) -> Any:
    kw: dict[str, Any] = {"model": "gpt-5-codex", "instructions": "You are Codex.",
                          "input": items, "tools": [EXEC_TOOL]}
    if not stream:
        return await client.responses.create(**kw)
    async with client.responses.stream(**kw) as s:
        kinds = [ev.type async for ev in s]
        final = await s.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    return final


@pytest.mark.parametrize("model", ["scripted-chat/solver", "local/chat-only"])
@pytest.mark.parametrize("stream", [False, True])
async def test_responses_client_through_chat_upstream(gateway: Gateway, stream: bool,
                                                      model: str) -> None:
    token = gateway.open_trial("t", model, scripted=ScriptedContext(solution_script=SCRIPT))
    client = openai_client(gateway, token)
    items: list[Any] = [{"role": "user", "content": "Fix the bug."}]
    first = await responses_turn(client, stream, items)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "exec_command"
    cmd = json.loads(calls[0].arguments)["cmd"]
    assert HEREDOC in cmd and "sed -i 's/bug/fix/' main.py" in cmd
    items += [{"type": "function_call", "call_id": calls[0].call_id, "name": "exec_command",
               "arguments": calls[0].arguments},
              {"type": "function_call_output", "call_id": calls[0].call_id, "output": "done"}]
    second = await responses_turn(client, stream, items)
    assert "Done" in second.output_text and "scripted" in second.output_text
    assert second.usage is not None and second.usage.input_tokens > 0
    meter = gateway.close_trial("t")
    assert [(c.client_api, c.wire_api) for c in meter.calls] == [("responses", "chat")] * 2
    assert second.usage.input_tokens == meter.calls[1].usage.input
    assert second.usage.output_tokens == meter.calls[1].usage.output
    assert second.usage.input_tokens_details.cached_tokens == meter.calls[1].usage.cache_read
    assert (meter.calls[1].usage.cache_read or 0) > 0
    assert all(c.scripted is model.startswith("scripted") for c in meter.calls)


async def messages_turn(client: anthropic.AsyncAnthropic, stream: bool,
                        messages: list[Any]) -> Any:
    kw: dict[str, Any] = {"model": "claude-client-name", "max_tokens": 4096,
                          "system": "You are Claude Code.", "messages": messages,
                          "tools": [BASH_TOOL]}
    if not stream:
        return await client.messages.create(**kw)
    async with client.messages.stream(**kw) as s:
        kinds = [ev.type async for ev in s]
        final = await s.get_final_message()
    assert kinds[0] == "message_start" and "message_stop" in kinds
    return final


@pytest.mark.parametrize("model", ["scripted-chat/solver", "local/chat-only"])
@pytest.mark.parametrize("stream", [False, True])
async def test_messages_client_through_chat_upstream(gateway: Gateway, stream: bool,
                                                     model: str) -> None:
    token = gateway.open_trial("t", model, scripted=ScriptedContext(solution_script=SCRIPT))
    client = anthropic_client(gateway, token)
    messages: list[Any] = [{"role": "user", "content": "Fix the bug."}]
    first = await messages_turn(client, stream, messages)
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "Bash"
    assert HEREDOC in uses[0].input["command"]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                   for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                               "content": "done"}]}]
    second = await messages_turn(client, stream, messages)
    assert second.stop_reason == "end_turn"
    assert "Done" in second.content[0].text
    meter = gateway.close_trial("t")
    assert [(c.client_api, c.wire_api) for c in meter.calls] == [("messages", "chat")] * 2
    rec = meter.calls[1].usage
    u = second.usage
    assert u.input_tokens + (u.cache_read_input_tokens or 0) == rec.input
    assert u.cache_read_input_tokens == rec.cache_read and (rec.cache_read or 0) > 0
    assert u.output_tokens == rec.output


async def test_translated_request_shape(gateway: Gateway,
                                        chat_only_upstream: tuple[int, list[Exchange]]) -> None:
    """What a chat-only upstream receives for a Messages request with tool traffic."""
    _, log = chat_only_upstream
    token = gateway.open_trial("t", "local/chat-only")
    client = anthropic_client(gateway, token)
    await client.messages.create(
        model="claude", max_tokens=50, system=[{"type": "text", "text": "sys"}],
        tool_choice={"type": "any"}, tools=[BASH_TOOL], stop_sequences=["STOP"],
        messages=[{"role": "user", "content": "go"},
                  {"role": "assistant", "content": [
                      {"type": "text", "text": "ok"},
                      {"type": "tool_use", "id": "tu1", "name": "Bash",
                       "input": {"command": "ls"}}]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "tu1", "content": "a.txt"},
                      {"type": "text", "text": "continue"}]}])
    sent = json.loads(log[-1].body)
    assert sent["model"] == "chat-only"
    assert sent["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "tu1", "type": "function",
             "function": {"name": "Bash", "arguments": json.dumps({"command": "ls"})}}]},
        {"role": "tool", "tool_call_id": "tu1", "content": "a.txt"},
        {"role": "user", "content": "continue"}]
    assert sent["tools"][0]["function"]["name"] == "Bash"
    assert sent["tool_choice"] == "required" and sent["stop"] == ["STOP"]
    assert sent["max_tokens"] == 50
    gateway.close_trial("t")


async def test_translated_errors_use_the_client_shape() -> None:
    async def reject(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "context too long", "type":
                                            "invalid_request_error", "code": None}}, status=400)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reject)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    gw = Gateway(ModelRegistry({"r/m": UpstreamModel(
        name="r/m", base_url=f"http://127.0.0.1:{port}/v1", price_key="scripted/x")}),
        PriceBook())
    await gw.start(port=0)
    try:
        token = gw.open_trial("t", "r/m")
        with pytest.raises(anthropic.BadRequestError) as a_err:
            await anthropic_client(gw, token).messages.create(
                model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert a_err.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert "context too long" in str(a_err.value)
        with pytest.raises(openai.BadRequestError) as o_err:
            await openai_client(gw, token).responses.create(model="c", input="x")
        assert "context too long" in str(o_err.value)
        assert [c.status_code for c in gw.close_trial("t").calls] == [400, 400]
    finally:
        await gw.stop()
        await runner.cleanup()
