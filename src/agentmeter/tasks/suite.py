"""Suites: a directory of task directories with an optional ``suite.toml``.

``load_suite`` accepts a suite directory, a single task directory (a suite of one) or the name of
a built-in suite (``src/agentmeter/tasks/suites/<name>/``). Everything is validated before
anything runs. One bad task never blocks a suite: a task directory that fails to load is
*skipped* (``Suite.skipped``, each with every problem found) and the rest load; ``strict=True``
(``--strict``, for task authors) collects the problems of all tasks into one TaskError instead.
A suite none of whose tasks load, a bad ``suite.toml`` and duplicate task ids are errors either
way. Subdirectories whose names start with ``.`` or ``_`` are not tasks (shared helpers, VCS).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmeter.notices import notice
from agentmeter.records import TaskRecord
from agentmeter.tasks.errors import TaskError, TaskProblem, problems_from_validation
from agentmeter.tasks.models import Task, TaskFormat
from agentmeter.tasks.native import load_native_task
from agentmeter.tasks.scenario import is_multi_step, load_scenario
from agentmeter.tasks.task_toml import TASK_TOML
from agentmeter.tasks.terminal_bench import TASK_YAML, load_terminal_bench_task

SUITE_TOML = "suite.toml"
BUILTIN_SUITES_DIR = Path(__file__).resolve().parent / "suites"
#: task ids end up in trial ids ('{config}:{task}:{attempt}') and in directory names
TASK_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SuiteToml(BaseModel):
    """The schema of ``suite.toml``."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    version: str | None = None
    description: str | None = None
    subsets: dict[str, list[str]] = Field(default_factory=dict)


class SkippedTask(BaseModel):
    """A task directory of a suite that failed to load, and why (every problem found)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="the directory's name (the id the task would have had)")
    path: Path
    problems: tuple[str, ...]

    @property
    def reason(self) -> str:
        return self.problems[0] if len(self.problems) == 1 else (
            f"{len(self.problems)} problems: " + "; ".join(self.problems))

    @classmethod
    def of(cls, path: Path, error: TaskError) -> SkippedTask:
        return cls(id=path.name, path=path, problems=tuple(str(p) for p in error.problems))


class Suite(BaseModel):
    """A validated set of tasks, in a stable (sorted by id) order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    path: Path
    version: str | None = None
    description: str | None = None
    builtin: bool = False
    tasks: tuple[Task, ...]
    subsets: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: task directories that failed to load (never with ``strict``)
    skipped: tuple[SkippedTask, ...] = ()

    @property
    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise TaskError.single(self.path, f"no task {task_id!r} in suite {self.name!r}")

    def select(self, subset: str | None = None,
               task_ids: Sequence[str] | None = None) -> list[Task]:
        """Tasks of a named subset and/or an explicit id list (both: the intersection)."""
        chosen = self.tasks
        if subset is not None:
            if subset not in self.subsets:
                known = ", ".join(sorted(self.subsets)) or "none"
                raise TaskError.single(self.path / SUITE_TOML,
                                       f"no subset {subset!r} (known: {known})", "subsets")
            wanted = set(self.subsets[subset])
            chosen = tuple(t for t in chosen if _named(t, wanted))
        if task_ids is not None:
            scenarios = {t.scenario.id for t in self.tasks if t.scenario is not None}
            unknown = [i for i in task_ids if i not in self.task_ids and i not in scenarios]
            broken = [k for k in self.skipped if k.id in unknown]
            if broken:
                raise TaskError([TaskProblem(k.path, f"task {k.id!r} failed to load: {k.reason}")
                                 for k in broken])
            if unknown:
                raise TaskError.single(self.path, f"unknown task ids {unknown} "
                                       f"in suite {self.name!r}")
            ids = set(task_ids)
            chosen = tuple(t for t in chosen if _named(t, ids))
        return list(chosen)

    def skipped_in(self, subset: str | None = None) -> list[SkippedTask]:
        """The skipped tasks a selection by ``subset`` would have included."""
        if subset is None:
            return list(self.skipped)
        wanted = set(self.subsets.get(subset, ()))
        return [k for k in self.skipped if k.id in wanted]

    def task_records(self) -> list[TaskRecord]:
        return [t.to_record(suite=self.name) for t in self.tasks]


def _named(task: Task, names: set[str]) -> bool:
    """A task is named by its id, or a scenario's step by the scenario's id."""
    return task.id in names or (task.scenario is not None and task.scenario.id in names)


def detect_format(directory: Path) -> TaskFormat | None:
    """The task format of a directory, or None if it is not a task."""
    has_toml = (directory / TASK_TOML).is_file()
    has_yaml = (directory / TASK_YAML).is_file()
    if has_toml and has_yaml:
        raise TaskError.single(directory, f"has both {TASK_TOML} and {TASK_YAML}; "
                               "cannot tell the task format")
    if has_toml:
        return "native"
    if has_yaml:
        return "terminal-bench"
    return None


def load_task(directory: Path) -> Task:
    """Load one task directory of either format."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TaskError.single(directory, "not a directory")
    if not TASK_ID_PATTERN.match(directory.resolve().name):
        raise TaskError.single(directory, "task directory names may only contain letters, "
                               "digits, '.', '_' and '-' (the name is the task id)")
    fmt = detect_format(directory)
    if fmt == "native":
        return load_native_task(directory)
    if fmt == "terminal-bench":
        return load_terminal_bench_task(directory)
    raise TaskError.single(directory, f"not a task: no {TASK_TOML} or {TASK_YAML}")


def load_task_dir(directory: Path) -> list[Task]:
    """A task directory's tasks: one, or a multi-step task's steps (a scenario)."""
    directory = Path(directory)
    if detect_format(directory) == "native" and is_multi_step(directory):
        if not TASK_ID_PATTERN.match(directory.resolve().name):
            raise TaskError.single(directory, "task directory names may only contain letters, "
                                   "digits, '.', '_' and '-' (the name is the task id)")
        return load_scenario(directory)
    return [load_task(directory)]


def builtin_suite_names() -> list[str]:
    if not BUILTIN_SUITES_DIR.is_dir():
        return []
    return sorted(p.name for p in BUILTIN_SUITES_DIR.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")))


def _read_suite_toml(file: Path) -> SuiteToml:
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError.single(file, f"invalid TOML: {exc}") from None
    try:
        return SuiteToml.model_validate(data)
    except ValidationError as exc:
        raise TaskError(problems_from_validation(file, exc)) from None


def _candidate_dirs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")))


def _is_nested_suite(directory: Path) -> bool:
    """A folder with no task file of its own whose sub-folders hold tasks."""
    if (directory / TASK_TOML).exists() or (directory / TASK_YAML).exists():
        return False
    return any((d / TASK_TOML).is_file() or (d / TASK_YAML).is_file()
               for d in _candidate_dirs(directory))


def _load_suite_dir(directory: Path, builtin: bool, strict: bool) -> Suite:
    problems: list[TaskProblem] = []
    skipped: list[SkippedTask] = []
    meta = SuiteToml()
    suite_file = directory / SUITE_TOML
    if suite_file.is_file():
        try:
            meta = _read_suite_toml(suite_file)
        except TaskError as exc:
            problems.extend(exc.problems)
    tasks: list[Task] = []
    for sub in _candidate_dirs(directory):
        if _is_nested_suite(sub):  # Harbor skips a folder of tasks inside a folder of tasks
            notice(f"{sub}: a directory of tasks, not a task: not run (give it as a suite of "
                   "its own to run its tasks)")
            continue
        load_or_skip(sub, strict, tasks, problems, skipped)
    if not tasks and skipped:
        problems.extend(TaskProblem(s.path, f"skipped: {s.reason}") for s in skipped)
        problems.append(TaskProblem(directory, f"none of the suite's {len(skipped)} tasks "
                                    "loaded (each problem is listed above)"))
    elif not tasks and not problems:
        problems.append(TaskProblem(directory, "the suite has no tasks"))
    problems.extend(duplicate_problems(tasks, directory))
    # a task that failed to load still has an id: its own problem says what is wrong with it
    known = {d.name for d in _candidate_dirs(directory)} | {t.id for t in tasks}
    for subset, ids in meta.subsets.items():
        unknown = [i for i in ids if i not in known]
        if unknown:
            problems.append(TaskProblem(suite_file, f"unknown task ids {unknown}",
                                        f"subsets.{subset}"))
        if not ids:
            problems.append(TaskProblem(suite_file, "empty subset", f"subsets.{subset}"))
    if problems:
        raise TaskError(problems)
    return Suite(
        name=meta.name or directory.name,
        path=directory,
        version=meta.version,
        description=meta.description,
        builtin=builtin,
        tasks=tuple(sorted(tasks, key=lambda t: t.id)),
        subsets={k: tuple(v) for k, v in meta.subsets.items()},
        skipped=tuple(skipped),
    )


def load_or_skip(directory: Path, strict: bool, tasks: list[Task],
                 problems: list[TaskProblem], skipped: list[SkippedTask]) -> None:
    """Load the task(s) of ``directory`` into ``tasks``; one that fails to load is a problem
    when ``strict``, else skipped with its reason (one bad task never blocks a suite)."""
    try:
        tasks.extend(load_task_dir(directory))
    except TaskError as exc:
        if strict:
            problems.extend(exc.problems)
        else:
            skipped.append(SkippedTask.of(directory, exc))


def duplicate_problems(tasks: Sequence[Task], where: Path) -> list[TaskProblem]:
    """Same id twice, or ids differing only by case (they would share artifact directories
    on case-insensitive file systems)."""
    seen: dict[str, Task] = {}
    problems: list[TaskProblem] = []
    for task in tasks:
        key = task.id.lower()
        if key in seen:
            problems.append(TaskProblem(where, f"duplicate task id {task.id!r}: "
                                        f"{seen[key].path} and {task.path}"))
        else:
            seen[key] = task
    return problems


def load_suite(source: str | Path, strict: bool = False) -> Suite:
    """Load a suite directory, a single task directory, or a built-in suite by name. Task
    directories that fail to load are skipped (``Suite.skipped``) unless ``strict``; a single
    task directory that fails to load is an error."""
    path = Path(source).expanduser()
    if not path.exists():
        name = str(source)
        if "/" not in name and name in builtin_suite_names():
            return _load_suite_dir(BUILTIN_SUITES_DIR / name, builtin=True, strict=strict)
        builtins = ", ".join(builtin_suite_names()) or "none"
        raise TaskError.single(path, f"no such directory or built-in suite "
                               f"(built-in suites: {builtins})")
    if not path.is_dir():
        raise TaskError.single(path, "not a directory: expected a task or a suite directory")
    path = path.resolve()
    if detect_format(path) is not None:
        tasks = load_task_dir(path)
        return Suite(name=path.name if len(tasks) > 1 or tasks[0].scenario else tasks[0].id,
                     path=path, tasks=tuple(tasks))
    if (path / SUITE_TOML).is_file() or any(detect_format(d) for d in _candidate_dirs(path)):
        return _load_suite_dir(path, builtin=path.parent == BUILTIN_SUITES_DIR, strict=strict)
    raise TaskError.single(path, f"neither a task ({TASK_TOML} or {TASK_YAML}) nor a suite "
                           f"({SUITE_TOML} or task subdirectories)")


def load_suites(sources: Sequence[str | Path], strict: bool = False) -> Suite:
    """Several sources combined into one suite; task ids must be unique across them."""
    if not sources:
        raise ValueError("load_suites needs at least one source")
    suites: list[Suite] = []
    errors: list[TaskError] = []
    for source in sources:
        try:
            suites.append(load_suite(source, strict))
        except TaskError as exc:
            errors.append(exc)
    if errors:
        raise TaskError.merge(errors)
    return combine_suites(suites)


def combine_suites(suites: Sequence[Suite]) -> Suite:
    """Several loaded suites (directories, datasets) as one; task ids must be unique across
    them."""
    if not suites:
        raise ValueError("combine_suites needs at least one suite")
    if len(suites) == 1:
        return suites[0]
    tasks = [t for s in suites for t in s.tasks]
    duplicates = duplicate_problems(tasks, suites[0].path)
    if duplicates:
        raise TaskError(duplicates)
    return Suite(name="+".join(s.name for s in suites), path=suites[0].path,
                 tasks=tuple(sorted(tasks, key=lambda t: t.id)),
                 skipped=tuple(k for s in suites for k in s.skipped))
