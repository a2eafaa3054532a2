"""Reading a TOML file into a pydantic model, with errors that name the file and the field.

The one way every configuration file (models, pricing snapshots, budgets, import mappings,
grids) is read, so bad input always reads ``FILE: field a.b: message``."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def read_toml(path: Path, error: type[Exception]) -> dict[str, Any]:
    """The file's table; ``error`` names the file when it cannot be read or parsed."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: {e}") from None


def validate_toml(model: type[M], data: dict[str, Any], path: Path, error: type[Exception]) -> M:
    """``model`` from ``data``; ``error`` names the file and the first invalid field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise error(f"{path}: field {where}: {first['msg']}") from None
