"""Agent files: ``-a ./path/agent.toml`` describes an installed agent as data (docs/plugins.md).

The file says what a built-in CLI's :class:`~agentmeter.agents.cli.spec.CliSpec` says: its name and
version; how it is installed (``install`` commands run once into a cached layer, or an npm/PyPI
``package``); the ``command`` run in the task's workdir as the agent user, with placeholders for
the instruction file, the model, the gateway's base URL and token; its ``env`` and ``files``; the
``wire_api`` it speaks; and optionally which built-in CLI's ``parser`` reads its output
(transcript, self-reported usage). Without one, the ``plain`` parser keeps stdout's last line as
the final message. Every error names the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmeter.agents.cli.spec import CliDefinition, CliSpec, ParsedRun, ParseInput, UsageField
from agentmeter.records import WireApi
from agentmeter.tomlfile import read_toml


class AgentFileError(ValueError):
    """An agent file that cannot be used: the message names the file (and the key)."""


class AgentFileModel(BaseModel):
    """The keys of an agent file (TOML)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="the agent's name")
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$",
                         description="its version (part of the install layer's cache key)")
    wire_api: WireApi | list[WireApi] = Field(description="wire API(s) it speaks, preferred first")
    command: list[str] | str = Field(description="argv (templates), or one shell command line "
                                     "run with bash -c")
    install: list[str] = Field(default_factory=list, description="shell commands run once "
                               "into a cached layer (templates: ${install}, ${version})")
    install_user: Literal["root", "agent"] = "root"
    install_context: str | None = Field(default=None, description="a directory, relative to "
                                        "the file, the install commands run in")
    runtime: Literal["node", "python"] | None = Field(
        default=None, description="install 'package' with npm or pip instead of commands")
    package: str | None = None
    extra_requirements: list[str] = Field(default_factory=list)
    python: str = "python3"
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    parser: str = Field(default="plain", description="'plain' or a built-in CLI's name")
    transcripts: list[str] = Field(default_factory=list)
    completion_marker: str | None = None
    completion_grace_s: float = Field(default=1.0, ge=0)
    continue_args: list[str] = Field(default_factory=list)
    reported_usage: list[UsageField] = Field(default_factory=list)
    mcp: Literal["claude", "gemini", "codex"] | None = Field(
        default=None, description="the config form the task's MCP servers are given in")


def plain_parse(run: ParseInput) -> ParsedRun:
    """No transcript to read: stdout's last non-empty line is the final message."""
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    return ParsedRun(final_message=lines[-1] if lines else None, completed=run.exit_code == 0)


def parser_names() -> list[str]:
    from agentmeter.agents.cli import DEFINITIONS

    return ["plain", *sorted(DEFINITIONS)]


def is_agent_file(name: str) -> bool:
    return name.endswith(".toml")


def load_agent_file(path: Path) -> CliDefinition:
    """The definition an agent file describes; AgentFileError naming the file and the key."""
    from agentmeter.agents.cli import DEFINITIONS

    if not path.is_file():
        raise AgentFileError(f"agent file {path}: not found")
    data = read_toml(path, AgentFileError)
    try:
        f = AgentFileModel.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise AgentFileError(f"agent file {path}: {key}: {err['msg']}") from None
    if f.parser != "plain" and f.parser not in DEFINITIONS:
        raise AgentFileError(f"agent file {path}: parser: unknown parser {f.parser!r} "
                             f"(known: {', '.join(parser_names())})")
    argv = ["bash", "-c", f.command] if isinstance(f.command, str) else f.command
    if not argv or not argv[0]:
        raise AgentFileError(f"agent file {path}: command: empty")
    context: Path | None = None
    if f.install_context is not None:
        context = (path.parent / f.install_context).resolve()
        if not context.is_dir():
            raise AgentFileError(f"agent file {path}: install_context: {context} is not a "
                                 "directory")
    spec: dict[str, Any] = dict(
        name=f.name, default_version=f.version,
        runtime=f.runtime or "commands", package=f.package or "", install=tuple(f.install),
        install_user=f.install_user, install_context=context,
        extra_requirements=tuple(f.extra_requirements), python=f.python,
        wire_apis=tuple(f.wire_api) if isinstance(f.wire_api, list) else (f.wire_api,),
        executable=argv[0], args=tuple(argv[1:]), env=f.env, files=f.files,
        completion_marker=f.completion_marker, completion_grace_s=f.completion_grace_s,
        transcripts=tuple(f.transcripts), continue_args=tuple(f.continue_args),
        reported_usage=tuple(f.reported_usage), mcp=f.mcp)
    try:
        cli = CliSpec(**spec)
    except ValidationError as e:
        err = e.errors()[0]
        raise AgentFileError(f"agent file {path}: {err['msg'].removeprefix('Value error, ')}"
                             ) from None
    _check_templates(path, cli)
    parse = plain_parse if f.parser == "plain" else DEFINITIONS[f.parser].parse
    return CliDefinition(cli, parse)


_PLACEHOLDERS = frozenset({"prompt", "model", "model_id", "base_url", "token", "home", "state",
                           "workdir", "install", "version", "instruction_file"})


def _check_templates(path: Path, spec: CliSpec) -> None:
    """An unknown ``${placeholder}`` is named now, not at the first trial."""
    import string

    fields: dict[str, tuple[str, ...]] = {
        "command": (spec.executable, *spec.args), "env": tuple(spec.env.values()),
        "files": (*spec.files, *spec.files.values()), "transcripts": spec.transcripts,
        "install": spec.install, "extra_requirements": spec.extra_requirements}
    for key, texts in fields.items():
        allowed = {"install": frozenset({"install", "version"}),
                   "extra_requirements": frozenset({"version"})}.get(key, _PLACEHOLDERS)
        for text in texts:
            try:
                names = string.Template(text).get_identifiers()
            except ValueError as e:
                raise AgentFileError(f"agent file {path}: {key}: {e} (write $$ for a $)") from None
            unknown = [n for n in names if n not in allowed]
            if unknown or not string.Template(text).is_valid():
                what = f"${{{unknown[0]}}}" if unknown else "a '$' (write $$ for a $)"
                raise AgentFileError(f"agent file {path}: {key}: unknown placeholder {what} "
                                     f"(known: {', '.join(sorted(allowed))})")
