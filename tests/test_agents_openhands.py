"""OpenHands end to end: the real SDK and tools (PyPI ``openhands-sdk`` + ``openhands-tools``)
installed into a cached layer, run in a real local sandbox as the ``agent`` user with no network,
every model call through the real gateway with the scripted model (the only test double).

``scripted/solver`` passes, ``scripted/quitter`` fails, and the gateway's usage equals the usage
OpenHands records itself (its persisted conversation stats), field by field for the fields it
reports; a refused model call is an agent error naming the gateway's reason.
"""

from __future__ import annotations

import json
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

from agentmeter.agents.cli import DEFINITIONS, ParseInput
from agentmeter.agents.registry import agent_names, make_agent
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest
from agentmeter.sandbox.local import LocalBackend

AGENT = "openhands"
#: one task: the scripted solver runs the reference script through the CLI's shell tool, the
#: same path on every task (the other categories run through the CLIs of test_agents_cli.py)
TASKS = ["log-level-counts"]


async def test_openhands_solver_passes_quitter_fails_and_usage_agrees(
        tmp_path: Path, local_backend: LocalBackend) -> None:
    await _install(local_backend, AGENT, TASKS)
    store, rid, trials = await _solve_and_quit(tmp_path, AGENT, TASKS)
    # one model call per agent step, no side calls (the condenser is not triggered)
    solved = _assert_solver_passes_quitter_fails(AGENT, TASKS, "terminal", trials)
    names = {a.name for a in store.artifacts(rid, solved.id)}
    assert {"trajectory.json", f"{AGENT}.stdout.log", f"{AGENT}.stderr.log"} <= names
    assert any(n.startswith("native/") and n.endswith("base_state.json") for n in names), names
    traj = _trajectory(store, rid, solved)
    assert traj["version"] == DEFINITIONS[AGENT].spec.default_version
    assert traj["error"] is None and traj["timed_out"] is False
    kinds = [s["kind"] for s in traj["steps"]]
    assert kinds[:2] == ["tool_call", "tool_result"], kinds
    assert "Done" in str(traj["final_message"]) and kinds[-1] == "message", kinds


async def test_openhands_refused_model_call_is_an_agent_error(
        tmp_path: Path, local_backend: LocalBackend) -> None:
    """A wrong key: the gateway refuses the call; the SDK records a conversation error."""
    task = "log-level-counts"
    await _install(local_backend, AGENT, [task])
    req = RunRequest(suites=["starter"], task_ids=[task], agents=[AGENT],
                     models=["scripted/solver"], max_infra_retries=0,
                     agent_options={AGENT: {"env": {"LLM_API_KEY": "not-a-trial-token"}}})
    _, _, trials = await _run(tmp_path, req)
    t = trials[f"scripted/solver:{task}"]
    assert t.status is TrialStatus.AGENT_ERROR, t.error
    assert "trial token" in (t.error or ""), t.error
    assert t.model_calls == 0


def test_openhands_is_registered_and_pins_sdk_and_tools_together() -> None:
    assert AGENT in agent_names()
    pinned = make_agent(AGENT, "1.57.0", {})
    assert pinned.version == "1.57.0"
    source = pinned.layers()[-1].source
    assert "'openhands-sdk==1.57.0'" in source and "'openhands-tools==1.57.0'" in source
    runtimes = {make_agent(n).layers()[0].source for n in ("mini-swe-agent", AGENT)}
    assert len(runtimes) == 1  # one shared Python runtime layer


def _event(n: int, body: dict[str, object]) -> tuple[str, str]:
    return f"/s/conversations/c1/events/event-{n:05d}-x.json", json.dumps(body)


def test_openhands_parser() -> None:
    parse = DEFINITIONS[AGENT].parse
    empty = parse(ParseInput("Segmentation fault\n\x00", "", 139, {}))
    assert empty.cli_error is None and empty.usage is None and not empty.completed
    early = parse(ParseInput('{"agentmeter_openhands": "idle", "error": "ImportError: x"}',
                             "", 1, {}))
    assert early.cli_error == "ImportError: x" and not early.completed
    with pytest.raises(ValueError):
        parse(ParseInput("", "", 0, {"/s/conversations/c1/base_state.json": "[1, 2"}))
    with pytest.raises(ValueError, match="not a JSON object"):
        parse(ParseInput("", "", 0, {"/s/conversations/c1/events/event-00000-x.json": "[]"}))
    usage = {"prompt_tokens": 100, "completion_tokens": 7, "cache_read_tokens": 40,
             "cache_write_tokens": 0, "reasoning_tokens": 0}
    state = {"execution_status": "finished", "stats": {"usage_to_metrics": {
        "agent": {"accumulated_token_usage": usage},
        "condenser": {"accumulated_token_usage": dict(usage, prompt_tokens=10)}}}}
    view = json.dumps({"command": "view", "path": "/w/a.py"})
    files = dict([
        _event(0, {"kind": "SystemPromptEvent", "source": "agent"}),
        _event(1, {"kind": "MessageEvent", "source": "user",
                   "llm_message": {"content": [{"type": "text", "text": "do it"}]}}),
        _event(2, {"kind": "ActionEvent", "source": "agent", "llm_response_id": "r1",
                   "tool_name": "terminal", "thought": [],
                   "tool_call": {"arguments": json.dumps({"command": "cat notes.txt"})}}),
        _event(3, {"kind": "ObservationEvent", "source": "environment",
                   "observation": {"content": [{"type": "text", "text": "hello"}]}}),
        _event(4, {"kind": "ActionEvent", "source": "agent", "llm_response_id": "r2",
                   "tool_name": "file_editor", "thought": [{"type": "text", "text": "look"}],
                   "tool_call": {"arguments": view}}),
        _event(5, {"kind": "AgentErrorEvent", "source": "agent", "error": "no such file"}),
        _event(6, {"kind": "MessageEvent", "source": "agent", "llm_response_id": "r3",
                   "llm_message": {"content": [{"type": "text", "text": "Done."}]}}),
    ]) | {"/s/conversations/c1/base_state.json": json.dumps(state)}
    got = parse(ParseInput("", "", 0, files))
    assert got.completed and got.final_message == "Done." and got.turns == 3
    assert dict(got.tool_calls) == {"terminal": 1, "file_editor": 1}
    assert got.files_read == ["notes.txt", "/w/a.py"]
    assert [s.kind for s in got.steps] == ["tool_call", "tool_result", "message", "tool_call",
                                           "tool_result", "message"]
    assert got.usage is not None and (got.usage.input, got.usage.output, got.usage.cache_read) \
        == (110, 14, 80)
    failed = dict(files) | dict([_event(7, {"kind": "ConversationErrorEvent", "code": "LLMError",
                                            "detail": "refused"})])
    failed["/s/conversations/c1/base_state.json"] = json.dumps({"execution_status": "error"})
    bad = parse(ParseInput("", "", 1, failed))
    assert not bad.completed and bad.final_message is None
    assert bad.cli_error == "LLMError: refused"
    assert set(DEFINITIONS[AGENT].spec.reported_usage) <= set(FIELDS)
