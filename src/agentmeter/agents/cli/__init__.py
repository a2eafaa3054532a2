"""Installed agent CLIs (Codex, Claude Code, Qwen Code, Gemini CLI, mini-swe-agent, Kimi CLI,
OpenCode, OpenHands).

Each CLI is one module holding a declarative :class:`CliSpec` and a transcript parser; the
generic :class:`InstalledCliAgent` drives any of them. ``make(name, version, options)`` is the
registry's factory; ``name@version`` pins another version than the spec's default.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agentmeter.agents.cli import (
    claude_code,
    codex,
    gemini_cli,
    kimi,
    mini_swe_agent,
    opencode,
    openhands,
    qwen_code,
)
from agentmeter.agents.cli.agent import CliOptions, InstalledCliAgent
from agentmeter.agents.cli.spec import CliDefinition, CliSpec, ParsedRun, ParseInput

DEFINITIONS: dict[str, CliDefinition] = {
    d.spec.name: d for d in (codex.DEFINITION, claude_code.DEFINITION, qwen_code.DEFINITION,
                             gemini_cli.DEFINITION,
                             mini_swe_agent.DEFINITION, kimi.DEFINITION,
                             opencode.DEFINITION, openhands.DEFINITION)
}


def make(name: str, version: str | None, options: dict[str, Any]) -> InstalledCliAgent:
    """The registry's factory for CLI ``name``: a clear ``ValueError`` for bad options."""
    return InstalledCliAgent(DEFINITIONS[name], version, parse_options(name, options))


def parse_options(name: str, options: dict[str, Any]) -> CliOptions:
    """``options`` as any CLI's options; a ``ValueError`` naming each bad one."""
    try:
        return CliOptions.model_validate(options)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                             for err in e.errors())
        raise ValueError(f"{name} agent options: {problems}") from None


__all__ = ["DEFINITIONS", "CliDefinition", "CliOptions", "CliSpec", "InstalledCliAgent",
           "ParseInput", "ParsedRun", "make", "parse_options"]
