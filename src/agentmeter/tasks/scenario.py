"""Scenarios: Harbor's multi-step tasks, which are also AgencyBench's scenarios.

A task directory whose ``task.toml`` has ``[[steps]]`` is a scenario: an ordered list of steps
sharing one environment and one sandbox. Each step loads as an ordinary :class:`Task`, with id
``<directory>.<step name>`` and its files in ``steps/<name>/``:

- ``instruction.md`` (required), the step's prompt;
- ``tests/`` (layered over the scenario's own ``tests/``: the step's files win);
- ``solution/solve.sh``, its reference solution;
- ``workdir/``, files merged into the working directory before the step (a ``setup.sh`` there
  runs as root first, then is removed).

Harbor keys per step: ``min_reward`` (a number, or per reward key), ``contributes_to_reward``,
``agent.timeout_sec``, ``verifier.timeout_sec``/``env``; and ``multi_step_reward_strategy``
(``mean``/``final``). agentmeter's own: ``steps.verifier.kind``/``pass_threshold`` and the
``[scenario]`` section (rounds per step with feedback, halting, the feedback mode); without one
a step gets one round, as in Harbor. How a scenario runs: ``runner/scenario.py``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from agentmeter.tasks.compose import read_compose
from agentmeter.tasks.errors import TaskError, TaskProblem
from agentmeter.tasks.models import (
    SOLUTION_MOUNT,
    ScenarioConfig,
    SeparateVerifier,
    Task,
    task_digest,
)
from agentmeter.tasks.native import (
    INSTRUCTION_MD,
    _artifacts,
    build_task,
    environment_files,
    instruction_problems,
    link_out,
    verifier_file_problems,
)
from agentmeter.tasks.phases import step_separate, verifier_network, verifier_network_stated
from agentmeter.tasks.task_toml import TASK_TOML, StepEntry, TaskToml, kind_pass_threshold, read_task_toml

STEPS_DIR = "steps"


def is_multi_step(directory: Path) -> bool:
    """Whether ``directory``'s task.toml has ``steps`` (its schema is checked by the loader)."""
    try:
        data = tomllib.loads((directory / TASK_TOML).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # the task loader says what is wrong with the file
    return "steps" in data


def load_scenario(directory: Path) -> list[Task]:
    """The steps of a multi-step task directory, in order. Raises TaskError listing every
    problem (of the scenario and of all its steps)."""
    directory = directory.resolve()
    if (out := link_out(directory / TASK_TOML, directory)) is not None:
        raise TaskError([out])
    config = read_task_toml(directory / TASK_TOML)
    if not config.steps:
        raise TaskError.single(directory / TASK_TOML, "not a multi-step task", "steps")
    problems: list[TaskProblem] = [out for read in (directory / "tests",
                                                    directory / "tests" / "Dockerfile")
                                   if (out := link_out(read, directory)) is not None]
    dockerfile, setup_script = environment_files(directory, config, problems)
    sidecars = read_compose(directory / "environment")[0]
    if sidecars:  # runner/scenario.py runs one sandbox through every step
        problems.append(TaskProblem(directory / "environment", "compose sidecars "
                                    f"({', '.join(s.name for s in sidecars)}) are not run for "
                                    "multi-step tasks: the task is not run", "services"))
    section = config.scenario
    ids = tuple(f"{directory.name}.{s.name}" for s in config.steps)
    scenario = ScenarioConfig(
        id=directory.name, steps=ids,
        max_attempts=section.max_attempts if section else 1,
        halt_on_fail=section.halt_on_fail if section else False,
        feedback=section.feedback if section else "template",
        reward_strategy=config.multi_step_reward_strategy or "mean",
        source=section.source if section else None)
    digest = task_digest(directory)  # the steps share an environment: any change is every step's
    tasks: list[Task] = []
    for i, step in enumerate(config.steps):
        try:
            tasks.append(_load_step(directory, config, step, i, scenario, dockerfile,
                                    setup_script, digest))
        except TaskError as exc:
            problems.extend(exc.problems)
    if problems:
        raise TaskError(problems)
    return tasks


def _step_separate(directory: Path, config: TaskToml, step: StepEntry,
                   index: int) -> SeparateVerifier | None:
    """A step's verifier environment as Harbor resolves it: the step's ``environment_mode``,
    else separate when the step has a ``[steps.verifier.environment]``, else the task's. A
    separate one is built from the step's ``tests/Dockerfile``, else the task's, else the step's
    (or task's) ``docker_image``, else a copy of the task's environment; its network is the
    step verifier's, else its environment's, else the task verifier's."""
    sv = step.verifier
    if not step_separate(config, step):
        return None
    venv = sv.environment or config.verifier.environment
    dockerfile = next((d for d in (directory / STEPS_DIR / step.name / "tests" / "Dockerfile",
                                   directory / "tests" / "Dockerfile") if d.is_file()), None)
    phase = sv if (sv.network_mode or sv.allowed_hosts) else config.verifier
    net_mode, hosts = verifier_network(config, phase, venv)
    where = f"steps[{index}].verifier.environment" if sv.environment is not None \
        else "verifier.environment"
    return SeparateVerifier(dockerfile=dockerfile,
                            docker_image=venv.docker_image if venv is not None else None,
                            origin=f"{directory / TASK_TOML}: {where}",
                            allow_internet=net_mode == "public",
                            allowed_hosts=hosts if net_mode == "allowlist" else (),
                            network_default=not verifier_network_stated(config, phase, venv))


def _load_step(directory: Path, config: TaskToml, step: StepEntry, index: int,
               scenario: ScenarioConfig, dockerfile: Path | None, setup_script: Path | None,
               digest: str) -> Task:
    step_dir = directory / STEPS_DIR / step.name
    if not step_dir.is_dir():
        raise TaskError.single(step_dir, f"missing: the directory of step {step.name!r}",
                               f"steps[{index}].name")
    instruction, problems = instruction_problems(step_dir / INSTRUCTION_MD, directory)
    kind = step.verifier.kind or config.verifier.kind
    shared_tests = directory / "tests"
    # copied into a sandbox as root or as the agent (workdir/ seeds the agent's directory): a
    # link to a host directory would copy it there (security review 3)
    for read in (step_dir, step_dir / "tests", step_dir / "tests" / "Dockerfile",
                 step_dir / "solution", step_dir / "workdir"):
        if (out := link_out(read, directory)) is not None:
            problems.append(out)
    problems += verifier_file_problems(kind, None, [step_dir / "tests", shared_tests])
    solution_dir = step_dir / "solution"
    has_solution = (solution_dir / "solve.sh").is_file()
    if solution_dir.is_dir() and not has_solution:
        problems.append(TaskProblem(solution_dir / "solve.sh",
                                    "missing: solution/ exists but has no solve.sh"))
    if problems:
        raise TaskError(problems)
    base = build_task(directory, config, instruction, dockerfile, setup_script,
                      solution_dir if has_solution else None)
    threshold = step.verifier.pass_threshold
    if threshold is None:
        threshold = base.pass_threshold if kind == config.verifier.kind \
            else kind_pass_threshold(kind)
    min_reward = step.min_reward
    workdir = step_dir / "workdir"
    step_artifacts = _artifacts(TaskToml.model_validate({"artifacts": step.artifacts}))
    return base.model_copy(update={
        "id": scenario.steps[index],
        "path": step_dir,
        "tests_dir": step_dir / "tests",
        "tests_base_dir": shared_tests if shared_tests.is_dir() else None,
        "verifier_kind": kind,
        "pass_threshold": threshold,
        "verifier_timeout_s": step.verifier.timeout_sec or config.verifier.timeout_sec,
        "verifier_env": config.verifier.env | step.verifier.env,
        "agent_timeout_s": step.agent.timeout_sec or base.agent_timeout_s,
        "solution_command": f"bash {SOLUTION_MOUNT}/solve.sh" if has_solution else None,
        "scenario": scenario,
        "scenario_position": index + 1,
        "min_reward": ({"reward": min_reward} if isinstance(min_reward, float | int)
                       else min_reward),
        "contributes_to_reward": step.contributes_to_reward,
        "step_workdir": workdir if workdir.is_dir() else None,
        "separate_verifier": _step_separate(directory, config, step, index),
        "artifacts": (*base.artifacts, *step_artifacts),
        "digest": digest,
    })
