"""OpenCode end to end: the real CLI (npm ``opencode-ai``) installed into a cached layer, run in a real
local sandbox as the ``agent`` user with no network, every model call through the real gateway
with the scripted model (the only test double).

``scripted/solver`` passes, ``scripted/quitter`` fails, and the gateway's usage equals the usage
OpenCode reports itself (its ``step_finish`` tokens), field by field for the fields it reports.
Gemini CLI's parser is checked here on output it really printed (its end-to-end runs are in
test_agents_cli.py's parametrisations).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_agents_cli import (
    FIELDS,
    _assert_solver_passes_quitter_fails,
    _install,
    _run,
    _solve_and_quit,
    _trajectory,
)

import agentmeter
from agentmeter.agents.cli import DEFINITIONS, ParseInput
from agentmeter.agents.registry import agent_names, make_agent
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest
from agentmeter.sandbox.local import LocalBackend

AGENT = "opencode"
#: one task: the scripted solver runs the reference script through the CLI's shell tool, the
#: same path on every task (the other categories run through the CLIs of test_agents_cli.py)
TASKS = ["log-level-counts"]


async def test_opencode_solver_passes_quitter_fails_and_usage_agrees(
        tmp_path: Path, local_backend: LocalBackend) -> None:
    await _install(local_backend, AGENT, TASKS)
    store, rid, trials = await _solve_and_quit(tmp_path, AGENT, TASKS)
    # one step_finish per model call, and no side calls (--title skips the title call)
    solved = _assert_solver_passes_quitter_fails(AGENT, TASKS, "bash", trials)
    names = {a.name for a in store.artifacts(rid, solved.id)}
    assert {"trajectory.json", f"{AGENT}.stdout.log", f"{AGENT}.stderr.log"} <= names
    assert any(n.startswith("native/") and n.endswith("opencode.db") for n in names), names
    traj = _trajectory(store, rid, solved)
    assert traj["version"] == DEFINITIONS[AGENT].spec.default_version
    assert traj["error"] is None and traj["timed_out"] is False
    kinds = [s["kind"] for s in traj["steps"]]
    assert kinds[:2] == ["tool_call", "tool_result"], kinds
    assert "Done" in str(traj["final_message"]) and kinds[-1] == "message", kinds


async def test_opencode_api_error_is_an_agent_error(tmp_path: Path,
                                                   local_backend: LocalBackend) -> None:
    """A wrong key: the gateway refuses the call, OpenCode prints an ``error`` event."""
    task = "log-level-counts"
    await _install(local_backend, AGENT, [task])
    req = RunRequest(suites=["starter"], task_ids=[task], agents=[AGENT],
                     models=["scripted/solver"], max_infra_retries=0,
                     agent_options={AGENT: {"env": {"AGENTMETER_API_KEY": "not-a-trial-token"}}})
    _, _, trials = await _run(tmp_path, req)
    t = trials[f"scripted/solver:{task}"]
    assert t.status is TrialStatus.AGENT_ERROR, t.error
    assert "trial token" in (t.error or ""), t.error
    assert t.model_calls == 0


def test_opencode_is_registered_and_pinnable() -> None:
    assert AGENT in agent_names()
    pinned = make_agent(AGENT, "1.18.0", {})
    assert pinned.version == "1.18.0"
    assert "opencode-ai@1.18.0" in pinned.layers()[-1].source
    runtimes = {make_agent(n).layers()[0].source for n in ("codex", AGENT)}
    assert len(runtimes) == 1


def test_opencode_parser() -> None:
    parse = DEFINITIONS[AGENT].parse
    with pytest.raises(ValueError, match="not"):
        parse(ParseInput("Segmentation fault (core dumped)\n\x00\x01 not json", "", 139, {}))
    empty = parse(ParseInput("", "", 0, {}))
    assert empty.usage is None and not empty.tool_calls and not empty.completed
    stdout = "\n".join([
        '{"type":"step_start","part":{"type":"step-start"}}',
        '{"type":"tool_use","part":{"type":"tool","tool":"read","state":{"status":"completed",'
        '"input":{"filePath":"/w/a.py"},"output":"x = 1"}}}',
        '{"type":"step_finish","part":{"reason":"tool-calls","tokens":{"input":90,"output":5,'
        '"reasoning":2,"cache":{"write":0,"read":10}}}}',
        '{"type":"text","part":{"type":"text","text":"Done."}}',
        '{"type":"step_finish","part":{"reason":"stop","tokens":{"input":7,"output":3,'
        '"reasoning":0,"cache":{"write":0,"read":100}}}}',
    ])
    got = parse(ParseInput(stdout, "", 0, {}))
    assert got.completed and got.final_message == "Done." and got.turns == 2
    assert dict(got.tool_calls) == {"read": 1} and got.files_read == ["/w/a.py"]
    assert got.usage is not None
    # OpenCode's input excludes cache, its output excludes reasoning: both added back
    assert (got.usage.input, got.usage.output, got.usage.cache_read, got.usage.reasoning) == \
        (207, 10, 110, 2)
    err = parse(ParseInput('{"type":"error","error":{"name":"APIError","data":{"message":"boom"}}}',
                           "", 1, {}))
    assert err.cli_error == "APIError: boom" and not err.completed
    assert set(DEFINITIONS[AGENT].spec.reported_usage) <= set(FIELDS)


#: Gemini CLI 0.61.0's stream-json, as printed against a Gemini-speaking server: a shell call,
#: its result, then the answer streamed in two chunks (thought parts are not printed)
GEMINI_RUN = "\n".join([
    '{"type":"init","timestamp":"t","session_id":"s","model":"solver"}',
    '{"type":"message","timestamp":"t","role":"user","content":"say done"}',
    '{"type":"tool_use","timestamp":"t","tool_name":"run_shell_command","tool_id":"c1",'
    '"parameters":{"command":"cat /app/a.log | head -n 3"}}',
    '{"type":"tool_result","timestamp":"t","tool_id":"c1","status":"success","output":"vm"}',
    '{"type":"tool_use","timestamp":"t","tool_name":"read_file","tool_id":"c2",'
    '"parameters":{"file_path":"/app/b.py"}}',
    '{"type":"tool_result","timestamp":"t","tool_id":"c2","status":"error","output":"x",'
    '"error":{"type":"FILE_NOT_FOUND","message":"no such file"}}',
    '{"type":"message","timestamp":"t","role":"assistant","content":"Do","delta":true}',
    '{"type":"message","timestamp":"t","role":"assistant","content":"ne.","delta":true}',
    '{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":335,'
    '"input_tokens":303,"output_tokens":21,"cached":120,"input":183,"duration_ms":232,'
    '"tool_calls":2,"models":{"gemini-2.5-pro":{"total_tokens":224,"input_tokens":202,'
    '"output_tokens":14,"cached":80,"input":122},"gemini-2.5-flash":{"total_tokens":111,'
    '"input_tokens":101,"output_tokens":7,"cached":40,"input":61}}}}',
])


def test_gemini_cli_parser_on_its_real_output() -> None:
    parse = DEFINITIONS["gemini-cli"].parse
    got = parse(ParseInput(GEMINI_RUN, "", 0, {}))
    assert got.completed and got.final_message == "Done." and got.cli_error is None
    # one model reply per turn: the shell call, the read, the answer
    assert got.turns == 3
    assert dict(got.tool_calls) == {"run_shell_command": 1, "read_file": 1}
    assert got.files_read == ["/app/a.log", "/app/b.py"]
    assert [s.kind for s in got.steps] == ["tool_call", "tool_result", "tool_call",
                                           "tool_result", "message"]
    assert got.steps[3].text == "error: no such file"
    assert got.usage is not None
    # summed over models; output = total - prompt (candidates + thoughts), reasoning = thoughts
    assert (got.usage.input, got.usage.output, got.usage.cache_read, got.usage.reasoning,
            got.usage.cache_creation) == (303, 32, 120, 11, None)
    # an API error: the result event says so, with the (zero) stats of the failed request
    failed = parse(ParseInput("\n".join([
        '{"type":"init","timestamp":"t","session_id":"s","model":"solver"}',
        '{"type":"result","timestamp":"t","status":"error","error":{"type":"unknown",'
        '"message":"[API Error: agentmeter budget: max_calls 3 reached]"},"stats":{'
        '"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,'
        '"duration_ms":0,"tool_calls":0,"models":{"solver":{"total_tokens":0,'
        '"input_tokens":0,"output_tokens":0,"cached":0,"input":0}}}}']), "", 173, {}))
    assert not failed.completed and failed.final_message is None
    assert failed.cli_error == "unknown: [API Error: agentmeter budget: max_calls 3 reached]"
    # stopped before any event: the reason is its first stderr line (its help follows)
    early = parse(ParseInput("", "Unknown arguments: such-flag, suchFlag\nUsage: gemini [options]\n"
                             "  -m, --model  The model  [string]", 1, {}))
    assert early.cli_error == "Unknown arguments: such-flag, suchFlag" and early.turns is None
    # no stats: no usage, nothing guessed
    assert parse(ParseInput('{"type":"result","status":"success"}', "", 0, {})).usage is None
    with pytest.raises(ValueError, match="not stream-json"):
        parse(ParseInput("Usage: gemini [options]\n  -m, --model", "", 0, {}))


def test_gemini_cli_is_registered_and_pinnable() -> None:
    assert "gemini-cli" in agent_names()
    pinned = make_agent("gemini-cli", "0.60.1", {})
    assert pinned.version == "0.60.1"
    assert "@google/gemini-cli@0.60.1" in pinned.layers()[-1].source
    assert {make_agent(n).layers()[0].source for n in ("codex", "gemini-cli")} == \
        {make_agent("codex").layers()[0].source}


@pytest.mark.parametrize("agent", ["gemini-cli", "qwen-code"])
async def test_budget_refusal_ends_the_cli_and_keeps_its_logs(
        tmp_path: Path, local_backend: LocalBackend, agent: str) -> None:
    """A task with a one-call budget: the gateway serves the first call and refuses every
    later one (Gemini CLI gets Gemini's 429 RESOURCE_EXHAUSTED; whether a CLI retries a 429 is
    its own choice, so only the harness's guarantee is checked); the harness stops the CLI and
    still keeps its logs, transcript, tool calls and self-reported usage."""
    task = "log-level-counts"
    src = Path(agentmeter.__file__).parent / "tasks" / "suites" / "starter" / task
    shutil.copytree(src, tmp_path / "suite" / task)
    toml = tmp_path / "suite" / task / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", "[agent]\nmax_calls = 1\n", 1))
    await _install(local_backend, agent, [task])
    req = RunRequest(suites=[str(tmp_path / "suite")], agents=[agent],
                     models=["scripted/solver"], max_infra_retries=0)
    store, rid, trials = await _run(tmp_path, req)
    t = trials[f"scripted/solver:{task}"]
    calls = store.model_calls(rid, t.id)
    got = [(c.status_code, c.error) for c in calls]
    assert got[0] == (200, None), got  # the budget's one call is served
    assert len(got) >= 2 and set(got[1:]) == {(429, "budget_exceeded")}, got  # every later one refused
    assert t.model_calls == len(calls) and t.usage.input == calls[0].usage.input
    names = {a.name for a in store.artifacts(rid, t.id)}
    assert {"trajectory.json", f"{agent}.stdout.log"} <= names, names
    assert t.extra["trajectory"]["tool_calls_total"] >= 1, t.extra
    assert _trajectory(store, rid, t)["steps"], "the transcript was lost"
    # the first call's tool run solved the task: the verifier's verdict stands
    assert t.status is TrialStatus.PASSED, (t.status, t.error)


def test_qwen_code_client_retries_are_off() -> None:
    """Qwen Code's own retries (SDK and rate-limit loop) are off: each is a metered call and
    retrying is the gateway's decision (docs/agents.md: 28 requests to a failing upstream
    before, 7 after; the remaining loop has no setting)."""
    import json

    from agentmeter.agents.cli.qwen_code import SPEC
    settings = json.loads(SPEC.files["${home}/.qwen/settings.json"])
    assert settings["model"]["generationConfig"]["maxRetries"] == 0
    # its stream guards (240 s without a chunk, 900 s in all) would drop and re-send a call to
    # a model slow to its first token: the agent timeout decides instead
    assert settings["model"]["generationConfig"]["streamIdleTimeoutMs"] == 0
    assert settings["model"]["generationConfig"]["streamMaxLifetimeMs"] == 0


def test_codex_waits_for_a_slow_first_token() -> None:
    """Codex drops a stream with no SSE event for 300 s by default (its provider setting)."""
    import tomllib

    from agentmeter.agents.cli.codex import CONFIG
    provider = tomllib.loads(CONFIG.replace("${", "{"))["model_providers"]["agentmeter"]
    assert provider["stream_idle_timeout_ms"] >= 3_600_000
    assert provider["stream_max_retries"] == provider["request_max_retries"] == 0
