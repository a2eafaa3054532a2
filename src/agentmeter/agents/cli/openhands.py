"""OpenHands (PyPI ``openhands-sdk`` + ``openhands-tools``, the V1 agent): OpenAI Chat
Completions via litellm (``openai/<model>`` with the gateway as ``base_url``), non-streaming.

The registries hold no headless OpenHands program: the ``openhands`` package (≤ 1.2.1) is an
interactive terminal UI, ``openhands-ai`` 1.x is the web app server and 0.x only an sdist with a
Docker-runtime default. So the agent is the SDK's own loop, started by a short driver that
agentmeter writes into the trial (below): the SDK's default CLI-mode agent (terminal, file
editor, task tracker, the built-in finish/think tools, the default summarising condenser) on the
task's workdir as a local workspace, the terminal forced to the subprocess backend (no tmux, no
Docker). It stops when the model answers without a tool call or calls ``finish``.

Everything is read from the SDK's persisted conversation (``persistence_dir``): one JSON file per
event (actions, observations, messages, errors) and ``base_state.json`` with the execution status
and per-LLM token totals (agent and condenser).
"""

from __future__ import annotations

import json
from typing import Any

from agentmeter.agents.cli.spec import (
    CliDefinition,
    CliSpec,
    ParsedRun,
    ParseInput,
    Step,
    int_of,
    json_lines,
)
from agentmeter.records import TokenUsage

CONVERSATIONS = "${state}/conversations"
DRIVER = "${state}/agentmeter_openhands.py"
RESULT_KEY = "agentmeter_openhands"

# written by agentmeter into the trial (not part of OpenHands); no "$" in it (string.Template)
DRIVER_SOURCE = '''\
"""agentmeter's headless driver for the OpenHands SDK: one task, one conversation, then exit."""
import argparse
import json
import os
import sys

from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.preset.default import get_default_condenser
from openhands.tools.task_tracker import TaskTrackerTool
from openhands.tools.terminal import TerminalTool

ap = argparse.ArgumentParser(prog="openhands")
ap.add_argument("--model", required=True)
ap.add_argument("--base-url", required=True)
ap.add_argument("--persistence-dir", required=True)
ap.add_argument("--max-iterations", type=int, default=500)
ap.add_argument("prompt")
a = ap.parse_args()

llm = LLM(model=a.model, base_url=a.base_url, api_key=os.environ["LLM_API_KEY"],
          usage_id="agent", num_retries=2)
agent = Agent(
    llm=llm,
    tools=[Tool(name=TerminalTool.name, params={"terminal_type": "subprocess"}),
           Tool(name=FileEditorTool.name), Tool(name=TaskTrackerTool.name)],
    system_prompt_kwargs={"cli_mode": True},
    condenser=get_default_condenser(llm.model_copy(update={"usage_id": "condenser"})),
)
conv = Conversation(agent=agent, workspace=os.getcwd(), persistence_dir=a.persistence_dir,
                    max_iteration_per_run=a.max_iterations, visualizer=None,
                    delete_on_close=False)
error = None
try:
    conv.send_message(a.prompt)
    conv.run()
except Exception as e:
    error = f"{type(e).__name__}: {e}"
status = getattr(conv.state.execution_status, "value", str(conv.state.execution_status))
# the status first: the harness's completion marker is a finished run's line
print(json.dumps({"agentmeter_openhands": status, "error": error}), flush=True)
sys.stderr.flush()
# the SDK takes seconds to shut its threads down; everything is persisted by now
os._exit(0 if error is None and status == "finished" else 1)
'''


SPEC = CliSpec(
    name="openhands",
    package="openhands-sdk",
    # the SDK and its tools are released together: both are pinned to the one version
    extra_requirements=("openhands-tools==${version}",),
    # 1.58.1+ need a certifi newer than the registry snapshot this was pinned against
    default_version="1.58.0",
    runtime="python",
    wire_apis=("chat",),
    executable="bin/python",
    args=("-u", DRIVER, "--model", "openai/${model}", "--base-url", "${base_url}/v1",
          "--persistence-dir", CONVERSATIONS, "${prompt}"),
    env={
        "LLM_API_KEY": "${token}",
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "NO_COLOR": "1",
        "TERM": "dumb",
    },
    files={DRIVER: DRIVER_SOURCE},
    completion_marker=f'"{RESULT_KEY}": "finished"',
    completion_grace_s=2.0,
    transcripts=(CONVERSATIONS,),
    reported_usage=("input", "output", "cache_read"),
)


def _text(content: Any) -> str:
    """The text of an SDK message/observation ``content`` list."""
    if isinstance(content, str):
        return content
    parts = [c.get("text") for c in content or [] if isinstance(c, dict)]
    return "".join(p for p in parts if isinstance(p, str))


def _arguments(event: dict[str, Any]) -> Any:
    call = event.get("tool_call")
    raw = call.get("arguments") if isinstance(call, dict) else None
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    action = event.get("action")
    return {k: v for k, v in action.items() if k != "kind"} if isinstance(action, dict) else None


def _usage(state: dict[str, Any]) -> TokenUsage | None:
    stats = state.get("stats")
    metrics = stats.get("usage_to_metrics") if isinstance(stats, dict) else None
    total: TokenUsage | None = None
    for m in (metrics or {}).values() if isinstance(metrics, dict) else ():
        u = m.get("accumulated_token_usage") if isinstance(m, dict) else None
        if not isinstance(u, dict):
            continue
        one = TokenUsage(input=int_of(u, "prompt_tokens"), output=int_of(u, "completion_tokens"),
                         cache_read=int_of(u, "cache_read_tokens"),
                         cache_creation=int_of(u, "cache_write_tokens"),
                         reasoning=int_of(u, "reasoning_tokens"))
        total = one if total is None else total + one
    return total


def _load(path: str, text: str) -> dict[str, Any]:
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError(f"{path} is not a JSON object")
    return obj


def parse(run: ParseInput) -> ParsedRun:
    out = ParsedRun()
    events = sorted((p, t) for p, t in run.transcripts.items()
                    if "/events/event-" in p and p.endswith(".json"))
    states = [(p, t) for p, t in run.transcripts.items() if p.endswith("/base_state.json")]
    if not events and not states:
        # nothing persisted: the driver's own result line, else the crash's stderr explains
        for line in json_lines(run.stdout):
            if RESULT_KEY in line and line.get("error"):
                out.cli_error = str(line["error"])
        return out
    responses: set[str] = set()
    for path, text in events:
        e = _load(path, text)
        kind, source = e.get("kind"), e.get("source")
        if isinstance(e.get("llm_response_id"), str) and source == "agent":
            responses.add(e["llm_response_id"])
        if kind == "ActionEvent":
            thought = _text(e.get("thought"))
            if thought.strip():
                out.message(thought)
            name, args = str(e.get("tool_name") or "?"), _arguments(e)
            view = isinstance(args, dict) and args.get("command") == "view"
            path_read = str(args.get("path")) if view and isinstance(args, dict) else None
            out.tool(name, args, path=path_read)
            if name == "finish" and isinstance(args, dict):
                out.final_message = str(args.get("message") or "")
        elif kind in ("ObservationEvent", "UserRejectObservation"):
            obs = e.get("observation")
            body = _text(obs.get("content")) if isinstance(obs, dict) else e.get("rejection_reason")
            out.steps.append(Step("tool_result", text=str(body)[:2000]))
        elif kind == "AgentErrorEvent":
            out.steps.append(Step("tool_result", text=str(e.get("error"))[:2000]))
        elif kind == "MessageEvent" and source == "agent":
            msg = e.get("llm_message")
            text = _text(msg.get("content")) if isinstance(msg, dict) else ""
            out.message(text)
            out.final_message = text
        elif kind == "ConversationErrorEvent":
            out.cli_error = f"{e.get('code')}: {e.get('detail')}"
            out.steps.append(Step("event", text=out.cli_error))
    out.turns = len(responses)
    for path, text in states:
        state = _load(path, text)
        usage = _usage(state)
        if usage is not None:
            out.add_usage(usage)
        status = str(state.get("execution_status") or "")
        if status == "finished":
            out.completed = True
        elif status and out.cli_error is None:
            out.cli_error = f"execution status {status}"
            out.steps.append(Step("event", text=out.cli_error))
    if not out.completed:
        out.final_message = None
    return out


DEFINITION = CliDefinition(SPEC, parse)
