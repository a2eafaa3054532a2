"""Installed agent CLIs end to end: the real CLIs (npm / PyPI) installed into cached layers, run in
real local sandboxes as the ``agent`` user, every model call through the real gateway. The only
test double is the scripted model behind the gateway (``scripted/*``).

For each CLI: ``scripted/solver`` passes starter tasks of several categories (codex: all seven) and
``scripted/quitter`` fails one; the gateway's usage (the truth) equals the usage the CLI reports
itself, field by field for the fields it reports; Responses/Messages clients also work through
the gateway's Chat Completions translation; crashes, garbage output and timeouts are classified.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from taskgen import make_task

from agentmeter.agents.cli import DEFINITIONS, ParseInput
from agentmeter.agents.registry import make_agent
from agentmeter.records import TokenUsage, TrialRecord, TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.runner.tasksandbox import sandbox_spec
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import LayerBuildError
from agentmeter.store.db import Store
from agentmeter.tasks.suite import load_suites

STARTER = Path(__file__).resolve().parent.parent / "src/agentmeter/tasks/suites/starter"
#: one starter task per category
CATEGORIES = ["log-level-counts", "sort-inbox-by-extension", "csv-top-customers",
              "git-restore-deleted-file", "fix-pagination-bug", "fix-makefile-link-error",
              "todo-cli-new-commands"]
FEW = ["log-level-counts", "git-restore-deleted-file", "fix-pagination-bug"]
#: every category once (codex, the reference CLI); the others on three categories, which exercise
#: the same CLI paths (reading, writing and running files) at a third of the suite's time
TASKS = {"codex": CATEGORIES, "claude-code": FEW, "qwen-code": FEW,
         "gemini-cli": FEW, "kimi": FEW, "mini-swe-agent": FEW}
#: the shell tool each CLI offers the model (what scripted/solver calls)
SHELL_TOOL = {"codex": "exec_command", "claude-code": "Bash", "qwen-code": "run_shell_command",
              "gemini-cli": "run_shell_command", "kimi": "Shell", "mini-swe-agent": "bash"}
FIELDS = ("input", "output", "cache_creation", "cache_read", "reasoning")

_OFFLINE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|"
                      r"Temporary failure in name resolution|Network is unreachable|"
                      r"Temporary failure resolving|Failed to establish a new connection|"
                      r"Could not resolve|Could not fetch URL|SELF_SIGNED_CERT_IN_CHAIN")


async def _install(backend: LocalBackend, agent_name: str, tasks: list[str],
                   suite: str = "starter") -> None:
    """Build (or find cached) the CLI's layers on each task; skip if the registry is unreachable."""
    agent = make_agent(agent_name)
    by_id = {t.id: t for t in load_suites([suite]).select(None, tasks)}
    for task_id in tasks:
        try:
            await backend.prepare(sandbox_spec(by_id[task_id], agent, None))
        except LayerBuildError as e:
            if _OFFLINE.search(str(e)):
                print(f"skipping: the package registry is unreachable: {e}")
                pytest.skip(f"{agent_name}: package registry unreachable for the install")
            raise


async def _run(tmp_path: Path, req: RunRequest) -> tuple[Store, str, dict[str, TrialRecord]]:
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(req))
    labels = {c.id: c.model.name for c in store.run_configs(rid)}
    trials = {f"{labels[t.config_id]}:{t.task_id}": t for t in store.latest_completed_trials(rid)}
    return store, rid, trials


async def _solve_and_quit(tmp_path: Path, agent: str,
                          tasks: list[str]) -> tuple[Store, str, dict[str, TrialRecord]]:
    """``scripted/solver`` on every task, ``scripted/quitter`` on the first only (one run when
    that is the only task). Keyed ``model:task``; the store and run are the solver's.

    The quitter gives up at once, so its trial is the same on every task (the CLI starts, makes
    one call, ends; the untouched workspace fails): one per CLI proves it. That every category's
    verifier fails an untouched workspace is test_runner's starter run (nop and the native
    agent's quitter on one task per category)."""
    if len(tasks) == 1:
        return await _run(tmp_path, RunRequest(
            suites=["starter"], task_ids=tasks, agents=[agent], concurrency=2,
            models=["scripted/solver", "scripted/quitter"], max_infra_retries=0))
    store, rid, trials = await _run(tmp_path, RunRequest(
        suites=["starter"], task_ids=tasks, agents=[agent], models=["scripted/solver"],
        concurrency=2, max_infra_retries=0))
    _, _, quit_ = await _run(tmp_path, RunRequest(
        suites=["starter"], task_ids=tasks[:1], agents=[agent], models=["scripted/quitter"],
        max_infra_retries=0))
    return store, rid, trials | quit_


def _self_reported(t: TrialRecord) -> TokenUsage:
    raw = t.extra.get("self_reported_usage")
    assert raw is not None, f"{t.id}: the CLI reported no usage"
    return TokenUsage.model_validate(raw)


def _assert_accounting(agent: str, t: TrialRecord, *, translated: bool = False) -> None:
    """Gateway usage == the CLI's own, for each field the CLI reports. Through translation the
    client's wire API may show 0 where the upstream reported nothing (None)."""
    reported = DEFINITIONS[agent].spec.reported_usage
    mine = _self_reported(t)
    for f in FIELDS:
        gw, own = getattr(t.usage, f), getattr(mine, f)
        if f in reported:
            if translated:
                gw, own = gw or 0, own or 0
            assert own == gw, f"{agent} {t.task_id}: {f}: gateway {gw} != self-reported {own}"
    assert t.usage.input and t.usage.output, t.usage


def _assert_solver_passes_quitter_fails(agent: str, tasks: list[str], shell_tool: str,
                                         trials: dict[str, TrialRecord]) -> TrialRecord:
    """scripted/solver passed every task with the shell tool, one model call per turn and no
    side calls; scripted/quitter failed the first (:func:`_solve_and_quit`) with one call and no
    tool; both accounted as the gateway metered. Returns the last solved trial."""
    assert len(trials) == len(tasks) + 1
    for task in tasks:
        solved = trials[f"scripted/solver:{task}"]
        assert solved.status is TrialStatus.PASSED, (task, solved.error)
        assert solved.tool_calls.get(shell_tool, 0) >= 1, solved.tool_calls
        assert solved.model_calls >= 2 and solved.turns == solved.model_calls
        _assert_accounting(agent, solved)
    quit_ = trials[f"scripted/quitter:{tasks[0]}"]
    assert quit_.status is TrialStatus.FAILED and quit_.error is None, (tasks[0], quit_.error)
    assert quit_.model_calls == 1 and not quit_.tool_calls, quit_.tool_calls
    _assert_accounting(agent, quit_)
    return solved


def _trajectory(store: Store, rid: str, t: TrialRecord) -> dict[str, Any]:
    art = next(a for a in store.artifacts(rid, t.id) if a.name == "trajectory.json")
    data = json.loads((store.run_dir(rid) / art.relpath).read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("agent", list(TASKS))
async def test_solver_passes_quitter_fails_and_usage_agrees(
        agent: str, tmp_path: Path, local_backend: LocalBackend) -> None:
    tasks = TASKS[agent]
    await _install(local_backend, agent, tasks)
    store, rid, trials = await _solve_and_quit(tmp_path, agent, tasks)
    assert len(trials) == len(tasks) + 1
    for task in tasks:
        solved = trials[f"scripted/solver:{task}"]
        assert solved.status is TrialStatus.PASSED, (task, solved.error)
        assert solved.tool_calls.get(SHELL_TOOL[agent], 0) >= 1, solved.tool_calls
        assert solved.model_calls >= 2 and (solved.turns or 0) >= 2
        _assert_accounting(agent, solved)
    quit_ = trials[f"scripted/quitter:{tasks[0]}"]
    assert quit_.status is TrialStatus.FAILED and quit_.error is None, (tasks[0], quit_.error)
    # mini-swe-agent can only finish by running the submit command
    submit_calls = 1 if agent == "mini-swe-agent" else 0
    assert quit_.model_calls >= 1
    assert quit_.tool_calls.get(SHELL_TOOL[agent], 0) == submit_calls, quit_.tool_calls
    _assert_accounting(agent, quit_)
    names = {a.name for a in store.artifacts(rid, solved.id)}
    assert {"trajectory.json", f"{agent}.stdout.log", f"{agent}.stderr.log"} <= names
    assert any(n.startswith("native/") for n in names), names  # the CLI's own transcript
    traj = _trajectory(store, rid, solved)
    assert traj["version"] == DEFINITIONS[agent].spec.default_version
    assert traj["error"] is None and traj["timed_out"] is False
    kinds = [s["kind"] for s in traj["steps"]]
    assert kinds[:2] == ["tool_call", "tool_result"], kinds
    if agent == "mini-swe-agent":  # its final answer is the (empty) submission
        assert traj["final_message"] == ""
    else:
        assert "Done" in str(traj["final_message"]) and kinds[-1] == "message", kinds


@pytest.mark.parametrize("agent,native_api", [("codex", "responses"), ("claude-code", "messages")])
async def test_responses_and_messages_clients_through_chat_translation(
        agent: str, native_api: str, tmp_path: Path, local_backend: LocalBackend) -> None:
    task = "log-level-counts"
    await _install(local_backend, agent, [task])
    req = RunRequest(suites=["starter"], task_ids=[task], agents=[agent],
                     models=["scripted-chat/solver"], allow_unpriced=True, max_infra_retries=0)
    store, rid, trials = await _run(tmp_path, req)
    t = trials[f"scripted-chat/solver:{task}"]
    assert t.status is TrialStatus.PASSED, t.error
    calls = store.model_calls(rid, t.id)
    assert calls and all(c.client_api == native_api and c.wire_api == "chat" for c in calls)
    _assert_accounting(agent, t, translated=True)


async def test_crash_and_garbage_output_are_agent_errors(tmp_path: Path,
                                                         local_backend: LocalBackend) -> None:
    task = "log-level-counts"
    agents = ["codex", "claude-code", "qwen-code", "gemini-cli"]
    for agent in agents:
        await _install(local_backend, agent, [task])
    req = RunRequest(suites=["starter"], task_ids=[task], models=["scripted/solver"],
                     agents=agents, max_infra_retries=0,
                     agent_options={"codex": {"extra_args": ["--no-such-flag"]},
                                    "claude-code": {"extra_args": ["--no-such-flag"]},
                                    # prints its help (not stream-json) and exits 0
                                    "qwen-code": {"extra_args": ["--help"]},
                                    # says why on its first stderr line, then prints its help
                                    "gemini-cli": {"extra_args": ["--no-such-flag"]}})
    store, rid, _ = await _run(tmp_path, req)
    by_label = {c.id: c.agent.name for c in store.run_configs(rid)}
    got = {by_label[t.config_id]: t for t in store.latest_completed_trials(rid)}
    for agent in ("codex", "claude-code"):
        crashed = got[agent]
        assert crashed.status is TrialStatus.AGENT_ERROR, crashed.error
        assert re.search(rf"{agent} exited with code [1-9]", crashed.error or ""), crashed.error
        assert "no-such-flag" in (crashed.error or ""), crashed.error
        assert crashed.model_calls == 0
    crashed = got["gemini-cli"]
    assert crashed.status is TrialStatus.AGENT_ERROR and crashed.model_calls == 0, crashed.error
    assert (crashed.error or "").startswith("gemini-cli exited with code 1: Unknown argument"), \
        crashed.error
    assert "such-flag" in (crashed.error or ""), crashed.error
    garbage = got["qwen-code"]
    assert garbage.status is TrialStatus.AGENT_ERROR, garbage.error
    assert "unparseable output" in (garbage.error or "") and "not stream-json" in (garbage.error or "")


async def test_real_timeout_of_a_cli(tmp_path: Path, local_backend: LocalBackend) -> None:
    suite = tmp_path / "suite"
    make_task(suite, "slow", agent_timeout=4.0)  # explorer-500 never finishes in 4 s
    await _install(local_backend, "codex", ["slow"], suite=str(suite))
    req = RunRequest(suites=[str(suite)], agents=["codex"], max_infra_retries=0,
                     models=["scripted/explorer-500"])
    store, rid, trials = await _run(tmp_path, req)
    slow = trials["scripted/explorer-500:slow"]
    assert slow.status is TrialStatus.TIMEOUT and slow.model_calls >= 1, slow.error
    assert slow.timings.agent_command is not None and slow.timings.agent_command < 15


async def test_claude_code_calls_the_tasks_mcp_server_and_is_ended_after_completion(
        tmp_path: Path, local_backend: LocalBackend) -> None:
    """The real Claude Code, given the task's (stdio) MCP server through the generated
    --mcp-config (agents/cli/mcp.py): scripted/mcp calls its tool; the server, started by
    Claude Code in the sandbox, logged the call (the verifier's check), and the tool's result
    reached the model (quoted back in the final message). Claude Code lingers a moment after
    its result event; with no grace the harness ends it once completion is seen, and that is a
    normal finish, not a timeout or an error."""
    suite = tmp_path / "suite"
    task = suite / "mcp-task"
    # log-level-counts' image (python3) and Claude Code's layer on it: the cached ones
    shutil.copytree(STARTER / "log-level-counts", task)
    script = (Path(__file__).parent / "data/mcp_server.py").read_text()
    with (task / "task.toml").open("a") as f:
        f.write('\n[[environment.mcp_servers]]\nname = "tiny"\ntransport = "stdio"\n'
                f'command = "python3"\nargs = ["-c", {json.dumps(script)}, "stdio"]\n')
    (task / "tests/test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "if grep -q '^get_secret ' /tmp/mcp-calls.log; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n")
    await _install(local_backend, "claude-code", ["mcp-task"], suite=str(suite))
    req = RunRequest(suites=[str(suite)], agents=["claude-code"], models=["scripted/mcp"],
                     max_infra_retries=0, agent_options={"claude-code": {"completion_grace_s": 0}})
    store, rid, trials = await _run(tmp_path, req)
    t = trials["scripted/mcp:mcp-task"]
    assert t.status is TrialStatus.PASSED and t.error is None, t.error  # the server was called
    assert t.tool_calls == {"mcp__tiny__get_secret": 1}, t.tool_calls
    traj = _trajectory(store, rid, t)
    assert "mcp-secret-4242" in traj["final_message"]  # the tool's result reached the model
    assert traj["timed_out"] is False
    assert traj["ended_after_completion"] is True and traj["exit_code"] is None
    _assert_accounting("claude-code", t)


def test_bad_options_and_versions_are_clear() -> None:
    with pytest.raises(ValueError, match="codex agent options: bogus"):
        make_agent("codex", None, {"bogus": 1})
    pinned = make_agent("qwen-code", "0.15.0", {})
    assert pinned.version == "0.15.0"
    assert "@qwen-code/qwen-code@0.15.0" in pinned.layers()[-1].source
    # every node CLI shares one runtime layer text (and so one cached layer per environment)
    runtimes = {make_agent(n).layers()[0].source for n in ("codex", "claude-code", "qwen-code")}
    assert len(runtimes) == 1


@pytest.mark.parametrize("agent", list(TASKS))
def test_parsers_reject_garbage_instead_of_guessing(agent: str) -> None:
    parse = DEFINITIONS[agent].parse
    garbage = ParseInput("Segmentation fault (core dumped)\n\x00\x01 not json", "", 139, {})
    if agent == "mini-swe-agent":  # reads only its trajectory file
        assert parse(garbage).cli_error == "no trajectory file was written"
        bad = ParseInput("", "", 0, {"/x/trajectory.json": "[1, 2"})
        with pytest.raises(ValueError):
            parse(bad)
    else:
        with pytest.raises(ValueError, match="not"):
            parse(garbage)
    empty = parse(ParseInput("", "", 0, {}))
    assert empty.usage is None and not empty.tool_calls and not empty.completed


@pytest.mark.docker
async def test_cli_on_the_docker_backend(tmp_path: Path, docker_daemon: object) -> None:
    """A real CLI installed into a cached image layer of the Docker backend: the gateway
    reaches the container through the exposed socket, the solver passes, accounting agrees,
    and a second run reuses the installed layer."""
    task = "log-level-counts"
    req = RunRequest(suites=["starter"], task_ids=[task], agents=["codex"],
                     models=["scripted/solver", "scripted/quitter"], backend="docker",
                     max_infra_retries=0)
    _, _, trials = await _run(tmp_path / "first", req)
    solved, quit_ = trials[f"scripted/solver:{task}"], trials[f"scripted/quitter:{task}"]
    assert solved.status is TrialStatus.PASSED, solved.error
    assert quit_.status is TrialStatus.FAILED, quit_.error
    _assert_accounting("codex", solved)
    images = _docker_images()
    # the solver alone shows the reuse (the quitter's trial would use the same layers again)
    again_req = RunRequest(suites=["starter"], task_ids=[task], agents=["codex"],
                           models=["scripted/solver"], backend="docker", max_infra_retries=0)
    _, _, again = await _run(tmp_path / "again", again_req)
    assert again[f"scripted/solver:{task}"].status is TrialStatus.PASSED
    assert _docker_images() == images  # the install was reused: no image layer built again


def _docker_images() -> set[str]:
    import subprocess

    from agentmeter.sandbox.dockercli import OWNER_LABEL, owner_label

    # this process's images only: other test files build their own at the same time (xdist)
    r = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                        f"label={OWNER_LABEL}={owner_label()}"], capture_output=True, text=True,
                       check=True)
    return set(r.stdout.split())


def test_mini_swe_agent_counts_the_replies_it_refused() -> None:
    """A reply with no bash call (a small real model's prose) is not an assistant message in
    mini-swe-agent's trajectory but a FormatError message carrying the response: still a model
    call, with its usage, its text and the malformed call it held (not run)."""
    def refused(content: str, tool_calls: Any, prompt: int) -> dict[str, Any]:
        return {"role": "user", "content": "Tool call error: No tool calls found",
                "extra": {"interrupt_type": "FormatError", "response": {
                    "choices": [{"finish_reason": "length", "message": {
                        "role": "assistant", "content": content, "tool_calls": tool_calls}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": 8,
                              "prompt_tokens_details": None}}}}
    bad_call = [{"type": "function", "function": {"name": "bash", "arguments": '{"comm'}}]
    traj = {"info": {"exit_status": "RepeatedFormatError", "submission": ""}, "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Please solve this issue: count the log levels"},
        refused("You can use the following command:", None, 1031),
        refused("", bad_call, 1089)]}
    out = DEFINITIONS["mini-swe-agent"].parse(
        ParseInput("", "", 0, {"/home/agent/trajectory.json": json.dumps(traj)}))
    assert out.turns == 2 and not out.tool_calls and not out.completed
    assert out.usage == TokenUsage(input=2120, output=16)
    assert out.cli_error == "exit status RepeatedFormatError"
    assert [s.kind for s in out.steps] == ["message", "event", "event", "event", "event"]
    assert out.steps[2].tool == "bash" and out.steps[2].arguments == '{"comm'
