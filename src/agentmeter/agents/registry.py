"""Agents by name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from agentmeter.agents import cli as installed_cli
from agentmeter.agents import native
from agentmeter.agents.base import Agent
from agentmeter.agents.reference import NopAgent, OracleAgent

AgentFactory = Callable[[str | None, dict[str, Any]], Agent]

_FACTORIES: dict[str, AgentFactory] = {
    "oracle": lambda version, options: OracleAgent(),
    "nop": lambda version, options: NopAgent(),
    "native": native.factory,
    **{name: functools.partial(installed_cli.make, name) for name in installed_cli.DEFINITIONS},
}


def register(name: str, factory: AgentFactory) -> None:
    _FACTORIES[name] = factory


def agent_names() -> list[str]:
    return sorted(_FACTORIES)


class UnknownAgentError(ValueError):
    pass


def make_agent(name: str, version: str | None = None, options: dict[str, Any] | None = None) -> Agent:
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UnknownAgentError(f"unknown agent {name!r} (known: {', '.join(agent_names())})")
    return factory(version, options or {})
