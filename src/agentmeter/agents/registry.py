"""Agents by name: a built-in name, an agent file (``./agent.toml``), a Python import path
(``package.module:Class``) or an installed package's entry point (group ``agentmeter.agents``).

A plug-in (import path or entry point) is a factory called like the built-in ones,
``factory(version, options)``, returning an object with the ``agents/base.py: Agent`` protocol
(a class whose ``__init__`` takes ``(version, options)`` is such a factory). docs/plugins.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentmeter import plugins
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

#: what an agent object must have (``Agent``)
_PROTOCOL = ("name", "version", "uses_model", "layers", "run")


def register(name: str, factory: AgentFactory) -> None:
    _FACTORIES[name] = factory


def agent_names() -> list[str]:
    """Built-in agents and those installed as entry points."""
    return sorted({*_FACTORIES, *plugins.entry_point_names("agent")})


class UnknownAgentError(ValueError):
    pass


def make_agent(name: str, version: str | None = None, options: dict[str, Any] | None = None) -> Agent:
    factory = _FACTORIES.get(name)
    if factory is not None:
        return factory(version, options or {})
    from agentmeter.agents.agentfile import is_agent_file

    if is_agent_file(name):
        return _from_file(Path(name), version, options or {})
    made = plugins.lookup("agent", name)
    if made is None:
        raise UnknownAgentError(
            f"unknown agent {name!r} (known: {', '.join(agent_names())}; or an agent file "
            "./agent.toml, or package.module:Class)")
    where = f"agent {name!r}"
    if not callable(made):
        raise plugins.PluginError(f"{where}: {type(made).__name__} object is not callable "
                                  "(expected a factory(version, options) -> Agent)")
    try:
        agent = made(version, options or {})
    except Exception as e:  # the plug-in's own code: one line, no traceback
        raise plugins.PluginError(f"{where}: calling it with (version, options) failed: "
                                  f"{type(e).__name__}: {e}") from None
    missing = [a for a in _PROTOCOL if not hasattr(agent, a)]
    if missing:
        raise plugins.PluginError(f"{where}: {type(agent).__name__} does not implement the "
                                  f"Agent protocol (missing: {', '.join(missing)})")
    checked: Agent = agent
    return checked


def _from_file(path: Path, version: str | None, options: dict[str, Any]) -> Agent:
    from agentmeter.agents.agentfile import load_agent_file
    from agentmeter.agents.cli.agent import InstalledCliAgent

    definition = load_agent_file(path)
    return InstalledCliAgent(definition, version, installed_cli.parse_options(
        definition.spec.name, options))
