"""Plans: configurations (model x agent) x tasks x attempts, validated before anything runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmeter.agents.base import Agent
from agentmeter.agents.registry import make_agent
from agentmeter.records import NO_MODEL, AgentSpec, ConfigRecord, ModelSpec
from agentmeter.tasks.models import Task


@dataclass(frozen=True)
class PlannedConfig:
    record: ConfigRecord
    agent: Agent


@dataclass(frozen=True)
class PlannedTrial:
    config: PlannedConfig
    task: Task
    attempt: int

    @property
    def trial_id(self) -> str:
        return f"{self.config.record.id}:{self.task.id}:{self.attempt}"


def build_configs(agents: list[str], models: list[str],
                  agent_options: dict[str, dict[str, Any]] | None = None,
                  pairs: list[tuple[str, str]] | None = None) -> list[PlannedConfig]:
    """The grid agents x models plus explicit (agent, model) pairs; agents that use no model get
    one configuration each. Raises UnknownAgentError for an unknown agent name."""
    out: list[PlannedConfig] = []
    seen: set[str] = set()
    wanted: list[tuple[str, list[str]]] = [(a, models) for a in agents]
    wanted += [(a, [m]) for a, m in pairs or []]
    for spec, spec_models in wanted:
        name, _, version = spec.partition("@")
        options = (agent_options or {}).get(name, {})
        agent = make_agent(name, version or None, options)
        names = spec_models if agent.uses_model else [NO_MODEL]
        if agent.uses_model and not spec_models:
            raise ValueError(f"agent {name!r} needs a model: pass --model (e.g. scripted/solver)")
        for m in names:
            rec = ConfigRecord.of(AgentSpec(name=name, version=version or None, options=options),
                                ModelSpec(name=m))
            if rec.id not in seen:
                seen.add(rec.id)
                out.append(PlannedConfig(rec, agent))
    return out


def build_plan(configs: list[PlannedConfig], tasks: list[Task], attempts: int) -> list[PlannedTrial]:
    return [PlannedTrial(c, t, a) for c in configs for t in tasks for a in range(attempts)]
