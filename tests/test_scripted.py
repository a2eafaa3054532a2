"""The scripted offline model: tool choice per client, policies, deterministic tokens, caching."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentmeter.gateway.scripted import Policy, PolicyError, ScriptedModel, heredoc_command
from agentmeter.gateway.scripted.conversation import MINI_SWE_SUBMIT, read
from agentmeter.gateway.scripted.policy import file_command

SCRIPT = """#!/bin/bash
set -e
name='wor"ld'
echo "hello $name" > out.txt
cat <<EOF >> out.txt
nested heredoc $((1 + 2))
EOF
"""


def chat_tool(name: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": required}}}


STR = {"type": "string"}
CLIENT_TOOLS = {  # what each CLI offers, and the argument the scripted model must fill
    "codex-exec": ([chat_tool("write_stdin", {"chars": STR}, ["chars"]),
                    chat_tool("exec_command", {"cmd": STR, "yield_time_ms": {"type": "number"}},
                              ["cmd"])], "exec_command", "cmd"),
    "codex-shell": ([chat_tool("shell", {"command": {"type": "array", "items": STR}},
                               ["command"])], "shell", "command"),
    "claude-code": ([chat_tool("Read", {"file_path": STR}, ["file_path"]),
                     chat_tool("Bash", {"command": STR, "description": STR}, ["command"])],
                    "Bash", "command"),
    "qwen-code": ([chat_tool("run_shell_command", {"command": STR, "is_background": {
        "type": "boolean"}}, ["command", "is_background"])], "run_shell_command", "command"),
    "kimi-cli": ([chat_tool("Shell", {"command": STR}, ["command"])], "Shell", "command"),
    "mini-swe-agent": ([chat_tool("bash", {"command": STR}, ["command"])], "bash", "command"),
    "native": ([chat_tool("run_shell", {"command": STR}, ["command"])], "run_shell", "command"),
}


def chat_request(tools: list[Any] | None, *, results: int = 0,
                 system: str = "You are an agent.") -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system},
                                  {"role": "user", "content": "Solve the task."}]
    for i in range(results):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "x", "arguments": "{}"}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}"})
    body: dict[str, Any] = {"model": "m", "messages": msgs}
    if tools:
        body["tools"] = tools
    return body


def step(policy: str, body: dict[str, Any], api: str = "chat", script: str | None = SCRIPT,
         model: ScriptedModel | None = None, key: str = "k") -> Any:
    engine = model or ScriptedModel()
    return engine.complete(Policy.parse(policy), api, body, cache_key=key,  # type: ignore[arg-type]
                           solution_script=script)


@pytest.mark.parametrize("client", sorted(CLIENT_TOOLS))
def test_solver_uses_the_clients_own_shell_tool(client: str) -> None:
    tools, name, arg = CLIENT_TOOLS[client]
    first = step("solver", chat_request(tools))
    assert first.finish == "tool_calls" and len(first.tool_calls) == 1
    call = first.tool_calls[0]
    assert call.name == name
    args = json.loads(call.arguments)
    command = args[arg]
    if isinstance(command, list):
        assert command[:2] == ["bash", "-lc"]
        command = command[2]
    # Gemini CLI's run_shell_command (shared by Qwen Code) refuses command substitution
    expected = file_command if name == "run_shell_command" else heredoc_command
    assert command == expected(SCRIPT)
    if client == "qwen-code":
        assert args["is_background"] is False
    final = step("solver", chat_request(tools, results=1))
    assert final.tool_calls == [] and final.finish == "stop"
    assert "scripted" in final.text


def test_heredoc_command_runs_the_script_verbatim(tmp_path: Path) -> None:
    subprocess.run(["bash", "-c", heredoc_command(SCRIPT)], cwd=tmp_path, check=True)
    assert (tmp_path / "out.txt").read_text() == 'hello wor"ld\nnested heredoc 3\n'


def test_file_command_runs_the_script_verbatim_without_substitution(tmp_path: Path) -> None:
    """What Gemini CLI's shell tool checks before running a command: no ``$(``, backtick,
    ``<(`` or ``>(`` (the heredoc form has all of the script's, and its own ``$(``)."""
    command = file_command(SCRIPT + "echo \"$(echo sub) `echo tick`\" >> out.txt\n",
                           str(tmp_path / "solution.sh"))
    assert not any(s in command for s in ("$(", "`", "<(", ">("))
    assert "$(" in heredoc_command(SCRIPT)
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True)
    assert (tmp_path / "out.txt").read_text() == 'hello wor"ld\nnested heredoc 3\nsub tick\n'


def test_mini_swe_agent_submits_then_finishes() -> None:
    system = f"When done, run `echo {MINI_SWE_SUBMIT}`."
    tools = CLIENT_TOOLS["mini-swe-agent"][0]
    s1 = step("solver", chat_request(tools, results=1, system=system))
    assert json.loads(s1.tool_calls[0].arguments)["command"] == f"echo {MINI_SWE_SUBMIT}"
    assert step("solver", chat_request(tools, results=2, system=system)).tool_calls == []


def test_text_protocol_uses_a_fenced_bash_block() -> None:
    system = f"Reply with one ```bash block. Finish with echo {MINI_SWE_SUBMIT}."
    body = chat_request(None, system=system)
    s0 = step("solver", body)
    assert s0.tool_calls == [] and f"```bash\n{heredoc_command(SCRIPT)}\n```" in s0.text
    body["messages"] += [{"role": "assistant", "content": s0.text},
                         {"role": "user", "content": "<output>done</output>"}]
    s1 = step("solver", body)
    assert f"```bash\necho {MINI_SWE_SUBMIT}\n```" in s1.text
    body["messages"] += [{"role": "assistant", "content": s1.text},
                         {"role": "user", "content": "ok"}]
    assert "```" not in step("solver", body).text


def messages_request(results: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "look"}]
    for i in range(results):
        msgs.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "ls"}}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": "files"}]})
    return {"model": "m", "max_tokens": 10, "messages": msgs, "tools": [
        {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": STR}}}]}


def test_explorer_reads_for_n_turns_then_gives_up() -> None:
    commands = []
    for i in range(4):
        out = step("explorer-4", messages_request(i), api="messages")
        assert out.finish == "tool_calls"
        commands.append(json.loads(out.tool_calls[0].arguments)["command"])
    assert commands[0].startswith("ls") and any(c.startswith("cat") for c in commands)
    assert len(set(commands)) == 4
    final = step("explorer-4", messages_request(4), api="messages")
    assert final.tool_calls == [] and "giving up" in final.text


def test_quitter_and_solver_without_script_finish_at_once() -> None:
    tools = CLIENT_TOOLS["claude-code"][0]
    assert step("quitter", chat_request(tools)).tool_calls == []
    out = step("solver", chat_request(tools), script=None)
    assert out.tool_calls == [] and "No reference solution" in out.text


def test_responses_input_counts_function_call_outputs() -> None:
    body = {"model": "m", "input": [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "a", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "ok"}],
        "tools": [{"type": "function", "name": "exec_command",
                   "parameters": {"type": "object", "properties": {"cmd": STR}}}]}
    conv = read("responses", body)
    assert conv.tool_results == 1 and conv.tools[0].name == "exec_command"
    assert step("solver", body, api="responses").tool_calls == []


def test_decisions_and_counts_are_deterministic() -> None:
    body = chat_request(CLIENT_TOOLS["kimi-cli"][0])
    assert step("solver", body, key="one") == step("solver", body, key="two")


def test_prefix_cache_simulation() -> None:
    engine = ScriptedModel()
    tools = CLIENT_TOOLS["claude-code"][0]
    first = step("explorer", chat_request(tools), model=engine, key="trial")
    assert first.usage.cache_read == 0
    second = step("explorer", chat_request(tools, results=1), model=engine, key="trial")
    u = second.usage
    assert u.cache_read and u.cache_read > 0 and u.cache_creation is not None
    assert u.input == u.cache_read + u.cache_creation + u.uncached_input
    assert u.uncached_input > 0  # the newest message is not cached
    other = step("explorer", chat_request(tools, results=1), model=engine, key="other-trial")
    assert other.usage.cache_read == 0  # caches are per trial


def test_wire_usage_fields_per_api() -> None:
    engine = ScriptedModel()
    policy = Policy.parse("quitter")
    for api, body in (("chat", chat_request(None)), ("messages", messages_request(1)),
                      ("responses", {"model": "m", "input": "hi"})):
        for _ in range(2):
            reply = engine.respond(policy, api, body, cache_key=api)  # type: ignore[arg-type]
        obj = json.loads(reply.body)
        u = obj["usage"]
        assert obj["model"] == "scripted/quitter"
        if api == "chat":
            assert u["prompt_tokens_details"]["cached_tokens"] > 0
            assert "cache_write_tokens" not in u["prompt_tokens_details"]
        elif api == "responses":
            assert u["input_tokens_details"]["cached_tokens"] > 0
        else:  # input_tokens excludes cached tokens, as Anthropic reports it
            assert u["cache_read_input_tokens"] > 0
            total = read("messages", body).prompt_text
            assert (u["input_tokens"] + u["cache_read_input_tokens"]
                    + u["cache_creation_input_tokens"]) == (len(total) + 3) // 4


def test_policy_names() -> None:
    assert Policy.parse("explorer-12").turns == 12
    assert Policy.parse("explorer-12:7") == Policy("explorer", 12, 7)
    assert Policy.parse("explorer-12:7").label == "explorer-12:7" and Policy.parse("solver").label == "solver"
    for bad in ("explorer-0", "solve", "explorer-x", "explorer:x", "solver:-1"):
        with pytest.raises(PolicyError):
            Policy.parse(bad)


def test_explorer_is_deterministic_for_a_seed() -> None:
    """The same seed replays byte for byte; another seed looks around in another order."""
    tools = CLIENT_TOOLS["native"][0]

    def replies(spec: str) -> list[dict[str, Any]]:
        model = ScriptedModel()
        out = []
        for i in range(6):
            reply = model.respond(Policy.parse(spec), "chat", chat_request(tools, results=i), cache_key="k")
            body = json.loads(b"".join(reply.chunks))
            body.pop("created")  # the wall clock, as the API requires
            out.append(body)
        return out

    def commands(spec: str) -> list[str]:
        return [json.loads(step(spec, chat_request(tools, results=i)).tool_calls[0].arguments)["command"]
                for i in range(6)]

    assert replies("explorer-6:3") == replies("explorer-6:3")
    assert commands("explorer-6:3") == commands("explorer-6:3")
    assert commands("explorer-6:3") != commands("explorer-6:4")
    def looks(spec: str) -> list[str]:
        return sorted(c.split("  # look around")[0] for c in commands(spec))

    assert looks("explorer-6:3") == looks("explorer-6")  # the same looks, reordered
