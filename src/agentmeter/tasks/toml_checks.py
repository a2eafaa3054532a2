"""The checks of a ``task.toml`` beyond its types (``read_task_toml`` runs them): what
agentmeter cannot honour is refused by key (GPUs, TPUs, Windows; per-phase users one sandbox
cannot give; a scenario's steps whose networks differ, or that would need another sandbox), and
what it ignores is noticed by key."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentmeter.tasks.artifact_paths import destination_problem
from agentmeter.tasks.errors import TaskProblem
from agentmeter.tasks.phases import (
    Network,
    phase_network,
    sandbox_network,
    stated_mode,
    step_agent_network,
    step_separate,
)
from agentmeter.verify.registry import kind_problem

if TYPE_CHECKING:
    from agentmeter.tasks.task_toml import (
        StepEntry,
        TaskToml,
        _ArtifactEntry,
    )

ROOT_USERS = {"root", "0"}
AGENT_USERS = {"agent", "1000"}


def unsupported_problems(config: TaskToml, file: Path) -> list[TaskProblem]:
    """Harbor features a task may ask for that agentmeter cannot honour: the task is refused
    (a suite skips it, naming the key), never run with another meaning."""
    env = config.environment
    found: list[tuple[str, object]] = []
    if env.os != "linux":
        found.append(("environment.os", env.os))
    if env.gpus:
        found.append(("environment.gpus", env.gpus))
    if env.gpu_types:
        found.append(("environment.gpu_types", env.gpu_types))
    if env.tpu:
        found.append(("environment.tpu", env.tpu))
    venv = config.verifier.environment
    if venv is not None:
        for key in ("gpus", "gpu_types", "tpu", "mcp_servers"):
            if getattr(venv, key):
                found.append((f"verifier.environment.{key}", getattr(venv, key)))
    return [
        TaskProblem(file=file, field=field, message=f"{value!r} cannot be honoured by "
                    "agentmeter (docs/task-format.md): the task is not run")
        for field, value in found
    ]


def ignored_notices(config: TaskToml, file: Path) -> list[str]:
    """Notices for what the task asks that agentmeter ignores (it still runs), by key."""
    notes = [f"{file}: {n}" for n in config.notices]
    if config.environment.mcp_servers:
        names = ", ".join(m.name for m in config.environment.mcp_servers)
        notes.append(f"{file}: environment.mcp_servers ({names}): configured for Claude Code, "
                     "Codex, Gemini CLI, Qwen Code and the native agent; other agents "
                     "(OpenCode, OpenHands, Kimi, mini-swe-agent) are not given them "
                     "(docs/task-format.md)")
    if config.environment.skills_dir:
        notes.append(f"{file}: environment.skills_dir: ignored (agentmeter does not inject "
                     "agent skills)")
    if config.multi_step_reward_mode is not None:
        notes.append(f"{file}: multi_step_reward_mode: Harbor's pre-1.3 key, dropped as Harbor "
                     "drops it (use multi_step_reward_strategy)")
    for i, step in enumerate(config.steps or []):
        for key, value in (("healthcheck", step.healthcheck),
                           ("verifier.collect", step.verifier.collect)):
            if value:
                notes.append(f"{file}: steps[{i}].{key}: ignored (a scenario's steps share one "
                             "sandbox and the task's verifier settings)")
    return notes


def phase_problems(config: TaskToml, file: Path) -> list[TaskProblem]:
    """Per-phase users and networks agentmeter cannot honour, each named by its key."""
    problems: list[TaskProblem] = []
    agent_user = None if config.agent.user is None else str(config.agent.user)
    if config.agent.sandbox_account and agent_user is not None and agent_user not in AGENT_USERS:
        problems.append(TaskProblem(file, f"{config.agent.user!r}: with sandbox_account = true "
                                    "the agent is 'agent' (uid 1000)", "agent.user"))
    elif agent_user is not None and not agent_user.strip():
        problems.append(TaskProblem(file, "an empty user", "agent.user"))
    verifier_user = None if config.verifier.user is None else str(config.verifier.user)
    if verifier_user is not None and verifier_user not in ROOT_USERS | AGENT_USERS:
        problems.append(TaskProblem(file, f"{config.verifier.user!r}: sandboxes provide the users "
                                    "'agent' (1000) and 'root' (0) only", "verifier.user"))
    # a verifier sharing the sandbox may have a network of its own: the sandbox's is switched
    # between the phases (Task.verifier_network, sandbox/netswitch.py)
    for section in ("environment", "agent", "verifier"):
        part = getattr(config, section)
        if part.allowed_hosts and part.network_mode not in (None, "allowlist"):
            problems.append(TaskProblem(file, f"allowed_hosts goes with network_mode = "
                                        f"'allowlist' (this section says {part.network_mode!r})",
                                        f"{section}.allowed_hosts"))
    return problems + artifact_problems(config.artifacts, file, "artifacts")


def artifact_problems(artifacts: list[str | _ArtifactEntry], file: Path,
                      key: str) -> list[TaskProblem]:
    """An artifact's source is absolute; its destination (given, else the source without its
    leading '/') is a relative path inside the trial's artifacts directory, which the runner
    writes as root (``artifact_paths``)."""
    problems: list[TaskProblem] = []
    for i, art in enumerate(artifacts):
        source = art if isinstance(art, str) else art.source
        if not source.startswith("/"):
            problems.append(TaskProblem(file, f"{source!r}: an artifact source is an absolute path "
                                        "inside the sandbox", f"{key}[{i}]"))
            continue
        dest = None if isinstance(art, str) else art.destination
        field = f"{key}[{i}]" if dest is None else f"{key}[{i}].destination"
        problem = destination_problem(source.strip("/") if dest is None else dest)
        if problem is not None:
            problems.append(TaskProblem(file, f"{problem} (a relative path inside the trial's "
                                        "artifacts directory; without a destination, the source "
                                        "without its leading '/')", field))
    return problems


def step_problems(config: TaskToml, file: Path) -> list[TaskProblem]:
    """``[[steps]]`` and the keys that only make sense with them."""
    problems: list[TaskProblem] = []
    if not config.steps:
        if config.steps is not None:
            problems.append(TaskProblem(file, "a multi-step task needs at least one step", "steps"))
        if config.scenario is not None:
            problems.append(TaskProblem(file, "[scenario] describes the rounds of a multi-step "
                                        "task's steps: it needs [[steps]]", "scenario"))
        if config.multi_step_reward_strategy is not None:
            problems.append(TaskProblem(file, "only a multi-step task ([[steps]]) has a "
                                        "multi-step reward", "multi_step_reward_strategy"))
        return problems
    seen: set[str] = set()
    for i, step in enumerate(config.steps):
        if step.name in seen:
            problems.append(TaskProblem(file, f"duplicate step name {step.name!r}",
                                        f"steps[{i}].name"))
        seen.add(step.name)
        kind = step.verifier.kind
        unknown_kind = None if kind is None else kind_problem(kind)
        if unknown_kind is not None:
            problems.append(TaskProblem(file, unknown_kind, f"steps[{i}].verifier.kind"))
        problems += _step_network_problems(config, step, i, file)
        problems += artifact_problems(step.artifacts, file, f"steps[{i}].artifacts")
        user = step.agent.user
        task_user = config.agent.user
        if user is not None and str(user) != str(task_user) and not (
                str(user) in AGENT_USERS and (config.agent.sandbox_account
                                              or str(task_user) in AGENT_USERS)):
            problems.append(TaskProblem(file, "the steps share one sandbox and its agent user: a "
                                        "step's agent.user must be the task's "
                                        f"({'unset' if task_user is None else repr(task_user)})",
                                        f"steps[{i}].agent.user"))
    if config.difftest is not None:
        problems.append(TaskProblem(file, "a CLI-generation task has one step", "difftest"))
    return problems


def _net_name(net: Network) -> str:
    return net[0] + (f" {list(net[1])}" if net[1] else "")


def _step_network_problems(config: TaskToml, step: StepEntry, i: int,
                           file: Path) -> list[TaskProblem]:
    """A step's agent (and shared verifier) network: honoured when it is the scenario's sandbox
    network (:func:`sandbox_network`: its first step's agent's), which cannot change between
    phases here; else the task is refused, naming the key. The task's ``[agent]`` and
    ``[environment]`` are only the steps' defaults: when every phase agrees on one network, the
    sandbox takes it even if the environment's baseline is another."""
    problems: list[TaskProblem] = []
    sandbox_net = sandbox_network(config)
    first = (config.steps or [step])[0].name
    why = ("the steps of a scenario share one sandbox whose network policy cannot change after "
           "it starts, so the task is not run (as Harbor refuses it on providers without "
           "dynamic network policies)")
    step_agent = step_agent_network(config, step)
    if step_agent != sandbox_net:
        problems.append(TaskProblem(file, f"step {step.name!r}: its agent's network "
                                    f"({_net_name(step_agent)}) differs from the scenario "
                                    f"sandbox's ({_net_name(sandbox_net)}, step {first!r}'s "
                                    f"agent's): {why}", f"steps[{i}].agent.network_mode"))
    if not step_separate(config, step):
        verifier = step.verifier if stated_mode(step.verifier) else config.verifier
        step_verifier = phase_network(config, verifier)
        if step_verifier != sandbox_net:
            problems.append(TaskProblem(file, f"step {step.name!r}: its verifier's network "
                                        f"({_net_name(step_verifier)}) differs from the scenario "
                                        f"sandbox's ({_net_name(sandbox_net)}, step {first!r}'s "
                                        f"agent's): {why}", f"steps[{i}].verifier.network_mode"))
    return problems
