"""Native tasks: Harbor's task contract.

Layout: task.toml, instruction.md, environment/, tests/test.sh, solution/solve.sh.

Harbor tasks load unmodified: every key of Harbor's ``task.toml`` is accepted (its schema and
validation: ``tasks/task_toml.py``). Keys describing features agentmeter cannot honour (GPUs,
TPUs, Windows) are accepted at their default values
and are an error otherwise, so a task never runs differently from what it asks for; multi-step
tasks load as scenarios (``tasks/scenario.py``). ``[metadata]`` is free-form in Harbor:
keys we do not interpret are kept in ``Task.metadata_extra``. Every other section is strict.
agentmeter's own keys: ``environment.base``, ``verifier.kind`` (default ``reward-file``, Harbor's
reward files) and ``verifier.pass_threshold`` (default 1.0; 0.6 for kind ``rubric``, AgencyBench's
"a task is passed if the task score is at least 60%"). A ``rubric`` task has ``tests/rubric.toml``
(validated here) instead of ``tests/test.sh``.

Phases: the agent (and the oracle) runs as Harbor runs it: as ``agent.user`` (a name or
uid[:gid] of the image), else as the image's final ``USER``, else as root -- the sandbox's root,
unprivileged outside (docs/security.md); agentmeter's own ``agent.sandbox_account = true`` (its
built-in suites) runs it as agentmeter's unprivileged account, uid 1000. ``verifier.user`` may be
``root`` (default) or ``agent``; both phases share one sandbox, whose network is switched
between them when the verifier's differs from the agent's (``Task.verifier_network``, as Harbor
switches it: sandbox/netswitch.py).
``build_timeout_sec`` bounds the environment build; ``artifacts`` are copied out after the trial.

``environment.docker_image`` names a prebuilt image, used as Harbor does (see
``runner/tasksandbox.py: base_image``): with ``environment/Dockerfile`` too, the Dockerfile is the
recipe and the image its prebuilt form; the docker backend runs on the image (the daemon's copy,
else pulled) and builds the Dockerfile only when the image cannot be had; the local backend,
which never pulls, builds the Dockerfile. With only ``docker_image`` the image is the
environment: the docker backend pulls it, and a run on the local backend is refused before it
starts, naming this file and key.
"""

from __future__ import annotations

from pathlib import Path

from agentmeter.paths import realpath, within
from agentmeter.tasks.compose import read_compose
from agentmeter.tasks.errors import TaskError, TaskProblem
from agentmeter.tasks.models import (
    IMAGE_USER,
    SOLUTION_MOUNT,
    TIERS,
    Budgets,
    CollectHook,
    Healthcheck,
    McpServer,
    PhaseNetwork,
    SandboxUser,
    SeparateVerifier,
    Task,
    TaskArtifact,
    Tier,
    task_digest,
)
from agentmeter.tasks.phases import (
    network_stated,
    phase_network,
    sandbox_network,
    separate_verifier,
    stated_mode,
    verifier_network,
    verifier_network_stated,
)
from agentmeter.tasks.task_toml import (
    DIFFTEST_KIND,
    RUBRIC_KIND,
    TASK_TOML,
    TaskToml,
    pass_threshold,
    read_task_toml,
    size_to_mb,
)
from agentmeter.tasks.toml_checks import AGENT_USERS, ignored_notices
from agentmeter.verify.difftest.config import CasesError, DifftestConfig, read_cases
from agentmeter.verify.mounts import TESTS_MOUNT
from agentmeter.verify.rubric.config import CAPTURE_PLAN_JSON, RUBRIC_TOML, RubricError, load_rubric

INSTRUCTION_MD = "instruction.md"


def _agent_user(config: TaskToml) -> str | None:
    """Harbor's agent user: ``[agent] user``, else the image's USER (root when none); None
    (agentmeter's uid 1000) with agentmeter's ``[agent] sandbox_account = true``."""
    if config.agent.sandbox_account:
        return None
    return IMAGE_USER if config.agent.user is None else str(config.agent.user)


def _verifier_user(value: str | int | None) -> SandboxUser:
    return "agent" if value is not None and str(value) in AGENT_USERS else "root"


def _artifacts(config: TaskToml) -> tuple[TaskArtifact, ...]:
    out = []
    for art in config.artifacts:
        if isinstance(art, str):
            out.append(TaskArtifact(source=art, destination=art.strip("/")))
        else:
            out.append(TaskArtifact(source=art.source,
                                    destination=(art.destination or art.source).strip("/"),
                                    exclude=tuple(art.exclude),
                                    service=None if art.service in (None, "main") else art.service))
    return tuple(out)


def _healthcheck(config: TaskToml) -> Healthcheck | None:
    hc = config.environment.healthcheck
    if hc is None:
        return None
    return Healthcheck(command=hc.command, interval_s=hc.interval_sec, timeout_s=hc.timeout_sec,
                       start_period_s=hc.start_period_sec,
                       start_interval_s=hc.start_interval_sec, retries=hc.retries)


def _collect(config: TaskToml) -> tuple[CollectHook, ...]:
    return tuple(CollectHook(command=h.command, timeout_s=h.timeout_sec,
                             user=_verifier_user(h.user), service=h.service)
                 for h in config.verifier.collect)


def _separate(config: TaskToml, directory: Path) -> SeparateVerifier | None:
    """Harbor's separate verifier: ``tests/Dockerfile``, else ``[verifier.environment]
    docker_image``, else a copy of the task's environment."""
    if not separate_verifier(config):
        return None
    venv = config.verifier.environment
    dockerfile = directory / "tests" / "Dockerfile"
    mode, hosts = verifier_network(config, config.verifier, venv)
    return SeparateVerifier(
        dockerfile=dockerfile if dockerfile.is_file() else None,
        docker_image=venv.docker_image if venv is not None else None,
        origin=f"{directory / TASK_TOML}: verifier.environment",
        allow_internet=mode == "public", allowed_hosts=hosts if mode == "allowlist" else (),
        network_default=not verifier_network_stated(config, config.verifier, venv))


def _shared_verifier_network(config: TaskToml) -> PhaseNetwork | None:
    """The network of a verifier sharing the agent's sandbox (``Task.verifier_network``), when
    the task states one for it or it differs from the agent's; a scenario's steps share one
    network (toml_checks.py)."""
    if separate_verifier(config) or config.steps:
        return None
    mode, hosts = phase_network(config, config.verifier)
    if stated_mode(config.verifier) is None and (mode, hosts) == sandbox_network(config):
        return None
    return PhaseNetwork(allow_internet=mode == "public",
                        allowed_hosts=hosts if mode == "allowlist" else ())


def link_out(path: Path, root: Path) -> TaskProblem | None:
    """A problem when ``path`` is (or lies below) a link leading out of the task ``root``: the
    runner reads it as root, and the instruction goes to the agent and its provider (a task
    checked out by hand with ``instruction.md -> ~/.aws/credentials``). gitfetch refuses such
    links for tasks it fetches; this covers a task directory given as is."""
    if not (path.is_symlink() or path.exists()):
        return None
    if within(path, root):
        return None
    target = realpath(path)
    where = "to a path longer than the system allows" if target is None else f"to {target}"
    return TaskProblem(path, f"a symbolic link leading out of the task ({where}): not read")


def instruction_problems(instruction_file: Path,
                         root: Path | None = None) -> tuple[str, list[TaskProblem]]:
    """An instruction file's text, and what is wrong with it (``root``: the task's directory,
    which the file must not lead out of; default: the file's own directory)."""
    out = link_out(instruction_file, root or instruction_file.parent)
    if out is not None:
        return "", [out]
    if not instruction_file.is_file():
        return "", [TaskProblem(instruction_file, "missing: the task has no instruction")]
    instruction = instruction_file.read_text(encoding="utf-8")
    if not instruction.strip():
        return instruction, [TaskProblem(instruction_file, "the instruction is empty")]
    if "\x00" in instruction:  # no agent CLI can be given it as an argument
        return instruction, [TaskProblem(instruction_file, "the instruction contains a NUL "
                                         f"character (at offset {instruction.index(chr(0))})")]
    return instruction, []


def verifier_file_problems(kind: str, difftest: DifftestConfig | None,
                           tests_dirs: list[Path]) -> list[TaskProblem]:
    """What a verifier kind needs among its files (``tests_dirs``: the step's own first, then
    the scenario's shared ones), checked at load time."""
    if kind == DIFFTEST_KIND and difftest is not None:
        cases_file = tests_dirs[0] / difftest.cases
        # read as root on the host: difftest.cases = "/dev/zero", "../../x" or a link out of
        # tests/ named a host file (read whole; its cases run in the sandbox)
        if (out := link_out(cases_file, tests_dirs[0])) is not None:
            return [TaskProblem(cases_file, out.message, "difftest.cases")]
        try:
            read_cases(cases_file)
        except CasesError as e:
            return [TaskProblem(cases_file, str(e).removeprefix(f"{cases_file}: "),
                                "difftest.cases")]
        return []
    if kind == RUBRIC_KIND:
        home = next((d for d in tests_dirs if (d / RUBRIC_TOML).is_file()), tests_dirs[0])
        return rubric_problems(home)
    if kind in ("reward-file", "pytest") and not any((d / "test.sh").is_file() for d in tests_dirs):
        return [TaskProblem(tests_dirs[0] / "test.sh", "missing: the task has no verifier script")]
    return []


def load_native_task(directory: Path) -> Task:
    """Load a Harbor-layout task directory. Raises TaskError listing every problem; a
    multi-step task (``[[steps]]``) is loaded by ``tasks.scenario.load_scenario``."""
    directory = directory.resolve()
    toml_file = directory / TASK_TOML
    problems: list[TaskProblem] = []
    config: TaskToml | None = None
    try:
        if (out := link_out(toml_file, directory)) is not None:
            raise TaskError([out])
        config = read_task_toml(toml_file)
    except TaskError as exc:
        problems.extend(exc.problems)
    if config is not None and config.steps:
        raise TaskError.single(toml_file, "a multi-step task: its steps load as a scenario "
                               "(load it as a suite)", "steps")

    instruction, found = instruction_problems(directory / INSTRUCTION_MD)
    problems += found
    if config is not None:
        problems += verifier_file_problems(config.verifier.kind, config.difftest,
                                           [directory / "tests"])
    dockerfile, setup_script = environment_files(directory, config, problems)
    # copied in as root (tests/, a separate verifier's tests/Dockerfile, solution/)
    for read in (dockerfile, setup_script, directory / "tests",
                 directory / "tests" / "Dockerfile", directory / "solution"):
        if read is not None and (out := link_out(read, directory)) is not None:
            problems.append(out)

    solution_dir = directory / "solution"
    solve_sh = solution_dir / "solve.sh"
    if solution_dir.is_dir() and not solve_sh.is_file():
        problems.append(TaskProblem(solve_sh, "missing: solution/ exists but has no solve.sh"))

    if config is not None:
        problems += service_problems(config, directory)
    if problems or config is None:
        raise TaskError(problems)
    return build_task(directory, config, instruction, dockerfile, setup_script,
                      solution_dir if solve_sh.is_file() else None)


def environment_files(directory: Path, config: TaskToml | None,
                      problems: list[TaskProblem]) -> tuple[Path | None, Path | None]:
    """The environment's Dockerfile and setup script (either may be None); problems appended."""
    env_dir = directory / "environment"
    dockerfile = env_dir / "Dockerfile"
    setup_script = env_dir / "setup.sh"
    has_dockerfile, has_setup = dockerfile.is_file(), setup_script.is_file()
    docker_image = config.environment.docker_image if config else _raw_docker_image(directory)
    if has_dockerfile and has_setup:
        problems.append(TaskProblem(env_dir, "has both a Dockerfile and setup.sh; keep one"))
    if not (has_dockerfile or has_setup or docker_image):
        problems.append(TaskProblem(
            env_dir, "missing: needs a Dockerfile or setup.sh (or environment.docker_image in "
            f"{TASK_TOML})"))
    problems += compose_problems(env_dir)[0]
    return dockerfile if has_dockerfile else None, setup_script if has_setup else None


def _raw_docker_image(directory: Path) -> object:
    """``environment.docker_image`` of a task.toml that did not validate (its other problems are
    reported; a task naming an image is not also told it lacks a Dockerfile)."""
    import tomllib

    try:
        data = tomllib.loads((directory / TASK_TOML).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    env = data.get("environment")
    return env.get("docker_image") if isinstance(env, dict) else None


def compose_problems(env_dir: Path) -> tuple[list[TaskProblem], list[str]]:
    """What is wrong with the environment's ``docker-compose.yaml`` and what of it is ignored
    (its sidecars: tasks/compose.py)."""
    _, _, problems, notes = read_compose(env_dir)
    return problems, notes


def service_problems(config: TaskToml, directory: Path) -> list[TaskProblem]:
    """Artifacts and collect hooks naming a compose service the task does not have."""
    names = {"main"} | {s.name for s in read_compose(directory / "environment")[0]}
    problems = []
    where = [(f"artifacts[{i}].service", None if isinstance(a, str) else a.service)
             for i, a in enumerate(config.artifacts)]
    where += [(f"verifier.collect[{i}].service", h.service)
              for i, h in enumerate(config.verifier.collect)]
    for key, service in where:
        if service is not None and service not in names:
            problems.append(TaskProblem(directory / TASK_TOML, f"{service!r}: no such service in "
                                        "environment/docker-compose.yaml", key))
    return problems


def rubric_problems(tests_dir: Path) -> list[TaskProblem]:
    """What is wrong with a rubric task's ``tests/rubric.toml`` (and capture plan), by key."""
    plan = tests_dir / CAPTURE_PLAN_JSON
    for file in (tests_dir / RUBRIC_TOML, plan):  # read as root on the host
        if (out := link_out(file, tests_dir)) is not None:
            return [out]
    try:
        load_rubric(tests_dir / RUBRIC_TOML, plan if plan.is_file() else None)
    except RubricError as e:
        return [TaskProblem(e.file, message, None if key == "(file)" else key)
                for key, message in e.problems]
    return []


def _hosts_key(config: TaskToml) -> str:
    """The key the sandbox's allowlist comes from (tasks/phases.py, ``sandbox_network``)."""
    step = config.steps[0].agent if config.steps and stated_mode(config.steps[0].agent) else None
    phase = step or config.agent
    if phase.allowed_hosts and stated_mode(phase) == "allowlist":
        return f"{'steps[0].agent' if step else 'agent'}.allowed_hosts"
    return "environment.allowed_hosts"


def build_task(directory: Path, config: TaskToml, instruction: str, dockerfile: Path | None,
                setup_script: Path | None, solution_dir: Path | None) -> Task:
    meta, env, agent, verifier = config.metadata, config.environment, config.agent, config.verifier
    tier: Tier | None = meta.tier
    if tier is None:
        tier = next((t for t in TIERS if t == meta.difficulty), None)
    mode, hosts = sandbox_network(config)
    package = config.task
    sidecars, main_deps, _, _ = read_compose(directory / "environment")
    tags = meta.tags or (package.keywords if package else [])
    author = package.authors[0] if package and package.authors else None
    return Task(
        id=directory.name,
        path=directory,
        format="native",
        instruction=instruction,
        environment_dir=directory / "environment",
        dockerfile=dockerfile,
        setup_script=setup_script,
        docker_image=env.docker_image,
        docker_image_origin=(f"{directory / TASK_TOML}: environment.docker_image"
                             if env.docker_image else None),
        base=env.base,
        workdir=env.workdir,
        environment_env=env.env,
        build_timeout_s=env.build_timeout_sec,
        cpus=env.cpus,
        memory_mb=env.memory_mb if env.memory is None else size_to_mb(env.memory),
        storage_mb=env.storage_mb if env.storage is None else size_to_mb(env.storage),
        allow_internet=mode == "public",
        allowed_hosts=hosts,
        allowed_hosts_origin=(f"{directory / TASK_TOML}: {_hosts_key(config)}"
                              if hosts else None),
        network_default=not network_stated(config),
        sidecars=tuple(sidecars),
        mcp_servers=tuple(McpServer(name=m.name, transport=m.transport, url=m.url,
                                    command=m.command, args=tuple(m.args))
                          for m in env.mcp_servers),
        main_depends_on=main_deps,
        agent_user=_agent_user(config),
        agent_timeout_s=agent.timeout_sec if agent.timeout_sec is not None else 600.0,
        budgets=Budgets(max_tokens=agent.max_tokens, max_usd=agent.max_usd,
                        max_calls=agent.max_calls),
        tests_dir=directory / "tests",
        test_command=f"bash {TESTS_MOUNT}/test.sh",
        verifier_kind=verifier.kind,
        pass_threshold=pass_threshold(verifier),
        verifier_timeout_s=verifier.timeout_sec,
        verifier_env=verifier.env,
        verifier_user=_verifier_user(verifier.user),
        difftest=config.difftest,
        solution_dir=solution_dir,
        solution_script=solution_dir / "solve.sh" if solution_dir else None,
        solution_command=f"bash {SOLUTION_MOUNT}/solve.sh" if solution_dir else None,
        solution_env=config.solution.env,
        tier=tier,
        difficulty=meta.difficulty,
        category=meta.category,
        source=meta.source or config.source,
        tags=tuple(tags),
        author_name=meta.author_name or (author.name if author else None),
        author_email=meta.author_email or (author.email if author else None),
        description=package.description or None if package else None,
        expert_time_estimate_min=meta.expert_time_estimate_min,
        junior_time_estimate_min=meta.junior_time_estimate_min,
        artifacts=_artifacts(config),
        healthcheck=_healthcheck(config),
        collect=_collect(config),
        separate_verifier=_separate(config, directory),
        verifier_network=_shared_verifier_network(config),
        metadata_extra=dict(meta.model_extra or {}),
        loader_notes=(*ignored_notices(config, directory / TASK_TOML),
                      *compose_problems(directory / "environment")[1]),
        digest=task_digest(directory),
    )
