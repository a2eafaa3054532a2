"""The declarative description of an installed agent CLI (``CliSpec``) and what its parser returns.

A spec says, as data: which package and pinned version to install and how (→ cached layers), the
files and environment that point the CLI at the gateway, the non-interactive command line, how
completion is detected on stdout, and where the CLI leaves its native transcript. Strings may use
``${placeholders}`` (``string.Template``), filled per trial by :func:`render`:

``prompt`` (the task instruction), ``model`` (the configured name, e.g. ``openai/gpt-5``),
``model_id`` (the same without its provider prefix, e.g. ``gpt-5``), ``base_url`` (gateway,
no ``/v1``), ``token``,
``home`` (the agent user's HOME), ``state`` (a per-trial directory for the CLI's own files),
``workdir``, ``install`` (the install prefix), ``version`` and ``instruction_file`` (a file
in the sandbox holding the instruction, readable by the agent user). Install commands
(``runtime = "commands"``) see only ``install`` and ``version``.

A spec also comes from an agent file (``-a ./agent.toml``: ``agents/agentfile.py``).

Everything a spec cannot say declaratively (reading the transcript) is its module's ``parse``.
"""

from __future__ import annotations

import json
import re
import shlex
import string
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentmeter.agents.cli import install
from agentmeter.records import TokenUsage, WireApi
from agentmeter.sandbox.spec import LayerSpec

UsageField = Literal["input", "output", "cache_creation", "cache_read", "reasoning"]


class CliSpec(BaseModel):
    """One agent CLI, declaratively. Frozen: a spec is shared by every trial."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="the agent name in the registry, e.g. 'codex'")
    package: str = Field(default="", description="npm or PyPI package name (runtime node or "
                         "python)")
    default_version: str = Field(description="pinned default; 'name@version' overrides it")
    runtime: Literal["node", "python", "commands"]
    install: tuple[str, ...] = Field(
        default=(), description="runtime 'commands': shell commands (templates: install, "
        "version) run once into a cached layer")
    install_user: Literal["root", "agent"] = Field(
        default="root", description="who runs the install commands (the prefix is theirs)")
    install_context: Path | None = Field(
        default=None, description="a host directory the install commands run in (its files "
        "are part of the layer's cache key)")
    extra_requirements: tuple[str, ...] = Field(
        default=(), description="further PyPI requirements installed with a Python CLI "
        "(templates: ${version})")
    python: str = Field(default="python3", description="interpreter a Python CLI's venv uses")
    wire_apis: tuple[WireApi, ...] = Field(description="wire APIs the CLI speaks, preferred first")
    executable: str = Field(description="the program: relative to the install prefix if it "
                            "holds a '/' and does not start with one, else as given (a "
                            "template; a bare name is looked up on PATH)")
    args: tuple[str, ...] = Field(description="arguments after the executable (templates)")
    env: dict[str, str] = Field(default_factory=dict, description="environment (templates)")
    files: dict[str, str] = Field(
        default_factory=dict, description="absolute path (template) -> content (template), "
        "written as the agent user before the CLI starts")
    completion_marker: str | None = Field(
        default=None, description="stdout substring meaning the run is complete; the harness "
        "ends the process once it appears (after the grace period)")
    completion_grace_s: float = Field(
        default=1.0, ge=0, description="how long a finished CLI may linger before it is ended")
    transcripts: tuple[str, ...] = Field(
        default=(), description="files or directories (templates) holding the native "
        "transcript, copied to the trial's logs after the run")
    continue_args: tuple[str, ...] = Field(
        default=(), description="arguments (before the prompt) that continue the CLI's latest "
        "session in the working directory: a scenario's later prompts then keep the "
        "conversation; empty: each prompt starts a fresh session")
    reported_usage: tuple[UsageField, ...] = Field(
        default=(), description="usage fields the CLI itself reports (compared with the gateway)")
    mcp: Literal["claude", "gemini", "codex"] | None = Field(
        default=None, description="how the task's MCP servers are configured (agents/cli/"
        "mcp.py); None: the CLI is not given them")

    def version(self, requested: str | None) -> str:
        return requested or self.default_version

    def prefix(self, version: str) -> str:
        return install.install_dir(self.name, version)

    @model_validator(mode="after")
    def _install_fits_runtime(self) -> CliSpec:
        if self.runtime == "commands":
            if self.package:
                raise ValueError("'package' is installed by runtime node or python, not "
                                 "by install commands")
        elif not self.package:
            raise ValueError(f"runtime {self.runtime!r} installs a 'package': give one")
        elif self.install:
            raise ValueError(f"runtime {self.runtime!r} installs its package; install "
                             "commands need runtime 'commands'")
        return self

    def layers(self, version: str) -> list[LayerSpec]:
        """The shared runtime layer, then this CLI's install layer (install commands: one
        layer of them, nothing when there are none)."""
        if self.runtime == "commands":
            if not self.install:
                return []
            values = {"install": self.prefix(version), "version": version}
            return [install.commands_layer(self.name, version,
                                           [render(c, values) for c in self.install],
                                           self.install_user, self.install_context)]
        if self.runtime == "node":
            return [install.NODE_RUNTIME, install.npm_layer(self.name, self.package, version)]
        reqs = [f"{self.package}=={version}",
                *(render(r, {"version": version}) for r in self.extra_requirements)]
        return [install.PYTHON_RUNTIME, install.pip_layer(self.name, reqs, version, self.python)]


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill ``${name}`` placeholders; an unknown placeholder is a bug in the spec."""
    return string.Template(template).substitute(values)


@dataclass
class Step:
    """One step of the common trajectory."""

    kind: Literal["message", "tool_call", "tool_result", "usage", "event"]
    text: str = ""
    tool: str | None = None
    arguments: Any = None


_READERS = frozenset({"cat", "head", "tail", "less", "more", "nl", "sed", "bat", "view"})
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash"})


def command_text(arguments: Any) -> str:
    """The shell command in a tool call's arguments (``cmd``/``command``, a string or an argv
    list), or the arguments themselves when they are a plain string."""
    cmd = arguments.get("cmd", arguments.get("command")) if isinstance(arguments, dict) else arguments
    if isinstance(cmd, list):
        if len(cmd) >= 3 and cmd[0] in _SHELLS and str(cmd[1]).startswith("-") and "c" in str(cmd[1]):
            return str(cmd[2])  # ["bash", "-lc", "cat x"]
        return shlex.join(str(c) for c in cmd)
    return cmd if isinstance(cmd, str) else ""


def shell_read_paths(command: str) -> list[str]:
    """Files a shell command reads with a pager-like reader, in order: ``cat a b``,
    ``head -n 5 f``, ``sed -n '1,20p' f``, also after ``cd x &&`` or before a pipe."""
    out: list[str] = []
    for segment in re.split(r"&&|\|\||[;|\n]", command):
        try:
            words = shlex.split(segment)
        except ValueError:
            words = segment.split()
        if len(words) >= 3 and words[0] in _SHELLS and words[1].startswith("-") and "c" in words[1]:
            out.extend(shell_read_paths(words[2]))
            continue
        if not words or words[0] not in _READERS:
            continue
        operands, skip_next, scripted = [], False, False
        for w in words[1:]:
            if skip_next:
                skip_next = False
            elif w in (">", ">>", "<", "<<", "2>", "&>", "2>>"):
                skip_next = True  # a redirection's target is not read
            elif w.startswith((">", "<", "2>", "&>")):
                continue
            elif words[0] != "cat" and w in ("-n", "-c", "-e"):
                # head/tail -n N: skip N; sed -n is a flag, sed -e SCRIPT names the script
                skip_next = words[0] != "sed" or w == "-e"
                scripted = scripted or (words[0] == "sed" and w == "-e")
            elif w.startswith("-") and w != "-":
                continue
            else:
                operands.append(w)
        if words[0] == "sed" and operands and not scripted:
            operands = operands[1:]  # the script
        out.extend(w for w in operands if w != "-" and not w.startswith("$("))
    return out


def chat_tool_calls(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, arguments) of an OpenAI-Chat-shaped message's ``tool_calls``; arguments decoded
    from their JSON string when they are JSON, kept as given otherwise."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = fn.get("arguments")
            out.append((str(fn.get("name") or "?"), args))
    return out


@dataclass
class ParsedRun:
    """What a CLI's parser read from its stdout and native transcript."""

    steps: list[Step] = field(default_factory=list)
    tool_calls: Counter[str] = field(default_factory=Counter)
    files_read: list[str] = field(default_factory=list)
    turns: int | None = None
    final_message: str | None = None
    usage: TokenUsage | None = None
    #: the CLI reported an error of its own (an API error, a crash report)
    cli_error: str | None = None
    #: completion seen (a final answer or the CLI's own "done" event)
    completed: bool = False

    def tool(self, name: str, arguments: Any = None, path: str | None = None) -> None:
        """One tool call; ``path`` is the file a read tool read. Without one, files a shell
        command reads (``cat``, ``head``, ``sed -n``…) count as read too."""
        self.tool_calls[name] += 1
        self.steps.append(Step("tool_call", tool=name, arguments=arguments))
        if path:
            self.files_read.append(path)
        else:
            self.files_read.extend(shell_read_paths(command_text(arguments)))

    def message(self, text: str) -> None:
        self.steps.append(Step("message", text=text))

    def add_usage(self, usage: TokenUsage) -> None:
        self.usage = usage if self.usage is None else self.usage + usage


@dataclass(frozen=True)
class ParseInput:
    """A finished CLI process as the parser sees it."""

    stdout: str
    stderr: str
    exit_code: int | None
    #: native transcript files read back from the sandbox: sandbox path -> text
    transcripts: dict[str, str]


Parser = Callable[[ParseInput], ParsedRun]


@dataclass(frozen=True)
class CliDefinition:
    """A spec and its parser: one module per CLI provides one of these."""

    spec: CliSpec
    parse: Parser


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` that is a JSON object (other lines are skipped)."""
    import json

    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def int_of(d: Any, *keys: str) -> int | None:
    """``d[k1][k2]…`` as an int, or None when absent or not an int."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d if isinstance(d, int) and not isinstance(d, bool) else None
