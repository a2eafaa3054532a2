"""The schema of a Harbor ``task.toml`` and its validation (``read_task_toml``).

Harbor's sections are read as Harbor reads them: keys of its current schema (1.4) are typed and
checked; keys it does not know are ignored, as Harbor ignores them, but never silently: each is
a *notice* naming the file and key (``TaskToml.notices``, carried into ``Task.loader_notes``).
What agentmeter cannot honour is said per key and handled as docs/task-format.md documents:
a task needing GPUs, TPUs or Windows is refused (a suite skips
it and says why); ``skills_dir`` is ignored with a notice. agentmeter's own keys and sections
(``environment.base``, ``verifier.kind``/``pass_threshold``, ``[difftest]``, ``[scenario]``,
``steps.verifier.kind``/``pass_threshold``) are strict: a typo there is an error.
``tasks/native.py`` builds tasks from it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentmeter.tasks.artifact_paths import destination_problem
from agentmeter.tasks.errors import TaskError, TaskProblem, problems_from_validation
from agentmeter.tasks.models import BaseName, Tier
from agentmeter.verify.difftest.config import DifftestConfig
from agentmeter.verify.registry import default_pass_threshold, kind_problem

TASK_TOML = "task.toml"
DIFFTEST_KIND = "difftest"
RUBRIC_KIND = "rubric"
#: ``verifier.pass_threshold`` when a task sets none, per kind (else 1.0)
DEFAULT_PASS_THRESHOLDS: dict[str, float] = {RUBRIC_KIND: 0.6}

NetworkMode = Literal["public", "no-network", "allowlist"]


class _Section(BaseModel):
    """A section of Harbor's schema: unknown keys are kept (and noticed), known ones typed."""

    # strict: TOML is typed, so "yes" for a bool or "2" for a number is a mistake, not a value
    model_config = ConfigDict(extra="allow", strict=True)


class _OwnSection(BaseModel):
    """A section of agentmeter's own: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _Author(_Section):
    name: str
    email: str | None = None


class _PackageSection(_Section):
    """Harbor's ``[task]`` registry section."""

    name: str | None = None
    version: str | None = None
    description: str = ""
    authors: list[_Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class _MetadataSection(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    author_name: str | None = None
    author_email: str | None = None
    difficulty: str | None = None  # free-form in Harbor ('middle', 'trivial', …)
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    tier: Tier | None = None
    source: str | None = None
    expert_time_estimate_min: float | None = None
    junior_time_estimate_min: float | None = None


class _PhaseNetwork(_Section):
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class _AgentSection(_PhaseNetwork):
    timeout_sec: float | None = Field(default=None, gt=0)
    user: str | int | None = None
    #: agentmeter's own key: the agent runs as agentmeter's unprivileged account (uid 1000)
    #: instead of Harbor's user (``user``, else the image's USER, else root)
    sandbox_account: bool = False
    max_tokens: int | None = Field(default=None, gt=0)
    max_usd: float | None = Field(default=None, gt=0)
    max_calls: int | None = Field(default=None, gt=0)


class _Healthcheck(_Section):
    """Docker HEALTHCHECK semantics: run after the environment starts, before the agent."""

    command: str = Field(min_length=1)
    interval_sec: float = Field(default=5.0, ge=0)
    timeout_sec: float = Field(default=30.0, gt=0)
    start_period_sec: float = Field(default=0.0, ge=0)
    start_interval_sec: float = Field(default=5.0, ge=0)
    retries: int = Field(default=3, ge=0)


class _McpServerEntry(_Section):
    """Harbor's MCPServerConfig."""

    name: str = Field(min_length=1)
    transport: Literal["sse", "streamable-http", "stdio"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _needs_endpoint(self) -> _McpServerEntry:
        if self.transport == "stdio" and not self.command:
            raise ValueError("a 'stdio' MCP server needs 'command'")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"a {self.transport!r} MCP server needs 'url'")
        return self


class _EnvironmentSection(_Section):
    build_timeout_sec: float = Field(default=600.0, gt=0)
    docker_image: str | None = Field(default=None, min_length=1)
    os: Literal["linux", "windows"] = "linux"
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    storage_mb: int | None = Field(default=None, gt=0)
    memory: str | None = Field(default=None, description="deprecated Harbor form, e.g. '2G'")
    storage: str | None = Field(default=None, description="deprecated Harbor form, e.g. '10G'")
    gpus: int = Field(default=0, ge=0)
    gpu_types: list[str] | None = None
    tpu: dict[str, Any] | None = None
    allow_internet: bool | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    mcp_servers: list[_McpServerEntry] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: _Healthcheck | None = None
    workdir: str | None = None
    base: BaseName = "debian"

    @field_validator("os", mode="before")
    @classmethod
    def _lower_os(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class _CollectHook(_Section):
    """``[[verifier.collect]]``: a command run after the agent, before artifacts are collected
    (best effort: its failure is noted, never fatal)."""

    command: str = Field(min_length=1)
    service: str = "main"
    timeout_sec: float = Field(default=60.0, gt=0)
    user: str | int | None = None


class _VerifierSection(_PhaseNetwork):
    timeout_sec: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: _EnvironmentSection | None = None
    collect: list[_CollectHook] = Field(default_factory=list)
    # agentmeter's own keys: the verifier kind (agentmeter.verify.registry) and the pass policy
    kind: str = "reward-file"
    pass_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class _SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class _ArtifactEntry(_Section):
    source: str
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None


class _StepAgentSection(_PhaseNetwork):
    timeout_sec: float | None = Field(default=None, gt=0)
    user: str | int | None = None


class _StepVerifierSection(_PhaseNetwork):
    timeout_sec: float | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: _EnvironmentSection | None = None
    collect: list[_CollectHook] = Field(default_factory=list)
    # agentmeter's own keys, as in [verifier]
    kind: str | None = None
    pass_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class StepEntry(_Section):
    """One ``[[steps]]`` entry (Harbor's multi-step tasks): its files are ``steps/<name>/``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    min_reward: float | dict[str, float] | None = None
    contributes_to_reward: bool = True
    agent: _StepAgentSection = Field(default_factory=_StepAgentSection)
    verifier: _StepVerifierSection = Field(default_factory=_StepVerifierSection)
    healthcheck: _Healthcheck | None = None
    artifacts: list[str | _ArtifactEntry] = Field(default_factory=list)


class ScenarioSection(_OwnSection):
    """agentmeter's ``[scenario]``: AgencyBench's rounds, halting and feedback."""

    max_attempts: int = Field(default=2, ge=1, le=20)
    halt_on_fail: bool = False
    feedback: Literal["template", "user_sim"] = "template"
    source: str | None = None


class TaskToml(_Section):
    """The schema of ``task.toml``."""

    version: str | None = None
    schema_version: str | None = None
    source: str | None = None
    artifacts: list[str | _ArtifactEntry] = Field(default_factory=list)
    task: _PackageSection | None = None
    metadata: _MetadataSection = Field(default_factory=_MetadataSection)
    agent: _AgentSection = Field(default_factory=_AgentSection)
    verifier: _VerifierSection = Field(default_factory=_VerifierSection)
    environment: _EnvironmentSection = Field(default_factory=_EnvironmentSection)
    solution: _SolutionSection = Field(default_factory=_SolutionSection)
    #: Harbor's multi-step tasks (a scenario: ``tasks/scenario.py``)
    steps: list[StepEntry] | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    scenario: ScenarioSection | None = None
    #: agentmeter's own section for CLI-generation tasks (verifier kind ``difftest``)
    difftest: DifftestConfig | None = None
    #: Harbor's pre-1.3 name of ``multi_step_reward_strategy``, dropped as Harbor drops it
    multi_step_reward_mode: Any = None

    @property
    def notices(self) -> list[str]:
        """Keys Harbor's schema does not know, each as ``key: ignored (…)``."""
        return [f"{key}: unknown key, ignored (as Harbor ignores it)"
                for key in unknown_keys(self)]


def unknown_keys(model: BaseModel, prefix: str = "") -> list[str]:
    """The dotted paths of keys a lenient section kept without knowing them (``[metadata]`` is
    free-form and never counted)."""
    if isinstance(model, _MetadataSection):
        return []
    found = [f"{prefix}{k}" for k in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, BaseModel):
                where = f"{prefix}{name}[{i}]." if isinstance(value, list) else f"{prefix}{name}."
                found += unknown_keys(item, where)
    return found


def size_to_mb(text: str) -> int:
    value = text.strip().upper()
    units = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    if value and value[-1] in units:
        return int(float(value[:-1]) * units[value[-1]])
    raise ValueError(f"expected a size like '512M' or '2G', got {text!r}")


def _unsupported(config: TaskToml, file: Path) -> list[TaskProblem]:
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
                     "Codex, Gemini CLI and Qwen Code; other agents (the native one included) "
                     "are not given them (docs/task-format.md)")
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


#: a phase's network: (mode, allowed hosts); "allowlist" with no hosts is no network
Network = tuple[NetworkMode, tuple[str, ...]]


def _mode(section: _PhaseNetwork | _EnvironmentSection) -> NetworkMode | None:
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
    return _mode(env) is not None or env.allow_internet is not None


def network_stated(config: TaskToml) -> bool:
    """Whether the task states its sandbox's network (``[environment]`` ``network_mode``,
    ``allowed_hosts`` or ``allow_internet``, ``[agent]``'s or a step agent's ``network_mode`` /
    ``allowed_hosts``); when it does not, the run's network default applies."""
    return (_env_states(config.environment) or _mode(config.agent) is not None
            or any(_mode(step.agent) is not None for step in config.steps or []))


def verifier_network_stated(config: TaskToml, phase: _PhaseNetwork,
                            venv: _EnvironmentSection | None) -> bool:
    """Whether a separate verifier's network is stated (its phase's, its environment's or the
    task's ``[environment]``), as :func:`verifier_network` resolves it."""
    return (_mode(phase) is not None or (venv is not None and _env_states(venv))
            or _env_states(config.environment))


def phase_network(config: TaskToml, phase: _PhaseNetwork) -> Network:
    """A phase's network as Harbor resolves it: the phase's own mode, else the environment's
    baseline (``network_mode``, else ``allowed_hosts`` ⇒ allowlist, else the deprecated
    ``allow_internet``), else Harbor's default: public (:data:`DEFAULT_NETWORK`)."""
    env = config.environment
    mode = _mode(phase)
    if mode is not None:
        return mode, _hosts(phase.allowed_hosts or env.allowed_hosts) if mode == "allowlist" else ()
    base = _mode(env)
    if base is None:
        if env.allow_internet is None:
            return DEFAULT_NETWORK, ()
        base = "public" if env.allow_internet else "no-network"
    return base, _hosts(env.allowed_hosts) if base == "allowlist" else ()


def verifier_network(config: TaskToml, phase: _PhaseNetwork,
                     venv: _EnvironmentSection | None) -> Network:
    """A separate verifier's network, as Harbor resolves it: the phase's own ``network_mode``,
    else its environment's (``[verifier.environment]``: ``network_mode``, else ``allowed_hosts``
    ⇒ allowlist, else ``allow_internet``), else the task's ``[environment]`` baseline."""
    mode = _mode(phase)
    if mode is None and venv is not None:
        base = _mode(venv)
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


ROOT_USERS = {"root", "0"}
AGENT_USERS = {"agent", "1000"}


def separate_verifier(config: TaskToml) -> bool:
    """Harbor's resolution: an explicit ``environment_mode`` wins, else a
    ``[verifier.environment]`` table means separate."""
    mode = config.verifier.environment_mode
    return mode == "separate" if mode is not None else config.verifier.environment is not None


def _phase_problems(config: TaskToml, file: Path) -> list[TaskProblem]:
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
    agent_net = phase_network(config, config.agent)
    verifier_net = phase_network(config, config.verifier)
    if agent_net != verifier_net and not separate_verifier(config):
        def name(net: Network) -> str:
            return net[0] + (f" {list(net[1])}" if net[1] else "")
        problems.append(TaskProblem(
            file, f"the verifier's network ({name(verifier_net)}) differs from the agent's "
            f"({name(agent_net)}): agentmeter runs both phases in one sandbox with one network "
            "policy that cannot change after it starts, so the task is not run (as Harbor "
            "refuses it on providers without dynamic network policies)", "verifier.network_mode"))
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


def read_task_toml(file: Path) -> TaskToml:
    """Parse and validate ``task.toml``; every problem names the file and the key."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError.single(file, f"invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError.single(file, f"cannot read: {exc}") from None
    try:
        config = TaskToml.model_validate(data)
    except ValidationError as exc:
        raise TaskError(problems_from_validation(file, exc)) from None
    problems = _unsupported(config, file) + _phase_problems(config, file)
    unknown_kind = kind_problem(config.verifier.kind)
    if unknown_kind is not None:
        problems.append(TaskProblem(file, unknown_kind, "verifier.kind"))
    if config.verifier.kind == DIFFTEST_KIND and config.difftest is None:
        problems.append(TaskProblem(file, "verifier kind 'difftest' needs a [difftest] section "
                                    "(cli_name, language, …)", "difftest"))
    if config.difftest is not None and config.verifier.kind != DIFFTEST_KIND:
        problems.append(TaskProblem(file, f"[difftest] is read only by verifier kind "
                                    f"'{DIFFTEST_KIND}' (this task's kind is "
                                    f"{config.verifier.kind!r})", "verifier.kind"))
    problems += _step_problems(config, file)
    if config.version is not None and config.schema_version is not None:
        problems.append(TaskProblem(file, "give either 'version' or 'schema_version'", "version"))
    for name in ("memory", "storage"):
        raw = getattr(config.environment, name)
        if raw is not None:
            try:
                size_to_mb(raw)
            except ValueError as exc:
                problems.append(TaskProblem(file, str(exc), f"environment.{name}"))
    if config.environment.docker_image and config.environment.base != "debian":
        problems.append(TaskProblem(file, "a docker_image replaces the 'debian' base; it cannot "
                                    f"be combined with base = {config.environment.base!r}",
                                    "environment.base"))
    verifier = config.verifier
    if verifier.environment_mode == "shared" and verifier.environment is not None:
        problems.append(TaskProblem(file, "[verifier.environment] describes a separate verifier "
                                    "environment; it cannot be combined with environment_mode = "
                                    "'shared'", "verifier.environment_mode"))
    if problems:
        raise TaskError(problems)
    return config


def _step_problems(config: TaskToml, file: Path) -> list[TaskProblem]:
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


def step_separate(config: TaskToml, step: StepEntry) -> bool:
    """Whether a step's verifier runs in an environment of its own (Harbor's resolution: the
    step's ``environment_mode``, else a ``[steps.verifier.environment]``, else the task's)."""
    mode = step.verifier.environment_mode
    if mode is not None:
        return mode == "separate"
    return step.verifier.environment is not None or separate_verifier(config)


def _net_name(net: Network) -> str:
    return net[0] + (f" {list(net[1])}" if net[1] else "")


def _step_network_problems(config: TaskToml, step: StepEntry, i: int,
                           file: Path) -> list[TaskProblem]:
    """A step's agent (and shared verifier) network: honoured when it is the scenario's sandbox
    network, which cannot change between steps here; else the task is refused, naming the key."""
    problems: list[TaskProblem] = []
    agent_net = phase_network(config, config.agent)
    step_agent = phase_network(config, step.agent) if _mode(step.agent) else agent_net
    why = ("the steps of a scenario share one sandbox whose network policy cannot change after "
           "it starts, so the task is not run (as Harbor refuses it on providers without "
           "dynamic network policies)")
    if step_agent != agent_net:
        problems.append(TaskProblem(file, f"step {step.name!r}: its agent's network "
                                    f"({_net_name(step_agent)}) differs from the task's "
                                    f"({_net_name(agent_net)}): {why}",
                                    f"steps[{i}].agent.network_mode"))
    if not step_separate(config, step):
        verifier = step.verifier if _mode(step.verifier) else config.verifier
        step_verifier = phase_network(config, verifier)
        if step_verifier != agent_net:
            problems.append(TaskProblem(file, f"step {step.name!r}: its verifier's network "
                                        f"({_net_name(step_verifier)}) differs from the agent's "
                                        f"({_net_name(agent_net)}): {why}",
                                        f"steps[{i}].verifier.network_mode"))
    return problems


def pass_threshold(verifier: _VerifierSection) -> float:
    """The task's pass threshold, else its kind's default."""
    if verifier.pass_threshold is not None:
        return verifier.pass_threshold
    return kind_pass_threshold(verifier.kind)


def kind_pass_threshold(kind: str) -> float:
    """A kind's default pass threshold: a built-in's here, a plug-in's its own, else 1.0."""
    if kind in DEFAULT_PASS_THRESHOLDS:
        return DEFAULT_PASS_THRESHOLDS[kind]
    own = default_pass_threshold(kind)
    return 1.0 if own is None else own
