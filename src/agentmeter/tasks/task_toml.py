"""The schema of a Harbor ``task.toml`` and its validation (``read_task_toml``).

Harbor's sections are read as Harbor reads them: keys of its current schema (1.4) are typed and
checked; keys it does not know are ignored, as Harbor ignores them, but never silently: each is
a *notice* naming the file and key (``TaskToml.notices``, carried into ``Task.loader_notes``).
What agentmeter cannot honour is said per key and handled as docs/task-format.md documents:
a task needing GPUs, TPUs or Windows is refused (a suite skips
it and says why); ``skills_dir`` is ignored with a notice. agentmeter's own keys and sections
(``environment.base``, ``verifier.kind``/``pass_threshold``, ``[difftest]``, ``[scenario]``,
``steps.verifier.kind``/``pass_threshold``) are strict: a typo there is an error.
The checks beyond types are in ``toml_checks.py``; each phase's network and environment, as
Harbor resolves them, in ``phases.py``. ``tasks/native.py`` builds tasks from it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentmeter.tasks.errors import TaskError, TaskProblem, problems_from_validation
from agentmeter.tasks.models import BaseName, Tier
from agentmeter.tasks.phases import NetworkMode
from agentmeter.tasks.toml_checks import phase_problems, step_problems, unsupported_problems
from agentmeter.verify.difftest.config import DifftestConfig
from agentmeter.verify.registry import default_pass_threshold, kind_problem

TASK_TOML = "task.toml"
DIFFTEST_KIND = "difftest"
RUBRIC_KIND = "rubric"
#: ``verifier.pass_threshold`` when a task sets none, per kind (else 1.0)
DEFAULT_PASS_THRESHOLDS: dict[str, float] = {RUBRIC_KIND: 0.6}



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
    problems = unsupported_problems(config, file) + phase_problems(config, file)
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
    problems += step_problems(config, file)
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
