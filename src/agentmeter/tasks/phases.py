"""Where and on what network each phase of a Harbor task runs, as Harbor resolves it from
``task.toml`` (task_toml.py): a phase's network (its own mode, else the environment's baseline,
else Harbor's default), a separate verifier's, and whether the verifier (or a step's) runs in an
environment of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from agentmeter.tasks.task_toml import (
        StepEntry,
        TaskToml,
        _EnvironmentSection,
        _PhaseNetwork,
    )

NetworkMode = Literal["public", "no-network", "allowlist"]

#: a phase's network: (mode, allowed hosts); "allowlist" with no hosts is no network
Network = tuple[NetworkMode, tuple[str, ...]]


def stated_mode(section: _PhaseNetwork | _EnvironmentSection) -> NetworkMode | None:
    if section.network_mode is not None:
        return section.network_mode
    return "allowlist" if section.allowed_hosts else None


def _hosts(hosts: list[str]) -> tuple[str, ...]:
    """Harbor's normalisation: stripped, lower-case, no trailing dot, each once."""
    return tuple(dict.fromkeys(h.strip().lower().rstrip(".") for h in hosts if h.strip()))


#: a task that states no network gets Harbor's default, public (a run's ``--network-default
#: none`` tightens it: runner/session.py); agentmeter's own suites state theirs
DEFAULT_NETWORK: NetworkMode = "public"


def _env_states(env: _EnvironmentSection) -> bool:
    return stated_mode(env) is not None or env.allow_internet is not None


def network_stated(config: TaskToml) -> bool:
    """Whether the task states its sandbox's network (``[environment]`` ``network_mode``,
    ``allowed_hosts`` or ``allow_internet``, ``[agent]``'s or a step agent's ``network_mode`` /
    ``allowed_hosts``); when it does not, the run's network default applies."""
    return (_env_states(config.environment) or stated_mode(config.agent) is not None
            or any(stated_mode(step.agent) is not None for step in config.steps or []))


def verifier_network_stated(config: TaskToml, phase: _PhaseNetwork,
                            venv: _EnvironmentSection | None) -> bool:
    """Whether a separate verifier's network is stated (its phase's, its environment's or the
    task's ``[environment]``), as :func:`verifier_network` resolves it."""
    return (stated_mode(phase) is not None or (venv is not None and _env_states(venv))
            or _env_states(config.environment))


def phase_network(config: TaskToml, phase: _PhaseNetwork) -> Network:
    """A phase's network as Harbor resolves it: the phase's own mode, else the environment's
    baseline (``network_mode``, else ``allowed_hosts`` ⇒ allowlist, else the deprecated
    ``allow_internet``), else Harbor's default: public (:data:`DEFAULT_NETWORK`)."""
    env = config.environment
    mode = stated_mode(phase)
    if mode is not None:
        return mode, _hosts(phase.allowed_hosts or env.allowed_hosts) if mode == "allowlist" else ()
    base = stated_mode(env)
    if base is None:
        if env.allow_internet is None:
            return DEFAULT_NETWORK, ()
        base = "public" if env.allow_internet else "no-network"
    return base, _hosts(env.allowed_hosts) if base == "allowlist" else ()


def step_agent_network(config: TaskToml, step: StepEntry) -> Network:
    """A step's agent phase network: the step's own ``network_mode`` / ``allowed_hosts``, else
    the task's ``[agent]`` phase network (:func:`phase_network`)."""
    return phase_network(config, step.agent if stated_mode(step.agent) else config.agent)


def sandbox_network(config: TaskToml) -> Network:
    """The network of the task's (agent's) sandbox, which cannot change after it starts: the
    agent phase's; in a multi-step task, the first step's agent phase's (the task's ``[agent]``
    and ``[environment]`` are only defaults there, so a scenario whose phases all agree on a
    network that differs from the environment's baseline takes that network).
    toml_checks.py refuses a task whose other in-sandbox phases differ from it."""
    if config.steps:
        return step_agent_network(config, config.steps[0])
    return phase_network(config, config.agent)


def verifier_network(config: TaskToml, phase: _PhaseNetwork,
                     venv: _EnvironmentSection | None) -> Network:
    """A separate verifier's network, as Harbor resolves it: the phase's own ``network_mode``,
    else its environment's (``[verifier.environment]``: ``network_mode``, else ``allowed_hosts``
    ⇒ allowlist, else ``allow_internet``), else the task's ``[environment]`` baseline."""
    mode = stated_mode(phase)
    if mode is None and venv is not None:
        base = stated_mode(venv)
        if base is None and venv.allow_internet is not None:
            base = "public" if venv.allow_internet else "no-network"
        if base is not None:
            hosts = phase.allowed_hosts or venv.allowed_hosts or config.environment.allowed_hosts
            return base, _hosts(hosts) if base == "allowlist" else ()
    if mode is None:
        return phase_network(config, phase)
    hosts = phase.allowed_hosts or (venv.allowed_hosts if venv else []) \
        or config.environment.allowed_hosts
    return mode, _hosts(hosts) if mode == "allowlist" else ()


def separate_verifier(config: TaskToml) -> bool:
    """Harbor's resolution: an explicit ``environment_mode`` wins, else a
    ``[verifier.environment]`` table means separate."""
    mode = config.verifier.environment_mode
    return mode == "separate" if mode is not None else config.verifier.environment is not None


def step_separate(config: TaskToml, step: StepEntry) -> bool:
    """Whether a step's verifier runs in an environment of its own (Harbor's resolution: the
    step's ``environment_mode``, else a ``[steps.verifier.environment]``, else the task's)."""
    mode = step.verifier.environment_mode
    if mode is not None:
        return mode == "separate"
    return step.verifier.environment is not None or separate_verifier(config)
