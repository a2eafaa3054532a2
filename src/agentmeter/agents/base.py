"""The Agent interface every agent implements: oracle, nop, the native scaffold, installed CLIs.

An agent declares the cached layers it needs (its installation), then runs against one task in a
started sandbox. It reaches a model only through the gateway endpoint it is given.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentmeter.records import TokenUsage
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import LayerSpec
from agentmeter.tasks.models import Task


@dataclass(frozen=True)
class GatewayEndpoint:
    """How an agent inside the sandbox reaches its model."""

    base_url: str  # e.g. http://127.0.0.1:18080 (no /v1)
    token: str  # the per-trial token; never a provider key
    model: str  # the model name the agent should ask for
    #: the same gateway as reached from the host, for agents whose loop runs on the host
    host_base_url: str | None = None


@dataclass
class AgentRun:
    """What an agent reports after running. The store keeps the gateway's usage, not this."""

    exit_code: int | None = None
    timed_out: bool = False
    #: the agent failed in a way that is its own fault (crash, unparseable output)
    error: str | None = None
    command_s: float = 0.0
    tool_calls: dict[str, int] = field(default_factory=dict)
    #: paths the agent read, in order, repeats included (trajectory analytics)
    files_read: list[str] = field(default_factory=list)
    turns: int | None = None
    #: usage the agent itself reported, for the accounting comparison (never stored as truth)
    self_reported_usage: TokenUsage | None = None
    final_message: str | None = None
    #: host files written by the agent run (logs, transcripts): name -> (path, kind)
    artifacts: dict[str, tuple[Path, str]] = field(default_factory=dict)
    #: what the harness left out of the run's record and why (e.g. a transcript over its cap)
    notes: list[str] = field(default_factory=list)


@dataclass
class AgentSession:
    """Continuity across the prompts of one scenario run (its steps and feedback rounds): an
    agent keeps what it needs to continue its conversation in ``state`` (the native agent its
    messages; a CLI that can resume, that it ran before) and says whether it did."""

    state: dict[str, Any] = field(default_factory=dict)
    #: set by the agent when this run continued the conversation of an earlier prompt
    continued: bool = False

    @property
    def resumes(self) -> bool:
        """Whether the agent's next run will continue this conversation: an agent keeps
        state here only when it can (the native agent its messages, a CLI with a continue
        flag that it ran)."""
        return bool(self.state)


@dataclass(frozen=True)
class AgentContext:
    task: Task
    sandbox: Sandbox
    timeout_s: float
    logs_dir: Path  # host directory for this trial's agent artifacts
    gateway: GatewayEndpoint | None = None
    #: what to send instead of the task's instruction (a scenario's feedback round)
    prompt: str | None = None
    #: present in a scenario: the conversation to continue, if the agent can
    session: AgentSession | None = None
    #: set by the harness to end the run early (a budget ran out): an agent that honours it
    #: ends its processes and still returns what it collected (logs, transcript, usage)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def instruction(self) -> str:
        """The prompt of this run."""
        return self.prompt if self.prompt is not None else self.task.instruction


class Agent(Protocol):
    name: str
    version: str | None
    #: whether the agent talks to a model (and so needs a gateway trial)
    uses_model: bool

    def layers(self) -> list[LayerSpec]:
        """Cached layers holding the agent's installation (empty if it needs none)."""
        ...

    async def run(self, ctx: AgentContext) -> AgentRun: ...
