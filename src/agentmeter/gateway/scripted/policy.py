"""Scripted policies: what the offline model does next, given the conversation so far.

``solver`` runs the task's reference solution through the client's own shell tool, then finishes;
``explorer[-N]`` reads files for N turns (default 8), then gives up; ``quitter`` gives up at once;
``learner`` gives up on a first prompt but runs the solution once the prompt carries feedback on a
rejected attempt (``FEEDBACK_MARKER``: the harness's feedback rounds, ``runner/feedback.py``);
``mcp`` calls each offered MCP tool (``mcp__…``) once, then finishes quoting the last result;
``judge[:normalized|always|never|garbage]`` answers a grading prompt (see ``judge``);
``schema-from-file`` answers a task-synthesis prompt with the file it was given (the task's
schema.json: ``synth/assist.py``).
A ``:SEED`` suffix (``explorer-12:7``) picks the explorer's order of looking around; the same
policy and seed give byte-identical replies to the same requests (seed 0, the default, is the
fixed order). Under a mini-swe-agent style protocol the last step is
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from agentmeter.gateway.neutral import Completion, ToolCall
from agentmeter.gateway.scripted import judge
from agentmeter.gateway.scripted.conversation import MINI_SWE_SUBMIT, Conversation, OfferedTool
from agentmeter.records import FEEDBACK_OPENING

LABEL = "(scripted test double, not a real model)"
HEREDOC = "AGENTMETER_EOF"
EXPLORER_DEFAULT_TURNS = 8
#: the opening of the harness's feedback after a failed evaluation (what ``learner`` waits for)
FEEDBACK_MARKER = FEEDBACK_OPENING

#: the shell tools of known clients, in order of preference
SHELL_TOOLS = ("exec_command", "shell", "Bash", "run_shell_command", "Shell", "bash", "run_shell")
_SHELLISH = ("shell", "bash", "exec", "terminal", "command")
#: shell tools that refuse a command holding command substitution (``$(``, backticks, ``<(``,
#: ``>(`` outside single quotes, heredoc bodies included): Gemini CLI's (Qwen Code, its fork,
#: shares the name). The solution goes to them base64-encoded, written to a file and run.
SUBSTITUTION_FREE_TOOLS = ("run_shell_command",)
SOLUTION_FILE = "/tmp/agentmeter-solution.sh"

_EXPLORE = (
    "ls -la",
    "find . -maxdepth 3 -type f | head -100",
    "cat README* *.md 2>/dev/null | head -200",
    "ls -la / /tmp",
    "cat $(find . -maxdepth 2 -type f | head -5) 2>/dev/null | head -300",
    "wc -l $(find . -maxdepth 2 -type f | head -20) 2>/dev/null",
)


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class Policy:
    name: str
    turns: int = EXPLORER_DEFAULT_TURNS
    seed: int = 0
    mode: str = ""  # the judge's mode

    @classmethod
    def parse(cls, spec: str) -> Policy:
        """``solver``, ``quitter``, ``explorer`` or ``explorer-N``, each with an optional ``:SEED``."""
        body, colon, seed_text = spec.partition(":")
        if body == "judge":
            mode = seed_text if colon else judge.DEFAULT_MODE
            if mode not in judge.MODES:
                raise PolicyError(f"scripted policy {spec!r}: the judge's mode after ':' is one "
                                  f"of {', '.join(judge.MODES)}")
            return cls("judge", mode=mode)
        if colon and not seed_text.isdigit():
            raise PolicyError(f"scripted policy {spec!r}: the seed after ':' must be a whole number")
        seed = int(seed_text) if colon else 0
        if body in ("solver", "quitter", "explorer", "learner", "mcp"):
            return cls(body, seed=seed)
        if body == "schema-from-file" and not colon:
            return cls(body)
        head, _, n = body.partition("-")
        if head == "explorer" and n.isdigit() and int(n) > 0:
            return cls("explorer", int(n), seed)
        raise PolicyError(f"unknown scripted policy {spec!r} (solver, quitter, learner, "
                          "explorer[-N], mcp, each with an optional :SEED; "
                          "judge[:normalized|always|never|garbage]; schema-from-file)")

    @property
    def label(self) -> str:
        """The name replies carry, e.g. ``explorer-8``, ``explorer-12:7`` or ``judge:never``."""
        if self.name == "judge":
            return f"judge:{self.mode}"
        name = f"explorer-{self.turns}" if self.name == "explorer" else self.name
        return name + (f":{self.seed}" if self.seed else "")

    def explore_commands(self) -> tuple[str, ...]:
        if not self.seed:
            return _EXPLORE
        return tuple(random.Random(self.seed).sample(_EXPLORE, len(_EXPLORE)))


def heredoc_command(script: str) -> str:
    return f"bash -c \"$(cat <<'{HEREDOC}'\n{script.rstrip(chr(10))}\n{HEREDOC}\n)\""


def file_command(script: str, path: str = SOLUTION_FILE) -> str:
    """Run ``script`` verbatim with no command substitution in the command itself (written to
    ``path``, in the sandbox's /tmp by default)."""
    encoded = base64.b64encode(script.encode()).decode()
    return f"printf '%s' '{encoded}' | base64 -d > {path} && bash {path}"


def solution_command(tool: OfferedTool | None, script: str) -> str:
    if tool is not None and tool.name in SUBSTITUTION_FREE_TOOLS:
        return file_command(script)
    return heredoc_command(script)


def pick_tool(tools: list[OfferedTool]) -> OfferedTool | None:
    by_name = {t.name: t for t in tools}
    for name in SHELL_TOOLS:
        if name in by_name:
            return by_name[name]
    for t in tools:
        if any(s in t.name.lower() for s in _SHELLISH):
            return t
    return None


def tool_arguments(tool: OfferedTool, command: str) -> dict[str, Any]:
    props = tool.schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = [r for r in tool.schema.get("required") or [] if isinstance(r, str)]
    if "cmd" in props:
        key = "cmd"
    elif "command" in props or not props:
        key = "command"
    else:
        strings = [k for k in required if isinstance(props.get(k), dict)
                   and props[k].get("type") == "string"]
        key = strings[0] if strings else next(iter(props))
    spec = props.get(key) if isinstance(props.get(key), dict) else {}
    assert isinstance(spec, dict)
    args: dict[str, Any] = {key: ["bash", "-lc", command] if spec.get("type") == "array"
                            else command}
    for name in required:  # fill other required fields so the client accepts the call
        if name in args or not isinstance(props.get(name), dict):
            continue
        p = props[name]
        if "default" in p:
            args[name] = p["default"]
        elif p.get("type") == "boolean":
            args[name] = False
        elif p.get("type") in ("integer", "number"):
            args[name] = 60000 if "timeout" in name else 1
        elif p.get("type") == "array":
            args[name] = []
        else:
            args[name] = "agentmeter scripted step"
    return args


def _call_id(conv: Conversation) -> str:
    digest = hashlib.sha256(conv.prompt_text.encode()).hexdigest()[:20]
    return f"call_{digest}"


def _shell(conv: Conversation, command: str, note: str) -> Completion:
    tool = pick_tool(conv.tools)
    if tool is None:  # text protocol: one fenced bash block
        return Completion(text=f"{note}\n\n```bash\n{command}\n```", finish="stop")
    args = json.dumps(tool_arguments(tool, command), ensure_ascii=False)
    return Completion(text="", tool_calls=[ToolCall(_call_id(conv), tool.name, args)],
                      finish="tool_calls")


def _fill(tool: OfferedTool) -> dict[str, Any]:
    """Arguments for ``tool``: each required one given a plain value of its type."""
    props = tool.schema.get("properties")
    props = props if isinstance(props, dict) else {}
    args: dict[str, Any] = {}
    for name in tool.schema.get("required") or []:
        p = props.get(name) if isinstance(name, str) else None
        kind = p.get("type") if isinstance(p, dict) else None
        args[str(name)] = {"boolean": False, "integer": 1, "number": 1, "array": [],
                           "object": {}}.get(str(kind), "agentmeter")
    return args


def _mcp(conv: Conversation) -> Completion:
    """``mcp``: call each offered MCP tool (named ``mcp__…``, as Claude Code and the native
    agent name them) once, in order, then finish quoting the last result."""
    tools = [t for t in conv.tools if t.name.startswith("mcp__")]
    step = conv.tool_results
    if step < len(tools):
        tool = tools[step]
        return Completion(text="", tool_calls=[ToolCall(_call_id(conv), tool.name,
                                                        json.dumps(_fill(tool)))],
                          finish="tool_calls")
    if not tools:
        return Completion(text=f"No MCP tool was offered. {LABEL}", finish="stop")
    return Completion(text=f"The MCP tool answered: {conv.tail_text[-2000:]} {LABEL}",
                      finish="stop")


def _final(conv: Conversation, message: str, steps_done: int) -> Completion:
    """Finish; under a submit protocol the first finishing step is the submit command."""
    if conv.submit_protocol and steps_done == 0:
        return _shell(conv, f"echo {MINI_SWE_SUBMIT}", message)
    return Completion(text=f"{message} {LABEL}", finish="stop")


def decide(policy: Policy, conv: Conversation, solution_script: str | None) -> Completion:
    """The next model turn. ``step`` counts tool results (or assistant turns for text protocols)."""
    if policy.name == "judge":
        return judge.decide(policy.mode, conv.last_user_text)
    if policy.name == "schema-from-file":  # task synthesis' auxiliary model: the file given
        return Completion(text=f"{solution_script or '(no file given)'}\n{LABEL}", finish="stop")
    if policy.name == "mcp":
        return _mcp(conv)
    step = conv.tool_results if pick_tool(conv.tools) is not None else conv.assistant_turns
    if policy.name == "quitter" or (policy.name == "learner"
                                    and FEEDBACK_MARKER not in conv.prompt_user_text):
        return _final(conv, "I give up on this task without trying.", step)
    if policy.name == "explorer":
        if step < policy.turns:
            commands = policy.explore_commands()
            cmd = commands[step % len(commands)]
            return _shell(conv, f"{cmd}  # look around, step {step + 1}", "Let me look around.")
        return _final(conv, f"After {policy.turns} steps I could not solve this; giving up.",
                      step - policy.turns)
    if solution_script is None:
        return _final(conv, "No reference solution was provided to the scripted solver.", step)
    if step == 0:
        return _shell(conv, solution_command(pick_tool(conv.tools), solution_script),
                      "Running the solution.")
    return _final(conv, "Done: I ran the reference solution.", step - 1)
