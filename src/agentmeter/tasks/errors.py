"""The one exception the task loaders raise: every problem names the file and the field."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError


@dataclass(frozen=True)
class TaskProblem:
    """One thing wrong with a task or suite: which file, which field (if any), what."""

    file: Path
    message: str
    field: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}" if self.field is None else f"{self.file}: {self.field}"
        return f"{where}: {self.message}"


class TaskError(Exception):
    """Bad task or suite input. ``problems`` holds every problem found, not just the first."""

    def __init__(self, problems: Sequence[TaskProblem]) -> None:
        if not problems:
            raise ValueError("TaskError needs at least one problem")
        self.problems: tuple[TaskProblem, ...] = tuple(problems)
        if len(self.problems) == 1:
            text = str(self.problems[0])
        else:
            text = f"{len(self.problems)} problems:\n" + "\n".join(
                f"  - {p}" for p in self.problems
            )
        super().__init__(text)

    @classmethod
    def single(cls, file: Path, message: str, field: str | None = None) -> TaskError:
        return cls([TaskProblem(file=file, message=message, field=field)])

    @classmethod
    def merge(cls, errors: Iterable[TaskError]) -> TaskError:
        return cls([p for e in errors for p in e.problems])


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(item)
    return "".join(parts)


def problems_from_validation(file: Path, error: ValidationError) -> list[TaskProblem]:
    """Turn pydantic's errors into problems naming the key as written in the file."""
    problems: list[TaskProblem] = []
    for item in error.errors():
        loc = tuple(x for x in item["loc"] if x not in ("function-after",))
        field = _location(loc) or None
        kind = item["type"]
        if kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "missing":
            message = "required key is missing"
        else:
            message = item["msg"]
            if "input" in item and kind not in ("value_error", "assertion_error"):
                message += f" (got {item['input']!r})"
        problems.append(TaskProblem(file=file, field=field, message=message))
    return problems
