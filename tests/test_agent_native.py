"""The native agent against a real local sandbox and a real gateway serving the scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import agentmeter
from agentmeter.agents.base import AgentContext, AgentRun, GatewayEndpoint
from agentmeter.agents.native import NativeAgent, NativeOptions, factory
from agentmeter.agents.native.agent import system_prompt
from agentmeter.agents.native.compaction import SUMMARY_HEADER
from agentmeter.agents.native.messages import TRUNCATION_MARKER, Message, ToolCall
from agentmeter.agents.native.model_client import render
from agentmeter.agents.native.tools import MEMORY_PATH, TOOLS, ToolBox
from agentmeter.gateway import Budget, Gateway, ModelRegistry, ScriptedContext, TrialMeter
from agentmeter.pricing import PriceBook
from agentmeter.records import NATIVE_TRANSCRIPT
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import LayerSpec, SandboxSpec
from agentmeter.tasks.models import Task
from agentmeter.tasks.suite import load_task

STARTER = Path(__file__).resolve().parent.parent / "src/agentmeter/tasks/suites/starter"
APIS = ["chat", "messages"]


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(STARTER / "log-level-counts")


@pytest.fixture
async def sandbox(local_backend: LocalBackend, task: Task) -> AsyncIterator[Sandbox]:
    assert task.dockerfile is not None
    spec = SandboxSpec(layers=(LayerSpec(kind="dockerfile", source=task.dockerfile.read_text(),
                                         origin=str(task.dockerfile),
                                         context=task.environment_dir),))
    sb = await local_backend.start(spec)
    try:
        r = await sb.exec("chown -R agent /app", user="root")
        assert r.ok, r.stderr
        yield sb
    finally:
        await sb.stop()


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(ModelRegistry(), PriceBook(use_genai_prices=False))
    await gw.start(host="127.0.0.1", port=0)
    yield gw
    await gw.stop()


async def run_agent(gw: Gateway, sandbox: Sandbox, task: Task, tmp_path: Path, model: str,
                    *, budget: Budget | None = None, script: str | None = None,
                    timeout_s: float = 120.0, **options: Any) -> tuple[AgentRun, TrialMeter]:
    if script is None and task.solution_script is not None:
        script = task.solution_script.read_text()
    token = gw.open_trial("t1", model, budget=budget,
                          scripted=ScriptedContext(solution_script=script))
    agent = factory(None, options)
    ctx = AgentContext(task=task, sandbox=sandbox, timeout_s=timeout_s, logs_dir=tmp_path / "logs",
                       gateway=GatewayEndpoint(gw.base_url, token, model))
    run = await agent.run(ctx)
    return run, gw.close_trial("t1")


async def reward(sandbox: Sandbox, task: Task) -> float:
    await sandbox.copy_in(task.tests_dir, "/tests")
    r = await sandbox.exec("bash /tests/test.sh", user="root", timeout=120)
    assert r.exit_code == 0, r.stderr
    return float((await sandbox.read_file("/logs/verifier/reward.txt")).decode().strip())


def transcript(run: AgentRun) -> list[dict[str, Any]]:
    path, kind = run.artifacts[NATIVE_TRANSCRIPT]
    assert kind == "transcript"
    value = json.loads(path.read_text())
    assert isinstance(value, list)
    return value


@pytest.mark.parametrize("api", APIS)
async def test_solver_solves_the_task(gateway: Gateway, sandbox: Sandbox, task: Task,
                                      tmp_path: Path, api: str) -> None:
    run, meter = await run_agent(gateway, sandbox, task, tmp_path, "scripted/solver", wire_api=api)
    assert run.error is None and not run.timed_out and run.exit_code == 0
    assert run.tool_calls == {"run_shell": 1}
    assert run.turns == 2 and len(meter.calls) == 2
    assert all(c.client_api == api and c.status_code == 200 for c in meter.calls)
    assert run.final_message and "reference solution" in run.final_message
    assert run.self_reported_usage is not None
    assert run.self_reported_usage.input == meter.usage.input
    assert run.self_reported_usage.output == meter.usage.output
    roles = [m["role"] for m in transcript(run)]
    assert roles == ["user", "system", "assistant", "tool", "assistant"]
    assert await reward(sandbox, task) == 1.0


async def test_quitter_makes_one_call_and_fails(gateway: Gateway, sandbox: Sandbox, task: Task,
                                                tmp_path: Path) -> None:
    run, meter = await run_agent(gateway, sandbox, task, tmp_path, "scripted/quitter")
    assert run.error is None and run.turns == 1 and len(meter.calls) == 1
    assert run.tool_calls == {} and run.final_message and "give up" in run.final_message
    assert await reward(sandbox, task) == 0.0


@pytest.mark.parametrize("api", APIS)
async def test_explorer_looks_around_then_gives_up(gateway: Gateway, sandbox: Sandbox,
                                                   task: Task, tmp_path: Path, api: str) -> None:
    run, meter = await run_agent(gateway, sandbox, task, tmp_path, "scripted/explorer-4",
                                 wire_api=api)
    assert run.error is None and run.turns == 5 and len(meter.calls) == 5
    assert run.tool_calls == {"run_shell": 4}
    outputs = [m["content"] for m in transcript(run) if m["role"] == "tool"]
    assert "server.log" in outputs[0] and outputs[0].endswith("[exit code 0]")
    assert await reward(sandbox, task) == 0.0


@pytest.mark.parametrize("api", APIS)
async def test_budget_refusal_stops_the_agent(gateway: Gateway, sandbox: Sandbox, task: Task,
                                              tmp_path: Path, api: str) -> None:
    run, meter = await run_agent(gateway, sandbox, task, tmp_path, "scripted/explorer",
                                 budget=Budget(max_calls=2), wire_api=api)
    assert run.error == "budget_exceeded" and run.turns == 2
    assert meter.budget_exceeded and [c.error for c in meter.calls][-1] == "budget_exceeded"
    assert transcript(run)[-1]["event"] == "model_error"


async def test_other_gateway_errors_stop_with_a_description(gateway: Gateway, sandbox: Sandbox,
                                                            task: Task, tmp_path: Path) -> None:
    wrong_token = GatewayEndpoint(gateway.base_url, "am-not-a-trial", "scripted/solver")
    ctx = AgentContext(task=task, sandbox=sandbox, timeout_s=60, logs_dir=tmp_path,
                       gateway=wrong_token)
    run = await NativeAgent().run(ctx)
    assert run.error is not None and "HTTP 401" in run.error and run.turns == 0
    gone = AgentContext(task=task, sandbox=sandbox, timeout_s=60, logs_dir=tmp_path,
                        gateway=GatewayEndpoint("http://127.0.0.1:9", "am-x", "scripted/solver"))
    run = await NativeAgent().run(gone)
    assert run.error is not None and run.error.startswith("model call failed")


async def test_compaction_elides_old_outputs_and_the_run_completes(
        gateway: Gateway, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
    # uncompacted, this explorer's prompt grows to ~7700 tokens (two `cat`s of server.log)
    limit = 7000 * 0.75
    run, meter = await run_agent(gateway, sandbox, task, tmp_path, "scripted/explorer-12",
                                 context_window=7000, keep_recent_turns=2)
    assert run.error is None and run.turns == 13  # old results stay (elided), so it counts 12
    assert run.final_message and "giving up" in run.final_message
    events = [m for m in transcript(run) if m["role"] == "event"]
    assert [e["event"] for e in events] == ["compaction"]
    assert "elided" in events[0]["content"] and "dropped" not in events[0]["content"]
    prompts = [c.usage.input or 0 for c in meter.calls]
    assert max(prompts) <= limit  # the scripted model counts characters / 4, as we estimate


async def test_compaction_drops_turns_with_a_tiny_window(
        gateway: Gateway, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
    run, meter = await run_agent(gateway, sandbox, task, tmp_path, "scripted/explorer-8",
                                 wire_api="messages", context_window=1500, keep_recent_turns=2,
                                 max_turns=12)
    # dropped turns hide results from the explorer, so it explores until max_turns
    assert run.error is None and not run.timed_out and run.turns == 12 == len(meter.calls)
    assert all(c.status_code == 200 for c in meter.calls)
    assert max(c.usage.input or 0 for c in meter.calls) <= 1500
    notes = [m["content"] for m in transcript(run) if m["role"] == "event"]
    assert any("dropped" in n for n in notes) and notes[-1].startswith("stopped after 12")


async def test_timeout_returns_timed_out(gateway: Gateway, sandbox: Sandbox, task: Task,
                                         tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    run, _ = await run_agent(gateway, sandbox, task, tmp_path, "scripted/solver",
                             script="sleep 60", timeout_s=1.5)
    assert run.timed_out and run.error is None and run.exit_code is None
    assert loop.time() - started < 30
    assert transcript(run)[-1]["event"] == "timeout"


async def test_tool_errors_come_back_as_text(sandbox: Sandbox) -> None:
    tools = ToolBox(sandbox, "/app", max_output_chars=2000, shell_timeout_s=30)

    async def call(name: str, **args: Any) -> str:
        return await tools.run(ToolCall("c", name, args))

    assert (await call("read_file", path="missing.txt")).startswith("error: no such file")
    assert "wrote" in await call("write_file", path="sub/a.txt", content="x = 1\nx = 1\n")
    assert "2 times" in await call("edit_file", path="sub/a.txt", old_string="x = 1",
                                   new_string="y")
    assert "not found" in await call("edit_file", path="sub/a.txt", old_string="zzz",
                                     new_string="y")
    assert await call("edit_file", path="sub/a.txt", old_string="x = 1\nx", new_string="z") \
        == "edited sub/a.txt"
    assert await call("read_file", path="/app/sub/a.txt") == "z = 1\n"
    owner = await sandbox.exec("stat -c %U /app/sub/a.txt")
    assert owner.stdout.strip() == "agent"
    assert "Permission denied" in await call("write_file", path="/etc/passwd", content="")
    assert "server.log" in await call("list_dir")
    assert "sub/a.txt:1:z = 1" in await call("search_files", pattern="^z =")
    assert await call("search_files", pattern="no-such-text-anywhere") == "no matches"
    assert "required" in await call("read_file")
    assert (await call("no_such_tool")).startswith("error: unknown tool")
    bad = await tools.run(ToolCall("c", "run_shell", {}, parse_error="invalid JSON"))
    assert bad.startswith("error: could not parse")
    long = await call("run_shell", command="seq 1 100000; echo oops >&2; exit 3")
    assert len(long) <= 2000 and long.startswith("1\n2\n") and long.endswith("[exit code 3]")
    assert TRUNCATION_MARKER.split("{")[0] in long
    slow = await call("run_shell", command="sleep 5", timeout=0.5)
    assert "timed out" in slow


async def test_memory_bank_reaches_the_system_prompt(sandbox: Sandbox) -> None:
    tools = ToolBox(sandbox, "/app", max_output_chars=2000, shell_timeout_s=30)
    assert await tools.read_memory() == ""
    await tools.run(ToolCall("c", "update_memory", {"content": "plan: count levels"}))
    await tools.run(ToolCall("c", "update_memory", {"content": "found: 5 levels"}))
    assert await tools.read_memory() == "plan: count levels\nfound: 5 levels\n"
    await tools.run(ToolCall("c", "update_memory", {"content": "only this", "mode": "replace"}))
    memory = await tools.read_memory()
    assert memory == "only this\n"
    assert (await sandbox.exec(f"stat -c %U {MEMORY_PATH}")).stdout.strip() == "agent"
    assert system_prompt("/app", memory).endswith(f"## Memory bank ({MEMORY_PATH})\nonly this")
    assert "Memory bank" not in system_prompt("/app", "")


def test_messages_wire_alternates_roles() -> None:
    convo = [Message("user", "do it"),
             Message("assistant", "", [ToolCall("a", "list_dir", {}), ToolCall("b", "x", {})]),
             Message("tool", "out a", tool_call_id="a", name="list_dir"),
             Message("tool", "out b", tool_call_id="b", name="x"),
             Message("user", f"{SUMMARY_HEADER}\n- note")]
    body = render("messages", "m", "sys", convo, TOOLS, max_tokens=10, temperature=None)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in body["messages"][2]["content"]] == ["tool_result", "tool_result",
                                                                   "text"]
    assert body["max_tokens"] == 10
    chat = render("chat", "m", "sys", convo, TOOLS, max_tokens=None, temperature=0.0)
    assert "max_tokens" not in chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool",
                                                     "tool", "user"]
    assert chat["messages"][2]["content"] is None and chat["temperature"] == 0.0


def test_factory_validates_options() -> None:
    agent = factory("1", {"wire_api": "messages", "max_turns": 3})
    assert agent.options == NativeOptions(wire_api="messages", max_turns=3)
    assert agent.version == "1" and agent.uses_model and agent.layers() == []
    assert factory(None, {}).version == agentmeter.__version__
    with pytest.raises(ValueError, match="native agent options: wire_api"):
        factory(None, {"wire_api": "responses"})
    with pytest.raises(ValueError, match="bogus"):
        factory(None, {"bogus": 1})
