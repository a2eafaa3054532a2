"""The Task model every loader produces, whatever the on-disk format.

A task is a directory. Inside the sandbox the oracle's files are placed at ``/solution``; the
verifier's files, and how its reward is read, belong to the task's verifier kind
(``agentmeter.verify``: Harbor's contract, onto which Terminal-Bench v1 tasks are mapped).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentmeter.records import TaskRecord
from agentmeter.tasks.artifact_paths import destination_problem
from agentmeter.verify.difftest.config import DifftestConfig

TaskFormat = Literal["native", "terminal-bench"]
Tier = Literal["easy", "medium", "hard"]
TIERS: tuple[Tier, ...] = ("easy", "medium", "hard")
Difficulty = Literal["easy", "medium", "hard", "unknown"]
BaseName = Literal["debian", "host"]

#: Where the oracle's files live inside a sandbox (Harbor's layout).
SOLUTION_MOUNT = "/solution"

#: Names never part of a task's content (editor/VCS/interpreter droppings).
DIGEST_IGNORED_NAMES = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".DS_Store", ".mypy_cache"})


#: Who a phase's processes run as inside the sandbox (the sandbox provides these two accounts).
SandboxUser = Literal["root", "agent"]


class TaskArtifact(BaseModel):
    """A path the harness copies out of the sandbox after the trial (Harbor ``artifacts``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="absolute path inside the sandbox, a file or a directory")
    destination: str = Field(description="relative path under the try's artifacts/ directory")
    exclude: tuple[str, ...] = Field(default=(), description="glob patterns left out (tar --exclude)")
    #: the compose service it is copied from (None: the main sandbox)
    service: str | None = None

    @field_validator("destination")
    @classmethod
    def _relative_inside(cls, value: str) -> str:
        # copied out as root: an absolute, '..' or empty destination writes anywhere on the host
        problem = destination_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class Healthcheck(BaseModel):
    """Harbor's ``environment.healthcheck`` (Docker HEALTHCHECK semantics): after the sandbox
    starts and before the agent, ``command`` must exit 0; tried every ``interval_s`` (every
    ``start_interval_s`` during ``start_period_s``, whose failures do not count) until
    ``retries`` counted failures, then the environment is broken (infra_invalid)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str
    interval_s: float = 5.0
    timeout_s: float = 30.0
    start_period_s: float = 0.0
    start_interval_s: float = 5.0
    retries: int = 3


class CollectHook(BaseModel):
    """Harbor's ``[[verifier.collect]]``: a command run in the sandbox after the agent and
    before artifacts are collected (to snapshot state into files); best effort."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str
    timeout_s: float = 60.0
    user: SandboxUser = "root"
    #: the compose service it runs in ("main": the agent's sandbox)
    service: str = "main"


DependsCondition = Literal["service_started", "service_healthy", "service_completed_successfully"]


class Sidecar(BaseModel):
    """A service of the task's ``environment/docker-compose.yaml`` besides ``main`` (tasks/
    compose.py; run by runner/sidecars.py): built from its ``build`` context (or its ``image``),
    started before the agent in the trial's network, stopped with the trial."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    dockerfile: Path | None = None
    context: Path | None = None
    image: str | None = None
    #: compose ``entrypoint`` / ``command``; None: the image's own
    entrypoint: tuple[str, ...] | None = None
    command: tuple[str, ...] | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    healthcheck: Healthcheck | None = None
    depends_on: dict[str, DependsCondition] = Field(default_factory=dict)
    origin: str = Field(description="the compose file and service, for messages")


class McpServer(BaseModel):
    """Harbor's ``[[environment.mcp_servers]]``: an MCP server the task offers the agent. An
    HTTP one (``sse``, ``streamable-http``) is served at ``url`` (typically by a compose
    sidecar); a ``stdio`` one is ``command`` + ``args`` started by the agent in its sandbox.
    Recorded on each trial and configured for the agent CLIs that support MCP
    (agents/cli/mcp.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    transport: Literal["sse", "streamable-http", "stdio"] = "sse"
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()


class SeparateVerifier(BaseModel):
    """Harbor's separate verifier environment (runner/separate.py): the verifier runs in a fresh
    sandbox holding only the collected artifacts: built from ``dockerfile`` (``tests/Dockerfile``),
    else ``docker_image`` (``[verifier.environment]``), else a copy of the task's environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dockerfile: Path | None = None
    docker_image: str | None = None
    origin: str = Field(description="the file and key that asked for it, for messages")
    #: the verifier phase's network (one sandbox per phase here, so it may differ from the agent's)
    allow_internet: bool = False
    #: an allowlist verifier network: the hosts its proxy admits (``allow_internet`` False)
    allowed_hosts: tuple[str, ...] = ()
    #: the task states no network for the verifier: the run's network default applies
    network_default: bool = False


class PhaseNetwork(BaseModel):
    """One phase's network: public (``allow_internet``), an allowlist (its hosts, through the
    harness's proxy), else none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_internet: bool = False
    allowed_hosts: tuple[str, ...] = ()


class Budgets(BaseModel):
    """Per-trial budgets the gateway enforces; ``None`` means unlimited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int | None = Field(default=None, gt=0)
    max_usd: float | None = Field(default=None, gt=0)
    max_calls: int | None = Field(default=None, gt=0)


FeedbackMode = Literal["template", "user_sim"]
RewardStrategy = Literal["mean", "final"]


class ScenarioConfig(BaseModel):
    """A scenario: an ordered list of tasks (its steps) sharing one sandbox (AgencyBench's
    scenario, Harbor's multi-step task). Loaded from ``task.toml``'s ``[[steps]]`` and
    ``[scenario]`` (``tasks/scenario.py``); every step's Task carries the same one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="the scenario directory's name")
    steps: tuple[str, ...] = Field(description="the step tasks' ids, in order")
    #: rounds per step: 1 + feedback rounds after a failed evaluation (AgencyBench's K)
    max_attempts: int = Field(default=1, ge=1, le=20)
    #: stop the scenario once a step fails all its rounds (the rest are recorded as skipped)
    halt_on_fail: bool = False
    feedback: FeedbackMode = "template"
    #: Harbor's multi_step_reward_strategy: the scenario's reward from its steps' rewards
    reward_strategy: RewardStrategy = "mean"
    source: str | None = None


#: ``Task.agent_user``: the image's own final USER (root when none), resolved when the sandbox
#: starts; the runner passes it through unchanged, so it is ``sandbox.spec.IMAGE_USER``'s value
#: (tasks may not import the sandbox; tests/test_agent_user.py checks the two agree)
IMAGE_USER = "@image"


class Task(BaseModel):
    """One loaded, validated task. Paths are absolute host paths."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="the task directory's name")
    path: Path
    format: TaskFormat
    instruction: str

    # environment
    environment_dir: Path = Field(description="build context of the Dockerfile / setup script")
    dockerfile: Path | None = None
    setup_script: Path | None = None
    #: a prebuilt image: the environment itself, or the prebuilt form of the Dockerfile (see
    #: runner/tasksandbox.py: base_image for what each sandbox backend does with it)
    docker_image: str | None = None
    docker_image_origin: str | None = Field(
        default=None, description="the file and key that named docker_image, for messages")
    base: BaseName = "debian"
    workdir: str | None = None
    environment_env: dict[str, str] = Field(default_factory=dict)
    #: time allowed to build the environment (Harbor ``build_timeout_sec``); None: no limit
    build_timeout_s: float | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    #: the sandbox's network while the agent runs (and the verifier, unless ``verifier_network``)
    allow_internet: bool = False
    #: checked after the sandbox starts, before the agent (Harbor ``environment.healthcheck``)
    healthcheck: Healthcheck | None = None
    #: Harbor's network_mode = "allowlist": the sandbox reaches only these hosts, through the
    #: harness's proxy (sandbox/proxy.py; allow_internet stays False); none = no network
    allowed_hosts: tuple[str, ...] = ()
    #: the file and key that named allowed_hosts, for messages
    allowed_hosts_origin: str | None = None
    #: the task states no network: it has the run's ``--network-default`` (runner/session.py),
    #: Harbor's default (public) unless the run says ``none``
    network_default: bool = False
    #: the network of a verifier that shares the agent's sandbox when the task states one for
    #: it (its ``network_mode``, or an ``[environment]`` baseline the agent's overrides): the
    #: sandbox's network is switched to it before the verifier runs, as Harbor does
    #: (sandbox/netswitch.py); None: the verifier has the agent's
    verifier_network: PhaseNetwork | None = None
    #: exact allowed_hosts entries may reach the host's own or internal addresses: set by a run
    #: with --allow-host-network (runner/session.py), never by a task
    host_network: bool = False

    #: compose sidecars, in start order (their dependencies first)
    sidecars: tuple[Sidecar, ...] = ()
    #: MCP servers the task offers the agent (Harbor ``environment.mcp_servers``)
    mcp_servers: tuple[McpServer, ...] = ()
    #: the compose ``main`` service's ``depends_on``: waited for before the agent
    main_depends_on: dict[str, DependsCondition] = Field(default_factory=dict)

    # agent
    #: who the agent (and the oracle) runs as (``SandboxSpec.agent_user``): None, agentmeter's
    #: unprivileged account (uid 1000; the workdir given to it, the tests staged out of its
    #: reach before it starts); else a Docker USER value or IMAGE_USER, as Harbor runs agents
    #: (the tests uploaded only after its processes are gone)
    agent_user: str | None = None
    agent_timeout_s: float = 600.0
    budgets: Budgets = Field(default_factory=Budgets)

    # verifier
    tests_dir: Path
    #: files copied into /tests next to tests_dir's content (Terminal-Bench's run-tests.sh)
    extra_test_files: tuple[Path, ...] = ()
    test_command: str
    #: how the trial's reward is decided: a name in ``agentmeter.verify.registry``
    verifier_kind: str
    #: a reward at or above this passes the task
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    verifier_timeout_s: float = 600.0
    verifier_env: dict[str, str] = Field(default_factory=dict)
    verifier_user: SandboxUser = "root"
    #: run after the agent, before artifacts are collected (Harbor ``[[verifier.collect]]``)
    collect: tuple[CollectHook, ...] = ()
    #: None: the verifier runs in the agent's sandbox (Harbor's "shared" mode)
    separate_verifier: SeparateVerifier | None = None
    #: a CLI-generation task's differential-testing section (verifier kind ``difftest``)
    difftest: DifftestConfig | None = None

    # oracle
    solution_dir: Path | None = None
    solution_script: Path | None = None
    solution_command: str | None = None
    solution_env: dict[str, str] = Field(default_factory=dict)

    # scenario steps (None for a task of its own)
    scenario: ScenarioConfig | None = None
    #: 1-based position of this step in its scenario
    scenario_position: int | None = Field(default=None, ge=1)
    #: Harbor's per-step min_reward: the scenario stops when a key's reward ends below it
    min_reward: dict[str, float] | None = None
    #: whether this step's reward enters the scenario's (Harbor ``contributes_to_reward``)
    contributes_to_reward: bool = True
    #: files merged into the working directory before this step (Harbor ``steps/<n>/workdir``)
    step_workdir: Path | None = None
    #: the scenario's shared tests directory, under this step's own tests (which win)
    tests_base_dir: Path | None = None

    # metadata
    tier: Tier | None = None
    difficulty: str | None = None  # Terminal-Bench: Difficulty; Harbor: free-form
    category: str | None = None
    source: str | None = None
    tags: tuple[str, ...] = ()
    author_name: str | None = None
    author_email: str | None = None
    description: str | None = None
    expert_time_estimate_min: float | None = None
    junior_time_estimate_min: float | None = None
    #: what the harness copies out of the sandbox after the trial (Harbor ``artifacts``)
    artifacts: tuple[TaskArtifact, ...] = ()
    #: metadata keys we do not interpret, kept verbatim
    metadata_extra: dict[str, Any] = Field(default_factory=dict)
    #: what the loader read but deliberately does not honour (shown by ``tasks show``)
    loader_notes: tuple[str, ...] = ()

    digest: str = Field(description="sha256 of the task directory's content (see task_digest)")

    def __hash__(self) -> int:  # dict fields make the generated hash fail; id+digest identify
        return hash((self.id, self.digest))

    def verifier_files(self) -> dict[str, Path]:
        """The verifier's files (placed under /tests): relative POSIX path -> host file."""
        files = _files_under(self.tests_base_dir) if self.tests_base_dir is not None else {}
        if self.tests_dir.is_dir():
            files.update(_files_under(self.tests_dir))
        for extra in self.extra_test_files:
            files[extra.name] = extra
        return files

    def solution_files(self) -> dict[str, Path]:
        """Files to place under /solution: relative POSIX path -> host file."""
        if self.solution_dir is not None:
            return _files_under(self.solution_dir)
        if self.solution_script is not None:
            return {self.solution_script.name: self.solution_script}
        return {}

    @property
    def has_solution(self) -> bool:
        return self.solution_command is not None

    def to_record(self, suite: str | None = None) -> TaskRecord:
        """The persisted form: the version of this task a run used."""
        return TaskRecord(
            id=self.id,
            suite=suite,
            digest=self.digest,
            tier=self.tier,
            category=self.category,
            source=self.source,
            tags=list(self.tags),
            path=str(self.path),
        )


def _files_under(directory: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory)
        if any(part in DIGEST_IGNORED_NAMES for part in rel.parts):
            continue
        if p.is_file():
            files[rel.as_posix()] = p
    return files


def task_digest(directory: Path) -> str:
    """A stable content hash of a task directory.

    Covers every file's relative path, bytes and executable bit, and symlink targets, in sorted
    order; ignores VCS/cache droppings (``DIGEST_IGNORED_NAMES``). Independent of where the
    directory lives and of timestamps.
    """
    h = hashlib.sha256()
    entries: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in DIGEST_IGNORED_NAMES)
        root_path = Path(root)
        for name in files + [d for d in dirs if (root_path / d).is_symlink()]:
            if name in DIGEST_IGNORED_NAMES:
                continue
            p = root_path / name
            entries.append((p.relative_to(directory).as_posix(), p))
    for rel, p in sorted(entries):
        h.update(rel.encode() + b"\0")
        if p.is_symlink():
            h.update(b"L" + os.readlink(p).encode() + b"\0")
        elif p.is_file():
            executable = p.stat().st_mode & 0o111
            h.update(b"X" if executable else b"F")
            data = p.read_bytes()
            h.update(str(len(data)).encode() + b"\0")
            h.update(data)
    return "sha256:" + h.hexdigest()
