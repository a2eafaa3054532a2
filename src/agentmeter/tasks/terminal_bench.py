"""Terminal-Bench v1 tasks (task.yaml, Dockerfile, run-tests.sh, solution.sh, tests/).

Mapped onto the native contract the way Terminal-Bench runs them: ``tests/`` plus
``run-tests.sh`` are placed under ``/tests``, the verifier runs ``bash /tests/run-tests.sh`` with
``TEST_DIR=/tests``, and the reward comes from the task's ``parser_name``: pytest's ``-rA``
summary (``pytest``, the default) or one of Terminal-Bench's other parsers (``swebench``,
``sweperf``, ``mlebench``, ``swelancer``; verify/tb_parsers.py), each a verifier kind of the same
name. As in Terminal-Bench, keys task.yaml does not define (``language``, ``author``, …) are
accepted; each is listed once in ``Task.loader_notes``. The keys it defines are checked. Only
single-service
``docker-compose.yaml`` files are accepted; the harness plumbing in them (generated image and
container names, the keep-alive command, log volumes, ``T_BENCH_*`` variables) is ignored, and
whatever else is ignored is listed in ``Task.loader_notes``. A literal ``image:`` is the task's
prebuilt image (``Task.docker_image``, with ``build:`` as its recipe; see native.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentmeter.paths import within
from agentmeter.tasks.errors import TaskError, TaskProblem, problems_from_validation
from agentmeter.tasks.models import (
    SOLUTION_MOUNT,
    TIERS,
    Difficulty,
    Task,
    Tier,
    task_digest,
)
from agentmeter.tasks.native import link_out
from agentmeter.verify.mounts import TB_PARSER_NAMES, TESTS_MOUNT

TASK_YAML = "task.yaml"
RUN_TESTS_SH = "run-tests.sh"
COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml")

#: Compose service keys that only wire Terminal-Bench's own harness; ignored without a note.
_HARNESS_SERVICE_KEYS = frozenset({"image", "container_name", "command", "volumes", "build",
                                   "environment"})
#: Terminal-Bench's parser names (its ParserName) → the verifier kind that reads the output so
PARSER_KINDS: dict[str, str] = {"pytest": "pytest", **{name: name for name in TB_PARSER_NAMES}}


class _Description(BaseModel):
    model_config = ConfigDict(extra="ignore")
    key: str = "base"
    description: str


class TerminalBenchYaml(BaseModel):
    """The schema of Terminal-Bench v1's ``task.yaml`` (other keys are ignored, as there)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    instruction: str | None = None
    descriptions: list[_Description] | None = Field(
        default=None, description="early Terminal-Bench form of the instruction")
    author_name: str | None = None
    author_email: str | None = None
    difficulty: Difficulty = "unknown"
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    parser_name: str = "pytest"
    max_agent_timeout_sec: float = Field(default=360.0, gt=0)
    max_test_timeout_sec: float = Field(default=60.0, gt=0)
    run_tests_in_same_shell: bool = False
    disable_asciinema: bool = False
    estimated_duration_sec: float | None = None
    expert_time_estimate_min: float | None = None
    junior_time_estimate_min: float | None = None

    @model_validator(mode="after")
    def _one_instruction(self) -> TerminalBenchYaml:
        if self.instruction is None and not self.descriptions:
            raise ValueError("required key 'instruction' is missing")
        return self

    def instruction_text(self) -> str:
        if self.instruction is not None:
            return self.instruction
        assert self.descriptions
        by_key = {d.key: d.description for d in self.descriptions}
        return by_key.get("base", self.descriptions[0].description)


def _read_yaml(file: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskError.single(file, f"invalid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError.single(file, f"cannot read: {exc}") from None


def read_task_yaml(file: Path) -> tuple[TerminalBenchYaml, tuple[str, ...]]:
    """The task.yaml and its notes (the keys Terminal-Bench ignores and so does agentmeter)."""
    data = _read_yaml(file)
    if not isinstance(data, dict):
        raise TaskError.single(file, "expected a mapping of keys at the top level")
    try:
        config = TerminalBenchYaml.model_validate(data)
    except ValidationError as exc:
        raise TaskError(problems_from_validation(file, exc)) from None
    if config.parser_name not in PARSER_KINDS:
        raise TaskError.single(file, f"unknown parser {config.parser_name!r} (known: "
                               f"{', '.join(sorted(PARSER_KINDS))})", "parser_name")
    ignored = sorted(str(k) for k in data if k not in TerminalBenchYaml.model_fields)
    return config, ((f"{file.name}: ignored keys {ignored}",) if ignored else ())


class _ComposeEnvironment(BaseModel):
    model_config = ConfigDict(frozen=True)
    dockerfile: Path | None
    context: Path
    image: str | None
    image_origin: str | None
    env: dict[str, str]
    notes: tuple[str, ...]


def _compose_env_items(raw: Any) -> list[tuple[str, str]]:
    if isinstance(raw, dict):
        return [(str(k), "" if v is None else str(v)) for k, v in raw.items()]
    if isinstance(raw, list):
        pairs = []
        for item in raw:
            name, _, value = str(item).partition("=")
            pairs.append((name, value))
        return pairs
    return []


def read_compose(directory: Path) -> _ComposeEnvironment:
    """The single service of a Terminal-Bench docker-compose file (or the bare Dockerfile)."""
    file = next((directory / n for n in COMPOSE_NAMES if (directory / n).is_file()), None)
    default = directory / "Dockerfile"
    if file is None:
        return _ComposeEnvironment(dockerfile=default if default.is_file() else None,
                                   context=directory, image=None, image_origin=None, env={},
                                   notes=())
    data = _read_yaml(file)
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise TaskError.single(file, "expected a mapping of services", "services")
    if len(services) != 1:
        raise TaskError.single(file, f"multi-container tasks are not supported "
                               f"({len(services)} services: {', '.join(services)})", "services")
    (name, service), = services.items()
    if not isinstance(service, dict):
        raise TaskError.single(file, "expected a mapping", f"services.{name}")
    notes: list[str] = []
    other_top = sorted(k for k in data if k not in ("services", "version"))
    if other_top:
        notes.append(f"{file.name}: ignored top-level keys {other_top}")
    other_keys = sorted(k for k in service if k not in _HARNESS_SERVICE_KEYS)
    if other_keys:
        notes.append(f"{file.name}: ignored keys of service {name!r}: {other_keys}")

    build = service.get("build")
    context, dockerfile_name = directory, "Dockerfile"
    if isinstance(build, str):
        context = (directory / build).resolve()
    elif isinstance(build, dict):
        context = (directory / str(build.get("context", "."))).resolve()
        dockerfile_name = str(build.get("dockerfile", "Dockerfile"))
        if build.get("args"):
            notes.append(f"{file.name}: ignored build args {sorted(build['args'])}")
    # the runner reads the Dockerfile and every COPY source below the context as root: both
    # stay inside the task (a context of '/' copied the host's /etc/shadow into the image)
    task_dir = directory.resolve()
    dockerfile = (context / dockerfile_name).resolve()
    for key, path in (("context", context), ("dockerfile", dockerfile)):
        # within(): a chain of links past PATH_MAX fools resolve() (paths.realpath)
        if build is not None and not (path.is_relative_to(task_dir) and within(path, task_dir)):
            raise TaskError.single(file, f"build {key} {path} lies outside the task",
                                   f"services.{name}.build")
    image = service.get("image")
    if isinstance(image, str) and "${" in image:
        image = None  # Terminal-Bench's generated image name, not a pre-built image
    if build is None and image is None:
        raise TaskError.single(file, "the service has neither 'build' nor a usable 'image'",
                               f"services.{name}")
    env: dict[str, str] = {}
    for key, value in _compose_env_items(service.get("environment")):
        if "T_BENCH_" in value or key == "TEST_DIR":
            continue  # harness wiring; TEST_DIR is set for the verifier below
        env[key] = value
    return _ComposeEnvironment(
        dockerfile=dockerfile if build is not None else None, context=context,
        image=image if isinstance(image, str) else None,
        image_origin=f"{file}: services.{name}.image" if isinstance(image, str) else None,
        env=env, notes=tuple(notes))


def load_terminal_bench_task(directory: Path) -> Task:
    """Load a Terminal-Bench v1 task directory. Raises TaskError listing every problem."""
    directory = directory.resolve()
    problems: list[TaskProblem] = []
    config: TerminalBenchYaml | None = None
    yaml_notes: tuple[str, ...] = ()
    try:
        if (out := link_out(directory / TASK_YAML, directory)) is not None:
            raise TaskError([out])  # its instruction goes to the agent: never a host file
        config, yaml_notes = read_task_yaml(directory / TASK_YAML)
    except TaskError as exc:
        problems.extend(exc.problems)
    if config is not None and not config.instruction_text().strip():
        problems.append(TaskProblem(directory / TASK_YAML, "the instruction is empty",
                                    "instruction"))

    compose: _ComposeEnvironment | None = None
    try:
        compose = read_compose(directory)
    except TaskError as exc:
        problems.extend(exc.problems)
    if compose is not None:
        if compose.dockerfile is not None and not compose.dockerfile.is_file():
            problems.append(TaskProblem(compose.dockerfile, "missing: the task has no Dockerfile"))
        elif compose.dockerfile is None and compose.image is None:
            problems.append(TaskProblem(directory / "Dockerfile",
                                        "missing: the task has no Dockerfile"))

    run_tests = directory / RUN_TESTS_SH
    if not run_tests.is_file():
        problems.append(TaskProblem(run_tests, "missing: the task has no test runner"))
    tests_dir = directory / "tests"
    if not tests_dir.is_dir():
        problems.append(TaskProblem(tests_dir, "missing: the task has no tests directory"))

    solution_sh = directory / "solution.sh"
    for staged in (run_tests, tests_dir, solution_sh):  # copied into a sandbox as root
        if (out := link_out(staged, directory)) is not None:
            problems.append(out)
    if not solution_sh.is_file() and (directory / "solution.yaml").is_file():
        problems.append(TaskProblem(directory / "solution.yaml",
                                    "command-list solutions are not supported; "
                                    "write solution.sh instead"))
    if problems or config is None or compose is None:
        raise TaskError(problems)

    notes = [*yaml_notes, *compose.notes]
    if config.run_tests_in_same_shell:
        notes.append("task.yaml: run_tests_in_same_shell ignored; tests run in a fresh shell")
    tier: Tier | None = config.difficulty if config.difficulty in TIERS else None
    has_solution = solution_sh.is_file()
    return Task(
        id=directory.name,
        path=directory,
        format="terminal-bench",
        instruction=config.instruction_text(),
        environment_dir=compose.context,
        dockerfile=compose.dockerfile,
        docker_image=compose.image,
        docker_image_origin=compose.image_origin,
        environment_env=compose.env,
        # Terminal-Bench containers have network access (task.yaml cannot say otherwise): the
        # run's network default applies, public unless the run says --network-default none
        allow_internet=True,
        network_default=True,
        agent_timeout_s=config.max_agent_timeout_sec,
        tests_dir=tests_dir,
        extra_test_files=(run_tests,),
        test_command=f"bash {TESTS_MOUNT}/{RUN_TESTS_SH}",
        verifier_kind=PARSER_KINDS[config.parser_name],
        verifier_timeout_s=config.max_test_timeout_sec,
        verifier_env={"TEST_DIR": TESTS_MOUNT},
        solution_script=solution_sh if has_solution else None,
        solution_command=f"bash {SOLUTION_MOUNT}/solution.sh" if has_solution else None,
        tier=tier,
        difficulty=config.difficulty,
        category=config.category,
        source="terminal-bench",
        tags=tuple(config.tags),
        author_name=config.author_name,
        author_email=config.author_email,
        expert_time_estimate_min=config.expert_time_estimate_min,
        junior_time_estimate_min=config.junior_time_estimate_min,
        loader_notes=tuple(notes),
        digest=task_digest(directory),
    )
